"""What the hack/gen-*.py scripts share: write a generated file, or with --check say whether it is current."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def write_or_check(doc: str, path: Path, text: Callable[[], str]) -> int:
    """The script's main: writes `path`, or with --check exits 1 if it differs from what would be written."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {path.name} differs from what would be written")
    check = ap.parse_args().check
    made = text()
    if check:
        if not path.exists() or path.read_text() != made:
            print(f"stale generated file (run `python hack/{Path(sys.argv[0]).name}`): {path}", file=sys.stderr)
            return 1
        return 0
    path.write_text(made)
    return 0
