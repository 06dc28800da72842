"""Simulator benchmark: how fast a replay runs; prints figures and the machine, asserts nothing.

Replays the Philly trace (or a window of it) at a load on a preset, once per policy, each in a fresh process so peak
RSS is its own, and prints per policy: wall seconds, jobs, simulated events (submits, gang starts, gang ends) per
wall second, operator cycles per wall second, peak RSS. `gang-firstfit` (no topology search, no reservation) is the
baseline in the same run: the difference is what superpod's exact placement and explanations cost.
Run: .venv/bin/python bench/bench_simulate.py [--window 28d:42d | --window all] [--load 0.8] [--policies ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHILLY = Path(__file__).resolve().parents[2] / "shared" / "data" / "philly" / "philly.csv"


def one(trace: Path, window: str, load: str, policy: str, preset: str) -> dict:
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "superpod.cli", "simulate", "--trace", str(trace), "--format", "philly",
                   "--load", load, "--policy", policy, "--preset", preset, "--out", out, "--no-plots"]
        if window != "all":
            command += ["--window", window]
        started = time.monotonic()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage: its peak RSS in KiB
        wall = time.monotonic() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(command)} failed")
        peak = usage.ru_maxrss
        result = json.loads((Path(out) / "summary.json").read_text())["policies"][policy]
    jobs = result["jobs"].values()
    events = len(jobs) + sum(len(job["attempts"]) for job in jobs) + sum(
        1 for job in jobs for attempt in job["attempts"] if attempt["end"] is not None)
    return {"wall": wall, "jobs": len(result["jobs"]), "events": events, "cycles": result["metrics"]["cycles"],
            "peak_kib": peak, "utilisation": result["utilisation"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=PHILLY)
    parser.add_argument("--window", default="28d:42d", help="a slice of the trace, or 'all'")
    parser.add_argument("--load", default="0.8")
    parser.add_argument("--preset", default="dgx-h100")
    parser.add_argument("--policies", default="gang-firstfit,superpod")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    print(f"trace {args.trace.name} window {args.window} load {args.load} on {args.preset}")
    print(f"{'policy':<16} {'wall s':>8} {'jobs':>7} {'events':>8} {'events/s':>9} {'cycles/s':>9} "
          f"{'peak RSS MiB':>12} {'util':>6}")
    for policy in args.policies.split(","):
        figures = one(args.trace, args.window, args.load, policy, args.preset)
        print(f"{policy:<16} {figures['wall']:>8.1f} {figures['jobs']:>7} {figures['events']:>8} "
              f"{figures['events'] / figures['wall']:>9.0f} {figures['cycles'] / figures['wall']:>9.0f} "
              f"{figures['peak_kib'] / 1024:>12.0f} {figures['utilisation']:>6.3f}", flush=True)


if __name__ == "__main__":
    main()
