"""Queue policies over several generated traces: one trace is one draw of a chaotic system (a gang that starts a
minute later can move every later start), so a policy is judged by its median over seeds, with the spread.

For each seed: `superpod simulate generate --sizes S --seed N ...`, then `superpod simulate` of every policy at each
load; prints per load and policy the median (min-max) over seeds of mean JCT, idle GPU-time while a job that fits an
idle cluster waits, p99 wait of gangs of 32 GPUs or more, and the share of multi-node gangs placed on the fewest
leaves they could use. Asserts nothing.
Run: .venv/bin/python bench/bench_policies.py [--sizes llm|acme|h20] [--seeds 1-5] [--load 0.9,1.3] [--nodes N]
     [--workers 2]
     [--estimates history|limit|oracle]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

POLICIES = ("superpod,superpod-service,superpod-estimate-backfill,superpod-nobackfill,gang-firstfit-required,"
            "gang-firstfit,gang-spread,random")
TRACES = {  # --sizes -> the generator's arguments, and the replay's (docs/benchmarks.md names these traces)
    "llm": (["--sizes", "llm", "--jobs", "1500", "--tenants", "4", "--mean-duration", "21600"], []),
    "acme": (["--sizes", "acme", "--jobs", "3000", "--tenants", "6", "--mean-duration", "21600"], []),
    # as users give limits (a few round values per script) and as jobs end (40 % fail or are cancelled early), on
    # the H20 rental pool: the trace issue 54 starts from
    "h20": (["--sizes", "acme", "--jobs", "3000", "--tenants", "6", "--mean-duration", "21600", "--limits", "round",
             "--early-ends", "0.4"], ["--preset", "hgx-h20"]),
}


def seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def replay(args, seed: int, out: Path) -> dict:
    trace = out / f"trace-{seed}.csv"
    cli = [sys.executable, "-m", "superpod.cli", "simulate"]
    generated, replayed = TRACES[args.sizes]
    subprocess.run([*cli, "generate", *generated, "--seed", str(seed), "--out", str(trace)], check=True,
                   stdout=subprocess.DEVNULL)
    folder = out / f"run-{seed}"
    command = [*cli, "--trace", str(trace), "--load", args.load, "--policy", args.policies, "--no-plots",
               "--workers", str(args.workers), "--out", str(folder), *replayed]
    if args.nodes:
        command += ["--nodes", str(args.nodes)]
    if args.estimates:
        command += ["--estimates", args.estimates]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return {path.parent.name: json.loads(path.read_text()) for path in folder.glob("**/summary.json")}


def figures(summary: dict) -> dict[str, tuple[float, float, float, float]]:
    """policy -> (mean JCT h, idle %, p99 wait >= 32 GPUs h, % of multi-node gangs on the fewest leaves)."""
    out = {}
    for name, policy in summary["policies"].items():
        metrics = policy["metrics"]
        fewest = metrics["fewest_leaves_share"]["share"]
        out[name] = (metrics["jct"]["mean"] / 3600, 100 * (metrics["idle_while_waiting"] or 0.0),
                     (metrics["p99_queueing_32_plus"] or 0.0) / 3600, 100 * (1.0 if fewest is None else fewest))
    return out


def cell(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):.1f}{unit} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="llm", choices=sorted(TRACES))
    parser.add_argument("--seeds", default="1-5", help="trace seeds, e.g. 1-5")
    parser.add_argument("--load", default="0.9,1.3")
    parser.add_argument("--nodes", type=int, default=0, help="nodes of the preset (default: the preset's)")
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--estimates", choices=("history", "limit", "oracle"),
                        help="what the policies are told of runtimes (default: the simulator's, history)")
    args = parser.parse_args()
    results: dict[str, dict[str, list[tuple[float, float, float]]]] = {}  # load -> policy -> per seed
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seeds(args.seeds):
            for summary in replay(args, seed, Path(scratch)).values():
                load = str(summary["trace"]["load"])
                for name, row in figures(summary).items():
                    results.setdefault(load, {}).setdefault(name, []).append(row)
    print(f"{args.sizes} traces, seeds {args.seeds}, {args.nodes or 'preset'} nodes, {args.estimates or 'history'} "
          "estimates: median (min-max) over seeds")
    for load, policies in sorted(results.items()):
        print(f"load {load}")
        print(f"  {'policy':<28} {'mean JCT':>20} {'idle waiting':>20} {'p99 wait >=32':>22} {'fewest leaves':>18}")
        for name, rows in policies.items():
            jct, idle, p99, fewest = zip(*rows, strict=True)
            print(f"  {name:<28} {cell(list(jct), 'h'):>20} {cell(list(idle), '%'):>20} {cell(list(p99), 'h'):>22} "
                  f"{cell(list(fewest), ''):>18}")


if __name__ == "__main__":
    main()
