"""A dump of a cluster as `kubectl get -o yaml` writes it (a List, or many documents): its objects, from a file or
standard input. Read by `superpod plan`, `superpod top --file` and `superpod simulate`."""

from __future__ import annotations

import sys
from typing import Any

from superpod.api.resources import ConvertError


def items_of(docs: list[Any]) -> list[dict]:
    out: list[dict] = []
    for n, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ConvertError(f"document {n + 1}", "<root>", f"expected a mapping, got {type(doc).__name__}")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List"):
            items = doc.get("items")
            if not isinstance(items, list):
                raise ConvertError(f"{kind} (document {n + 1})", "items", "expected a list")
            out.extend(items_of(items))
        else:
            out.append(doc)
    return out


def read_input(path: str) -> str:
    """A file's text, or standard input's for '-'."""
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()
