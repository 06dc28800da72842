"""What one operator cycle costs with a long queue: prints figures, asserts nothing.

On a preset cluster filled by long-running whole-server jobs, W jobs wait (1, 2, 4 and 8 GPUs in turn). Measured
through the simulator's engine (the operator's own Controller on MemoryAPI): the median wall time of a cycle when
nothing changed ("idle"), of a cycle after one server's job ended ("freed"), and of a cycle after one node was
cordoned or uncordoned ("node"), and after a node object was stored with nothing a decision reads changed
("heartbeat"), per queue length and policy. `gang-firstfit` (no topology search, no reservation)
is the baseline in the same run. With --metrics the controller keeps its Prometheus metrics as the operator does
(the cluster gauges and the GPU-seconds counter each cycle).
With --burst J: then, per policy, one cycle on the idle cluster deciding J gangs of bench_operator.py's mix
submitted at once (1-GPU notebooks to 16-node gangs required in one leaf): its wall time, and the placement search's
time per gang by shape.
Run: .venv/bin/python bench/bench_cycle.py [--nodes N] [--waiting 1000,5000] [--policies superpod,gang-firstfit]
     [--metrics] [--burst 5000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_placement import machine

from superpod.controller.metrics import Metrics
from superpod.core.baselines import POLICIES
from superpod.hardware import presets
from superpod.k8s.api import NODES, PODS
from superpod.simulate.engine import Simulation
from superpod.simulate.runtime import RuntimeModel
from superpod.simulate.trace import TraceJob

ROUNDS = 9


def measure(preset: str, count: int | None, waiting: int, policy: str, metrics: bool) -> tuple[float, ...]:
    nodes, topology = presets.preset_nodes(preset, count), presets.topology()
    runtime = RuntimeModel.of(topology, nodes)
    servers = runtime.capacity // 8
    jobs = [TraceJob(0.0, f"long-{i:05d}", "bench", 1, 8, duration=1e9 + i) for i in range(servers)]
    jobs += [TraceJob(1.0, f"wait-{i:05d}", "bench", 1, (1, 2, 4, 8)[i % 4], duration=3600.0)
             for i in range(waiting)]
    simulation = Simulation(nodes, topology, jobs, POLICIES[policy](0), runtime)
    simulation.loop.close = lambda: None  # the replay below goes on after run() returns
    simulation.run(until=2.0)
    controller = simulation.controller
    if metrics:
        controller.metrics = Metrics()
        controller.meter.counter = controller.metrics.gpu_seconds

    def cycle() -> float:
        simulation.now += 1.0
        started = time.perf_counter()
        simulation._run(controller.cycle(simulation._clock()))
        seconds = time.perf_counter() - started
        simulation._deliver()
        simulation._kubelet()
        simulation._deliver()
        return seconds

    idle = statistics.median(cycle() for _ in range(ROUNDS))
    freed = []
    for i in range(ROUNDS):
        pod = next(key for key, obj in sorted(simulation.store.objects[PODS].items())
                   if key.startswith(f"bench/long-{i:05d}-") and obj["status"].get("phase") == "Running")
        simulation.kubelet.finish(pod, 0)
        simulation._deliver()
        freed.append(cycle())
    changed = []
    for i in range(ROUNDS):  # a node cordoned, then uncordoned: its gang runs on, the nodes' version moves
        node = simulation.store.objects[NODES][nodes[i % len(nodes)]["metadata"]["name"]]
        node["spec"]["unschedulable"] = not node["spec"].get("unschedulable")
        simulation.store._store(NODES, node, "update")
        simulation._deliver()
        changed.append(cycle())
    beats = []
    for i in range(ROUNDS):  # a node object stored with nothing a decision reads changed, as a heartbeat does
        node = simulation.store.objects[NODES][nodes[i % len(nodes)]["metadata"]["name"]]
        node["metadata"].setdefault("annotations", {})["bench/heartbeat"] = str(i)
        simulation.store._store(NODES, node, "update")
        simulation._deliver()
        beats.append(cycle())
    return tuple(statistics.median(m) * 1000 for m in ([idle], freed, changed, beats))


def burst(preset: str, count: int | None, jobs: int, policy: str) -> str:
    """One cycle deciding `jobs` gangs submitted at once to the idle cluster: its seconds, and the placement
    search's milliseconds per gang by shape (replicas x GPUs)."""
    from collections import defaultdict

    from bench_operator import job_shapes

    from superpod.core import cycle, placement

    nodes, topology = presets.preset_nodes(preset, count), presets.topology()
    trace = [TraceJob(1.0, f"j{i:05d}", "bench", replicas, gpus, duration=1e9, required="leaf" if replicas > 1 else "")
             for i, (replicas, gpus) in enumerate(job_shapes(jobs))]
    simulation = Simulation(nodes, topology, trace, POLICIES[policy](0), RuntimeModel.of(topology, nodes))
    simulation.loop.close = lambda: None
    simulation.run(until=0.5)
    simulation.now = 1.0
    for job in trace:
        simulation._submit(job)
    simulation._deliver()
    searched: dict[tuple[int, int], list[float]] = defaultdict(list)
    solve = cycle.solve

    def timed(solver: placement.Solver):
        started = time.perf_counter()
        try:
            return solve(solver)
        finally:
            searched[(solver.replicas, solver.gpus_per_replica)].append(time.perf_counter() - started)
    cycle.solve = timed
    try:
        started = time.perf_counter()
        plans = simulation.controller.plan(simulation._clock())
        seconds = time.perf_counter() - started
    finally:
        cycle.solve = solve
    shapes = ", ".join(f"{r}x{g}: {1000 * statistics.mean(v):.2f}" for (r, g), v in sorted(searched.items()))
    return f"{seconds:.2f}s for {len(plans)} plans; search ms per gang, mean by shape: {shapes or '-'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="dgx-h100")
    parser.add_argument("--nodes", type=int, help="nodes of the preset (default: the preset's own count)")
    parser.add_argument("--waiting", default="1000,5000", help="queue lengths (\"\": none, e.g. with --burst)")
    parser.add_argument("--policies", default="superpod,gang-firstfit")
    parser.add_argument("--metrics", action="store_true", help="keep the operator's Prometheus metrics")
    parser.add_argument("--burst", type=int, default=0, help="then one cycle deciding this many gangs at once")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    nodes = len(presets.preset_nodes(args.preset, args.nodes))
    print(f"preset {args.preset}, {nodes} nodes, full of long jobs; medians of {ROUNDS} cycles"
          f"{', with metrics' if args.metrics else ''}")
    print(f"{'policy':<16} {'waiting':>8} {'idle cycle ms':>14} {'freed cycle ms':>15} {'node cycle ms':>14} "
          f"{'heartbeat cycle ms':>19} {'us per waiting job':>19}")
    for waiting in (int(w) for w in args.waiting.split(",") if w):
        for policy in args.policies.split(","):
            idle, freed, node, beat = measure(args.preset, args.nodes, waiting, policy, args.metrics)
            print(f"{policy:<16} {waiting:>8} {idle:>14.1f} {freed:>15.1f} {node:>14.1f} {beat:>19.1f} "
                  f"{idle * 1000 / max(waiting, 1):>19.1f}", flush=True)
    if args.burst:
        print(f"one cycle deciding {args.burst} gangs of bench_operator's mix submitted at once to the idle cluster:")
        for policy in args.policies.split(","):
            print(f"  {policy}: {burst(args.preset, args.nodes, args.burst, policy)}", flush=True)


if __name__ == "__main__":
    main()
