"""The loop of the simulated daemons (MIG manager, ComputeDomain controller)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def keep_stepping(step: Callable[[], None], stop: threading.Event, what: str, interval: float = 0.5) -> None:
    """`step` every `interval` seconds until `stop` is set; a step that fails is logged and the next one runs, as
    the daemon it plays keeps going."""
    while not stop.is_set():
        try:
            step()
        except Exception:  # noqa: BLE001 - the simulator keeps going
            log.exception("%s: a step failed", what)
        stop.wait(interval)
