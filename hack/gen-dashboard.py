"""Write the chart's Grafana dashboard from superpod.controller.dashboard; with --check, fail if it is stale."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from superpod.controller.dashboard import dashboard

PATH = Path(__file__).resolve().parents[1] / "charts/superpod-scheduler/dashboards/superpod-scheduler.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="exit 1 if the dashboard differs from what would be written")
    args = ap.parse_args()
    text = json.dumps(dashboard(), indent=2) + "\n"
    if args.check:
        if not PATH.exists() or PATH.read_text() != text:
            print(f"stale generated file (run `python hack/gen-dashboard.py`): {PATH}", file=sys.stderr)
            return 1
        return 0
    PATH.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
