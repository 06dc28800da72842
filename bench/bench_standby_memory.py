"""What a replica's cache keeps of churn: --pods pods created and deleted, applied to a ClusterState as watch
events, in three roles:

- standby: no cycle takes the cache's changes (`ClusterState.unfollow`, as the operator's loop does while the
  replica does not lead);
- undrained: a cache whose changes are kept for a cycle that never comes, which is what every standby was before
  `unfollow` (run it against an older tree to see that tree's figures);
- leader: the Controller's cycle runs every --every events and takes the changes (the baseline).

Prints, per role, the sizes of the structures churn could grow and the bytes tracemalloc counts as still held at
the end (the cache's, the Controller's in the leader's role). Figures, no assertions.

    .venv/bin/python bench/bench_standby_memory.py [--pods 100000] [--kind alone|gang|job] [--every 1000]
        [--roles standby,undrained,leader]

Kinds: `alone`, a pod other controllers made for this scheduler (a gang of one); `gang`, a pod of a labelled gang;
`job`, a TrainingJob's pod, its job made before it and deleted before it (as the garbage collector deletes them)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import time
import tracemalloc

from superpod.api.manifests import ATTEMPT_LABEL, INDEX_LABEL, JOB_LABEL, SCHEDULER_NAME, pod_name
from superpod.controller.controller import Controller
from superpod.controller.state import ClusterState
from superpod.k8s.api import PODS, TRAININGJOBS
from superpod.k8s.memory import MemoryAPI

SIZES = ("touched", "edited_jobs", "holding_changed", "nodes_changed", "gone", "ended", "unbilled", "changes",
         "_tombstones", "pods", "jobs")
START = "2026-01-01T00:00:00Z"


def pod(i: int, kind: str, rv: int) -> dict:
    """The review's pod (bound, one GPU, running), as `kind` makes it."""
    name, labels, owners = f"job-{i}-abcde", {}, []
    if kind == "gang":
        labels = {"superpod.dev/gang": f"gang-{i}"}
    elif kind == "job":
        name = pod_name(f"job-{i}", 1, 0)
        labels = {JOB_LABEL: f"job-{i}", ATTEMPT_LABEL: "1", INDEX_LABEL: "0"}
        owners = [{"kind": "TrainingJob", "name": f"job-{i}", "uid": f"job-uid-{i}", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a", "uid": f"u{i}", "resourceVersion": str(rv),
                         "creationTimestamp": START, "labels": labels, "ownerReferences": owners},
            "spec": {"schedulerName": SCHEDULER_NAME, "nodeName": "n1",
                     "containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "startTime": START}}


def job(i: int, rv: int) -> dict:
    """A TrainingJob whose one attempt is over and accounted."""
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": f"job-{i}", "namespace": "team-a", "uid": f"job-uid-{i}",
                         "resourceVersion": str(rv), "creationTimestamp": START},
            "spec": {"replicas": 1, "resources": {"gpus": 1},
                     "template": {"spec": {"containers": [{"name": "main", "image": "trainer"}]}}},
            "status": {"phase": "Succeeded", "attempt": 1, "accountedAttempts": 1}}


def churn(state: ClusterState, pods: int, kind: str, cycle, every: int) -> None:
    rv, events = 1, 0
    for i in range(pods):
        if kind == "job":
            state.apply(TRAININGJOBS, "ADDED", job(i, rv), 0.0)
        state.apply(PODS, "ADDED", pod(i, kind, rv + 1), 0.0)
        if kind == "job":
            state.apply(TRAININGJOBS, "DELETED", job(i, rv + 2), 0.0)
        done = pod(i, kind, rv + 3)
        done["status"]["phase"] = "Succeeded"
        state.apply(PODS, "DELETED", done, 0.0)
        rv += 4
        events += 4 if kind == "job" else 2
        if cycle is not None and events >= every:
            cycle()
            events = 0
    if cycle is not None:
        cycle()


def measure(role: str, pods: int, kind: str, every: int) -> dict:
    gc.collect()
    tracemalloc.start()
    state, cycle = ClusterState(), None
    if role == "standby":
        state.unfollow()
    elif role == "leader":
        controller = Controller(state, MemoryAPI(clock=time.time).client("bench"), lambda: True)

        def cycle() -> None:
            asyncio.run(controller.cycle(0.0))
    started = time.perf_counter()
    churn(state, pods, kind, cycle, every)
    seconds = time.perf_counter() - started
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"role": role, "seconds": seconds, "MB": held / 1e6,
            **{name: len(getattr(state, name)) for name in SIZES}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--kind", choices=("alone", "gang", "job"), default="alone")
    parser.add_argument("--every", type=int, default=1_000, help="events between the leader's cycles")
    parser.add_argument("--roles", default="standby,undrained,leader")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the leader's cycles have nothing to say of pods bound to no known node
    print(f"{args.pods:,} pods ({args.kind}) created and deleted; tracemalloc MB held at the end")
    print(f"{'role':<10} {'s':>6} {'MB':>7} " + " ".join(f"{name.strip('_'):>15}" for name in SIZES))
    for role in args.roles.split(","):
        row = measure(role, args.pods, args.kind, args.every)
        print(f"{role:<10} {row['seconds']:>6.1f} {row['MB']:>7.1f} "
              + " ".join(f"{row[name]:>15,}" for name in SIZES))


if __name__ == "__main__":
    main()
