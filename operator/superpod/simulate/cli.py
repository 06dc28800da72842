"""`superpod simulate`: replay a trace through the operator's own scheduling code on a virtual clock, for several
policies and loads, and write `summary.json` and plots; `superpod simulate generate`: write a synthetic trace."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from superpod.api.convert import ConvertError, queue_from_k8s
from superpod.api.dumps import items_of
from superpod.core.baselines import POLICIES
from superpod.hardware import presets
from superpod.k8s.api import CLUSTERTOPOLOGIES, GPUQUEUES, NODES
from superpod.simulate import summary, workload
from superpod.simulate.engine import Simulation
from superpod.simulate.estimates import ESTIMATES
from superpod.simulate.failures import FailureModel
from superpod.simulate.metrics import SIZE_CLASS_TITLES, SIZE_CLASSES
from superpod.simulate.runtime import RuntimeModel, parse_factors
from superpod.simulate.trace import TraceJob, read_jobs_csv, read_philly

FORMATS = {"jobs": read_jobs_csv, "philly": read_philly}


@dataclass(frozen=True)
class Replay:
    """One replay: everything a worker process needs (picklable)."""

    nodes: list[dict]
    topology: dict
    jobs: list[TraceJob]
    policy: str
    seed: int
    factors: dict[str, float]
    startup_delay: float
    label: str
    progress: bool
    queues: list[dict]
    estimates: str = "history"
    failures: FailureModel | None = None
    node_failure: str | None = None


def replay(run: Replay) -> tuple[dict, float]:
    """The policy's part of summary.json, and the wall seconds it took."""
    started = time.monotonic()
    runtime = RuntimeModel.of(run.topology, run.nodes, run.factors)
    simulation = Simulation(run.nodes, run.topology, run.jobs, POLICIES[run.policy](run.seed), runtime,
                            run.startup_delay, run.queues, run.estimates, run.failures, run.node_failure)
    simulation.run(Progress(run.label, run.jobs[-1].submit if run.jobs else 0.0, len(run.jobs)) if run.progress
                   else None)
    window = summary.steady_window(run.jobs)
    return summary.policy_summary(simulation, runtime, window, run.queues), time.monotonic() - started


class Progress:
    """A text progress bar on stderr, at most every few wall seconds (display only: the replay never reads it)."""

    EVERY = 5.0

    def __init__(self, label: str, last_submit: float, jobs: int) -> None:
        self.label, self.last_submit, self.jobs = label, last_submit, jobs
        self.started = self.shown = time.monotonic()

    def __call__(self, now: float, ended: int) -> None:
        if time.monotonic() - self.shown < self.EVERY:
            return
        self.shown = time.monotonic()
        done = ended / self.jobs if self.jobs else 1.0
        bar = "#" * int(done * 30)
        print(f"{self.label:<32} [{bar:<30}] {done:6.1%} {ended}/{self.jobs} jobs ended, day {now / 86400:.1f}, "
              f"{self.shown - self.started:.0f}s", file=sys.stderr, flush=True)


def load_cluster(args: Any) -> tuple[list[dict], dict, str]:
    """Nodes, ClusterTopology and a description: from a dump (`--cluster`) or a preset."""
    if args.cluster:
        with open(args.cluster, encoding="utf-8") as handle:
            objects = items_of(list(yaml.safe_load_all(handle)))
        nodes = [o for o in objects if isinstance(o, dict) and o.get("kind") == NODES.kind]
        topologies = [o for o in objects if isinstance(o, dict) and o.get("kind") == CLUSTERTOPOLOGIES.kind]
        if not nodes:
            raise ValueError(f"{args.cluster}: no Node in it (dump it with kubectl get nodes,clustertopologies "
                             "-o yaml)")
        if len(topologies) > 1:
            raise ValueError(f"{args.cluster}: {len(topologies)} ClusterTopologies; keep the one in force")
        return nodes, topologies[0] if topologies else presets.topology(), f"dump {args.cluster}"
    nodes = presets.preset_nodes(args.preset, args.nodes)
    return nodes, presets.topology(), f"preset {args.preset}"


def load_queues(path: str | None, required: bool = True) -> list[dict]:
    """GPUQueues from a YAML file (documents or a List: a --queues file, or the --cluster dump when no --queues is
    given); each is checked as the operator reads it."""
    if not path:
        return []
    with open(path, encoding="utf-8") as handle:
        objects = [o for o in items_of(list(yaml.safe_load_all(handle))) if isinstance(o, dict)]
    queues = [o for o in objects if o.get("kind") == GPUQUEUES.kind]
    if not queues and required:
        raise ValueError(f"{path}: no GPUQueue in it")
    for queue in queues:
        queue_from_k8s(queue)  # a clear error now, not a queue silently out of force later
    return queues


def load_jobs(args: Any, capacity: int) -> dict[str, list[TraceJob]]:
    """The trace per load ("" when no --load): read, windowed, rescaled."""
    jobs = FORMATS[args.format](args.trace)
    if args.limit:
        jobs = jobs[:args.limit]
    if args.window:
        jobs = workload.window(jobs, *workload.parse_window(args.window))
    if args.priorities:
        jobs = workload.with_priorities(jobs, args.priorities, args.seed)
    if not jobs:
        raise ValueError(f"{args.trace}: no job to replay (window {args.window or 'none'})")
    if not args.load:
        return {"": jobs}
    return {load: workload.rescale(jobs, float(load), capacity) for load in args.load.split(",")}


def failure_model(args: Any) -> FailureModel | None:
    """The node failures of --node-mtbf, --repair and --checkpoint (None: nodes never fail)."""
    if not args.node_mtbf:
        return None
    checkpoint = workload.duration(args.checkpoint, "--checkpoint") if args.checkpoint else None
    return FailureModel(workload.duration(args.node_mtbf, "--node-mtbf"), workload.duration(args.repair, "--repair"),
                        checkpoint, args.seed)


def run(args: Any) -> int:
    try:
        nodes, topology, source = load_cluster(args)
        capacity = RuntimeModel.of(topology, nodes).capacity
        traces = load_jobs(args, capacity)
        queues = load_queues(args.queues) if args.queues else load_queues(args.cluster, required=False)
        factors = parse_factors(args.slowdown or "")
        failures = failure_model(args)
        policies = args.policy.split(",")
        unknown = [p for p in policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policy {', '.join(unknown)}; policies: {', '.join(POLICIES)}")
    except (OSError, ValueError, ConvertError, yaml.YAMLError) as error:
        print(f"superpod simulate: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    progress = args.progress or sys.stderr.isatty()
    replays = [Replay(nodes, topology, jobs, policy, args.seed, factors, args.startup_delay,
                      f"{policy}{f' load {load}' if load else ''}", progress, queues, args.estimates, failures,
                      args.node_failure)
               for load, jobs in traces.items() for policy in policies]
    summaries = {}
    with ProcessPoolExecutor(max_workers=args.workers) if args.workers > 1 else _Inline() as pool:
        pending = [pool.submit(replay, one) for one in replays]
        for index, (load, jobs) in enumerate(traces.items()):  # each load written as soon as its replays end
            chunk = [future.result() for future in pending[index * len(policies):(index + 1) * len(policies)]]
            trace = {"source": f"{args.format} {args.trace}", "jobs": len(jobs), "window": args.window or None,
                     "load": float(load) if load else None,
                     "offered_load": round(workload.offered_load(jobs, capacity), 6) if len(jobs) > 1 else None}
            summaries[load] = summary.summary({"nodes": len(nodes), "gpus": capacity, "source": source}, trace,
                                              {policy: result for policy, (result, _) in zip(policies, chunk,
                                                                                             strict=True)})
            _write(out / f"load-{load}" if len(traces) > 1 else out, summaries[load], not args.no_plots)
            _table(summaries[load], [seconds for _, seconds in chunk])
    if len(traces) > 1 and not args.no_plots:
        from superpod.simulate.plots import plot_sweep
        plot_sweep({"loads": summaries}, out)
    return 0


class _Inline:
    """A pool of one: each replay runs in this process when its result is asked for."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    @staticmethod
    def submit(function, item):
        return _Later(function, item)


@dataclass
class _Later:
    function: Any
    item: Any

    def result(self):
        return self.function(self.item)


def _write(folder: Path, result: dict, plots: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")
    if plots:
        from superpod.simulate.plots import plot_all
        plot_all(result, folder)


def _table(result: dict, seconds: list[float]) -> None:
    """One row per policy, side by side: utilisation, JCT, the GPU-time idle while a job waits, the big gangs' wait;
    then per size class mean JCT, p99 and longest wait; then priorities and preemption if any."""
    trace, cluster = result["trace"], result["cluster"]
    load = f", load {trace['load']}" if trace["load"] else ""
    print(f"{cluster['source']}, {cluster['gpus']} GPUs; {trace['source']}: {trace['jobs']} jobs{load}")
    print(f"{'policy':<20} {'util':>6} {'useful':>6} {'mean JCT':>9} {'p99 JCT':>8} {'idle waiting':>12} "
          f"{'p99 wait>=32':>12} {'fewest leaves':>14} {'restarts':>8} {'waiting':>7} {'wall':>7}")
    for (name, policy), wall in zip(result["policies"].items(), seconds, strict=True):
        metrics = policy["metrics"]
        share = metrics["fewest_leaves_share"]
        leaves = "-" if share["share"] is None else f"{share['share']:.2f} of {share['of']}"
        print(f"{name:<20} {policy['utilisation']:>6.3f} {policy['useful_utilisation']:>6.3f} "
              f"{_hours(metrics['jct']['mean']):>9} {_hours(metrics['jct']['p99']):>8} "
              f"{_share(metrics['idle_while_waiting']):>12} {_hours(metrics['p99_queueing_32_plus']):>12} "
              f"{leaves:>14} {metrics['restarts']:>8} {metrics['never_started']:>7} {wall:>6.0f}s", flush=True)
    _size_class_table(result)
    if any(len(policy["metrics"]["queueing_by_priority"]) > 1 or policy["metrics"]["preempted"]["attempts"]
           for policy in result["policies"].values()):
        print("queueing delay by priority (mean / p99), and work lost to preemption:")
        for name, policy in result["policies"].items():
            metrics = policy["metrics"]
            waits = ", ".join(f"{priority}: {_hours(stats['mean'])} / {_hours(stats['p99'])}"
                              for priority, stats in sorted(metrics["queueing_by_priority"].items(),
                                                            key=lambda item: -int(item[0])))
            lost = metrics["preempted"]
            print(f"  {name:<20} {waits}; {lost['attempts']} attempts preempted, "
                  f"{lost['gpu_hours_lost']:.1f} GPU-hours lost", flush=True)


def _size_class_table(result: dict) -> None:
    """Per size class, in hours: mean JCT / p99 wait / longest wait."""
    print("by size class, hours: mean JCT / p99 wait / longest wait")
    print(f"{'policy':<20}" + "".join(f" {SIZE_CLASS_TITLES[size]:>24}" for size in SIZE_CLASSES))
    for name, policy in result["policies"].items():
        classes = policy["metrics"]["size_classes"]
        cells = (" / ".join(_hours(figure, unit="") for figure in (classes[size]["jct"]["mean"],
                                                                     classes[size]["wait"]["p99"],
                                                                     classes[size]["wait"]["max"]))
                 for size in SIZE_CLASSES)
        print(f"{name:<20}" + "".join(f" {cell:>24}" for cell in cells), flush=True)


def _hours(seconds: float | None, unit: str = "h") -> str:
    return "-" if seconds is None else f"{seconds / 3600:.1f}{unit}"


def _share(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction:.1%}"


def generate(args: Any) -> int:
    try:
        jobs = workload.generate(args.seed, args.jobs, args.tenants, args.sizes, args.arrival, args.mean_gap,
                                 args.mean_duration, limits=args.limits, early_ends=args.early_ends)
        workload.write_jobs_csv(jobs, args.out)
    except (OSError, ValueError) as error:
        print(f"superpod simulate generate: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(jobs)} jobs to {args.out}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("simulate", help="replay a trace through the scheduler on a virtual clock, with baselines",
                       description=__doc__)
    p.add_argument("--preset", default="dgx-h100", choices=sorted(presets.PRESETS), help="simulated cluster")
    p.add_argument("--nodes", type=int, help="nodes of the preset (default: the preset's size)")
    p.add_argument("--cluster", help="a dump of Nodes and a ClusterTopology (kubectl get nodes,clustertopologies "
                                     "-o yaml) instead of a preset")
    p.add_argument("--trace", help="the workload: a job CSV (--format jobs) or the Philly list (--format philly)")
    p.add_argument("--format", default="jobs", choices=sorted(FORMATS))
    p.add_argument("--limit", type=int, help="only the first N jobs of the trace")
    p.add_argument("--window", help="a slice of the trace by submit time, e.g. 14d:28d (s, m, h, d)")
    p.add_argument("--load", help="rescale arrivals to this offered load; several (0.5,0.8) make a sweep")
    p.add_argument("--policy", default=",".join(POLICIES), help=f"comma-separated, of: {', '.join(POLICIES)}")
    p.add_argument("--seed", type=int, default=0, help="seed of the random baseline and of --priorities")
    p.add_argument("--priorities", help="give jobs priorities, seeded: priority:share,... (e.g. 100:0.1 makes one job "
                                        "in ten priority 100)")
    p.add_argument("--queues", help="GPUQueues (YAML) the operator admits under: tenants, guarantees, weights "
                                    "(default: those in the --cluster dump, if any)")
    p.add_argument("--estimates", default="history", choices=ESTIMATES,
                   help="what the policy is told of runtimes: the operator's estimator (history), the trace's limits, "
                   "or the truth (oracle)")
    p.add_argument("--slowdown", help="runtime factors per level crossed, e.g. leaf=1.3,spine=1.2")
    p.add_argument("--startup-delay", type=float, default=0.0, help="seconds from a gang's start to useful work")
    p.add_argument("--node-mtbf", help="nodes fail, each after a mean uptime of this long (e.g. 30d; seeded by --seed)")
    p.add_argument("--repair", default="4h", help="with --node-mtbf: how long a failed node stays away")
    p.add_argument("--checkpoint", help="gangs save their progress this often (e.g. 1h): a stopped gang or a replaced "
                   "replica resumes from the last save (default: never, a stopped gang starts over)")
    p.add_argument("--node-failure", choices=("Replace", "RestartGang"),
                   help="every job's spec.nodeFailure (default: the operator's default)")
    p.add_argument("--out", default="simulation", help="folder for summary.json and the plots (overwritten)")
    p.add_argument("--no-plots", action="store_true", help="write summary.json only")
    p.add_argument("--workers", type=int, default=1, help="replays run in parallel processes")
    p.add_argument("--progress", action="store_true", help="progress on stderr even when it is not a terminal")
    p.set_defaults(func=_checked_run)
    sub_simulate = p.add_subparsers(dest="simulate_command")
    g = sub_simulate.add_parser("generate", help="write a synthetic trace in the job CSV format")
    g.add_argument("--out", required=True, help="CSV file to write")
    g.add_argument("--jobs", type=int, default=1000)
    g.add_argument("--tenants", type=int, default=4)
    g.add_argument("--sizes", default="llm", choices=sorted(workload.SIZES))
    g.add_argument("--arrival", default="poisson", choices=workload.ARRIVALS)
    g.add_argument("--mean-gap", type=float, default=600.0, help="mean seconds between submits")
    g.add_argument("--mean-duration", type=float, default=6 * 3600.0, help="mean job duration, seconds")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--limits", default="habit", choices=workload.users.LIMITS,
                   help="habit: each job's limit a factor of its run time, rounded up to the hour; round: one of a "
                        "few round values per user's script, as real users give (a longer run stops at it)")
    g.add_argument("--early-ends", type=float, default=0.0,
                   help="the share of jobs that fail or are cancelled early (0.4 in LLM clusters' traces)")
    g.set_defaults(func=generate)


def _checked_run(args: Any) -> int:
    if not args.trace:
        print("superpod simulate: --trace is required (or use `superpod simulate generate`)", file=sys.stderr)
        return 2
    return run(args)
