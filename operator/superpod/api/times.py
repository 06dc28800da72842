"""RFC 3339 times, as the Kubernetes API writes them, to and from seconds since the epoch."""

from __future__ import annotations

import datetime
import functools
from typing import Any


@functools.lru_cache(maxsize=256)  # a cycle stamps many objects with the same instant
def rfc3339(t: float, micro: bool = False) -> str:
    """`metadata` times have whole seconds; MicroTime fields (a Lease's renewTime) have microseconds."""
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime(fmt)


def timestamp(value: Any) -> float:
    """Seconds since the epoch of an RFC 3339 time (0 when absent); ValueError when it is not one."""
    if not value:
        return 0.0
    if isinstance(value, datetime.datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"not an RFC 3339 time: {value!r}") from None
    else:
        raise ValueError(f"expected an RFC 3339 time, got {value!r}")
    if parsed.tzinfo is None:
        raise ValueError(f"not an RFC 3339 time (no time zone): {value!r}")
    return parsed.timestamp()
