"""JSON from the API server, decoded whatever a tenant nested in it. The API server keeps objects nested up to 10,000
levels deep (a custom resource's preserved unknown fields); orjson decodes 1,024. A page of a list or a watch event
holding one such object would fail whole, and with it every object beside it: so a document too deep for orjson is
decoded again with every part below CUT_DEPTH replaced by CUT. What reads the object then sees the cut (a TrainingJob
whose template holds it is Invalid: no pod has a field that deep), and the objects beside it are whole."""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson

CUT_DEPTH = 200  # levels below a document's root; orjson encodes up to 254, so a cut object can be written back
CUT = "<nested deeper than the operator reads>"
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)  # strings whole, so their brackets are text
_CUT_JSON = orjson.dumps(CUT)
log = logging.getLogger(__name__)


def decoded(data: bytes) -> Any:
    """The document in `data`; parts below CUT_DEPTH cut (only when they are there: the common case is orjson's)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        if "depth limit" not in str(e):
            raise
    log.warning("a document of %d bytes nests deeper than orjson decodes: read with its parts below level %d cut",
                len(data), CUT_DEPTH)
    return orjson.loads(cut(data, CUT_DEPTH))


def cut(data: bytes, depth: int) -> bytes:
    """`data` with each array or object that opens below `depth` levels replaced by CUT. One pass of a regular
    expression over the bytes; brackets inside strings are skipped with the strings."""
    parts, level, start, kept = [], 0, -1, 0
    for token in _TOKENS.finditer(data):
        first = data[token.start()]
        if first == 0x22:  # a string
            continue
        if first in (0x5B, 0x7B):  # [ {
            level += 1
            if level == depth + 1:
                start = token.start()
        else:
            if level == depth + 1:
                parts += (data[kept:start], _CUT_JSON)
                kept = token.end()
            level -= 1
    parts.append(data[kept:])
    return b"".join(parts)
