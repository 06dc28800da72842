"""Write the chart's Grafana dashboard from superpod.controller.dashboard; with --check, fail if it is stale."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from generated import write_or_check

from superpod.controller.dashboard import dashboard

PATH = Path(__file__).resolve().parents[1] / "charts/superpod-scheduler/dashboards/superpod-scheduler.json"


def main() -> int:
    return write_or_check(__doc__, PATH, lambda: json.dumps(dashboard(), indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
