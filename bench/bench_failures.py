"""Node failures on the simulator: replacing a lost node's replicas against restarting the gang, on generated traces.

For each seed: `superpod simulate generate --sizes S --seed N ...`, then `superpod simulate --policy superpod
--node-mtbf M --checkpoint C` once with every job's `nodeFailure: Replace` and once with `RestartGang` (the same
failures: each node's failures are drawn from the seed, though which gangs they hit depends on the schedule).
Prints per mode the median (min-max) over seeds of mean JCT, utilisation, useful utilisation (the work kept), GPU-hours
run again after a failure (since the last checkpoint), GPU-hours held while waiting for a replacement, and the
replacements and restarts. Asserts nothing.
Run: .venv/bin/python bench/bench_failures.py [--sizes llm] [--seeds 1-5] [--load 0.9] [--node-mtbf 30d]
     [--checkpoint 1h] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_policies import TRACES, cell, seeds

MODES = ("Replace", "RestartGang")


def replay(args, seed: int, mode: str, out: Path) -> dict:
    cli = [sys.executable, "-m", "superpod.cli", "simulate"]
    trace = out / f"trace-{seed}.csv"
    folder = out / f"{mode}-{seed}"
    command = [*cli, "--trace", str(trace), "--load", args.load, "--policy", "superpod", "--no-plots",
               "--seed", str(seed), "--node-mtbf", args.node_mtbf, "--checkpoint", args.checkpoint,
               "--node-failure", mode, "--out", str(folder)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    policy = json.loads((folder / "summary.json").read_text())["policies"]["superpod"]
    failures = policy["failures"]
    return {"mean JCT": (policy["metrics"]["jct"]["mean"] / 3600, "h"),
            "utilisation": (100 * policy["utilisation"], "%"),
            "useful": (100 * policy["useful_utilisation"], "%"),
            "run again": (failures["redone_gpu_hours"], " GPU-h"),
            "held waiting": (failures["stalled_gpu_hours"], " GPU-h"),
            "node failures": (failures["node_failures"], ""),
            "replacements": (failures["replacements"], ""),
            "restarts": (failures["restarts"], "")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="llm", choices=sorted(TRACES))
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--load", default="0.9", help="one offered load")
    parser.add_argument("--node-mtbf", default="30d", help="each node's mean uptime between failures")
    parser.add_argument("--checkpoint", default="1h", help="how often gangs save their progress")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        for seed in seeds(args.seeds):
            subprocess.run([sys.executable, "-m", "superpod.cli", "simulate", "generate", "--sizes", args.sizes,
                            *TRACES[args.sizes], "--seed", str(seed), "--out", str(out / f"trace-{seed}.csv")],
                           check=True, stdout=subprocess.DEVNULL)
        runs = [(seed, mode) for seed in seeds(args.seeds) for mode in MODES]
        with ThreadPoolExecutor(args.workers) as pool:
            results = list(pool.map(lambda run: replay(args, run[0], run[1], out), runs))
    print(f"{args.sizes} traces, seeds {args.seeds}, load {args.load}, node MTBF {args.node_mtbf}, checkpoint every "
          f"{args.checkpoint}, superpod: median (min-max) over seeds")
    names = list(results[0])
    print(f"  {'mode':<12} " + " ".join(f"{name:>22}" for name in names))
    for mode in MODES:
        rows = [result for (_, run_mode), result in zip(runs, results, strict=True) if run_mode == mode]
        print(f"  {mode:<12} " + " ".join(f"{cell([row[name][0] for row in rows], rows[0][name][1]):>22}"
                                        for name in names))


if __name__ == "__main__":
    main()
