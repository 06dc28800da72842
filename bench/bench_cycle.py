"""What one operator cycle costs with a long queue: prints figures, asserts nothing.

On a preset cluster filled by long-running whole-server jobs, W jobs wait (1, 2, 4 and 8 GPUs in turn). Measured
through the simulator's engine (the operator's own Controller on MemoryAPI): the median wall time of a cycle when
nothing changed ("idle"), of a cycle after one server's job ended ("freed"), and of a cycle after one node was
cordoned or uncordoned ("node"), and after a node object was stored with nothing a decision reads changed
("heartbeat"), per queue length and policy. `gang-firstfit` (no topology search, no reservation)
is the baseline in the same run. With --metrics the controller keeps its Prometheus metrics as the operator does
(the cluster gauges and the GPU-seconds counter each cycle).
Run: .venv/bin/python bench/bench_cycle.py [--nodes N] [--waiting 1000,5000] [--policies superpod,gang-firstfit]
     [--metrics]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_placement import machine

from superpod.controller.metrics import Metrics
from superpod.core.baselines import POLICIES
from superpod.k8s.api import NODES, PODS
from superpod.sim import presets
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="dgx-h100")
    parser.add_argument("--nodes", type=int, help="nodes of the preset (default: the preset's own count)")
    parser.add_argument("--waiting", default="1000,5000")
    parser.add_argument("--policies", default="superpod,gang-firstfit")
    parser.add_argument("--metrics", action="store_true", help="keep the operator's Prometheus metrics")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    nodes = len(presets.preset_nodes(args.preset, args.nodes))
    print(f"preset {args.preset}, {nodes} nodes, full of long jobs; medians of {ROUNDS} cycles"
          f"{', with metrics' if args.metrics else ''}")
    print(f"{'policy':<16} {'waiting':>8} {'idle cycle ms':>14} {'freed cycle ms':>15} {'node cycle ms':>14} "
          f"{'heartbeat cycle ms':>19} {'us per waiting job':>19}")
    for waiting in map(int, args.waiting.split(",")):
        for policy in args.policies.split(","):
            idle, freed, node, beat = measure(args.preset, args.nodes, waiting, policy, args.metrics)
            print(f"{policy:<16} {waiting:>8} {idle:>14.1f} {freed:>15.1f} {node:>14.1f} {beat:>19.1f} "
                  f"{idle * 1000 / max(waiting, 1):>19.1f}", flush=True)


if __name__ == "__main__":
    main()
