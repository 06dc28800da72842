"""The kept snapshot follows what holds capacity by difference (controller/snapshot.py): after every build it must
hold exactly what a build from scratch holds — the observed pods, the placed gangs' replicas not observed yet and
the pod gangs' bindings in flight — with the same free capacity, through random submissions, deletions, finished
and failed pods, cordons, pods of other schedulers, pod gangs, writes that fail or lose their answer, and a watch
that lags."""

from __future__ import annotations

import random

from superpod.controller.snapshot import SnapshotCache, assumed_key
from superpod.core.model import Pod, Snapshot
from superpod.k8s.api import NODES, PODS, TRAININGJOBS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gangs import pod as gang_pod


def from_scratch(state, placed, gangs) -> dict[str, Pod]:
    held = {**gangs, **state.holding}
    for job_key, (request, uid, attempt, nodes) in placed.items():
        seen = {p.index for p in state.pods_of(job_key) if p.owner == uid and p.attempt == attempt}
        held.update({assumed_key(job_key, index): Pod(assumed_key(job_key, index), node, request.requests)
                     for index, node in nodes.items() if index not in seen})
    return held


def test_the_kept_snapshot_holds_what_a_build_from_scratch_holds_after_every_cycle():
    rng = random.Random(16)
    c = MemoryCluster(nodes=12, nodes_per_unit=4)
    cache: SnapshotCache = c.controller.snapshots
    build, seen = cache.build, {"checks": 0, "assumed replicas": 0, "assumed replicas observed": 0,
                                "pod gangs in flight": 0, "assumed by the last cycle": 0}

    def checked(state, placed, gangs=None, touched=None):
        seen["assumed by the last cycle"] += bool(cache._snap is not None and cache._snap.assumed)
        before = {key for key in cache.held if "#" in key}
        snap = build(state, placed, gangs, touched)
        expected = from_scratch(state, placed, gangs or {})
        seen["assumed replicas observed"] += bool(before - expected.keys())
        assert cache.held == expected and snap.pods == expected
        fresh = Snapshot(state.usable_nodes(), state.topology()[0], expected.values())
        assert snap.nodes == fresh.nodes and snap.free == fresh.free
        seen["checks"] += 1
        seen["assumed replicas"] += any("#" in key for key in expected)
        seen["pod gangs in flight"] += bool(gangs)
        return snap

    cache.build = checked

    def fault(verb, kind, obj, writer):
        if writer != "op-1" or kind is not PODS or verb != "create" or rng.random() > 0.2:
            return None
        if rng.random() < 0.5:
            return "lose-answer"  # written, its answer lost: placed, its pod not observed until its event comes
        raise ApiError(500, "InternalError", "refused") if rng.random() < 0.5 else ApiError(0, "Timeout", "no answer")

    c.store.fault = fault
    names = iter(range(10_000))
    for _ in range(120):
        action = rng.random()
        jobs = sorted(c.store.objects.get(TRAININGJOBS, {}))
        live = [p for p in c.pods() if p["spec"].get("nodeName")]
        if action < 0.35:
            c.submit(training_job(f"j{next(names)}", rng.choice([1, 1, 2, 3]), rng.choice([1, 4, 8]), maxRestarts=1))
        elif action < 0.45 and jobs:
            run(c.admin.delete(TRAININGJOBS, *reversed(rng.choice(jobs).split("/", 1))))
        elif action < 0.6 and live:
            done = rng.choice(live)["metadata"]
            c.kubelet.finish(f"{done['namespace']}/{done['name']}", rng.choice([0, 1]))
        elif action < 0.7:
            node = rng.choice(sorted(c.store.objects[NODES]))
            c.update_node(node, lambda obj: obj["spec"].update(unschedulable=not obj["spec"].get("unschedulable")))
        elif action < 0.8:
            gang = f"g{next(names)}"
            for index in range(2):
                run(c.admin.create(PODS, gang_pod(f"{gang}-{index}", gang, 2, rng.choice([2, 8]), index)))
        elif action < 0.9:
            other = gang_pod(f"other{next(names)}", gpus=rng.choice([1, 8]))
            other["spec"].update(schedulerName="default-scheduler", nodeName=rng.choice(sorted(c.store.objects[NODES])))
            run(c.admin.create(PODS, other))
        if rng.random() < 0.6:  # the watch lags by a random amount
            c.deliver(rng.randint(0, len(c.store.events) - c.delivered))
        run(c.controller.cycle(c.now))
        c.tick(rng.choice([0.5, 1, 5]))
    assert seen["checks"] >= 120
    assert all(seen.values()), f"each kind of holding was reached: {seen}"
