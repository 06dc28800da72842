"""Recovery from a lost node on the local control plane: simulated DGX H100 nodes, one TrainingJob gang of each size
running (16 pods in one leaf, leaf-required; 128 pods, spine preferred: a spine is 128 nodes, so required would leave
no node to replace one with; 8 GPUs a pod); then, again and again, one node of a running gang is deleted (a lost node,
to the operator at once) and the time from the delete to every replica of that gang Running again is measured, with
`spec.nodeFailure: Replace` and `RestartGang` taking turns on the same cluster (a gang restarted once is made anew
before the next RestartGang kill: the wait before a restart doubles with each interruption of the job). Prints p50
and p99 (the maximum, with few kills) by gang size and mode, and the operator's CPU seconds per kill.

    .venv/bin/python bench/bench_recovery.py [--nodes 1000] [--sizes 16,128] [--kills 5]

The deleted node is created again once its gang runs, so every kill starts from the same cluster. Runs on its own
ports and state folder and wipes them afterwards."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import time
from pathlib import Path

import orjson
from kubernetes import client

from superpod.api.manifests import ATTEMPT_LABEL, JOB_LABEL
from superpod.hardware import presets
from superpod.localcluster.cluster import LocalCluster, Ports, state_dir

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import machine, wait_all_ready  # noqa: E402
from bench_operator import GROUP, VERSION, first_cycle, simulated_fleet, training_job  # noqa: E402
from cpu import cpu_seconds  # noqa: E402

PORTS = Ports(etcd=13979, etcd_peer=13980, apiserver=18043, controller_manager=21857, scheduler=21859, kwok=21847)
METRICS = 21871  # the operator's /metrics
MODES = ("Replace", "RestartGang")
NS = "bench-recovery"


def gang(size: int) -> dict:
    """A TrainingJob of `size` 8-GPU replicas: leaf-required when a leaf (32 nodes) holds it, else spine preferred."""
    job = training_job(size, (size, 8))
    job["metadata"]["name"] = f"gang{size}"
    job["spec"]["topology"] = {"required": "leaf"} if size <= 32 else {"preferred": "spine"}
    return job


def live_pods(core: client.CoreV1Api, name: str) -> list[dict]:
    """The job's pods not being deleted (plain JSON)."""
    page = orjson.loads(core.list_namespaced_pod(NS, label_selector=f"{JOB_LABEL}={name}",
                                                 _preload_content=False).data)
    return [p for p in page["items"] if not p["metadata"].get("deletionTimestamp")]


def all_running(pods: list[dict], replicas: int, lost: str | None) -> bool:
    """Whether `replicas` pods of one attempt run, none on the lost node."""
    running: dict[str, int] = {}
    for pod in pods:
        if pod.get("status", {}).get("phase") == "Running" and pod["spec"].get("nodeName") != lost:
            attempt = pod["metadata"]["labels"][ATTEMPT_LABEL]
            running[attempt] = running.get(attempt, 0) + 1
    return max(running.values(), default=0) >= replicas


def wait_recovered(core: client.CoreV1Api, name: str, replicas: int, lost: str | None, started: float,
                   timeout: float = 900) -> float:
    """Seconds from `started` until every replica of the job runs again (polled every 0.1 s)."""
    while not all_running(live_pods(core, name), replicas, lost):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{name}: not all {replicas} replicas Running after {timeout:.0f}s")
        time.sleep(0.1)
    return time.monotonic() - started


def fresh(core: client.CoreV1Api, custom: client.CustomObjectsApi, size: int) -> float:
    """The gang of `size` created anew once its pods of an earlier one are gone: seconds until all its pods run."""
    name = f"gang{size}"
    with contextlib.suppress(client.ApiException):
        custom.delete_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs", name)
    while orjson.loads(core.list_namespaced_pod(NS, label_selector=f"{JOB_LABEL}={name}",
                                                _preload_content=False).data)["items"]:
        time.sleep(0.5)
    started = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs", gang(size))
    return wait_recovered(core, name, size, None, started)


def interrupted(custom: client.CustomObjectsApi, name: str) -> bool:
    status = custom.get_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs", name).get("status") or {}
    return bool(status.get("interruptions"))


def kill_one(core: client.CoreV1Api, custom: client.CustomObjectsApi, name: str, replicas: int, mode: str,
             by_name: dict[str, dict], rng: random.Random, pid: int) -> tuple[float, float]:
    """Sets the job's nodeFailure, deletes one node of it, waits until all its replicas run again, then creates the
    node again: (seconds to recover, operator CPU seconds meanwhile)."""
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs", name, {"spec": {"nodeFailure": mode}})
    time.sleep(2)  # the operator has read the change
    node = rng.choice(sorted({p["spec"]["nodeName"] for p in live_pods(core, name)}))
    cpu, started = cpu_seconds(pid), time.monotonic()
    core.delete_node(node, grace_period_seconds=0)
    took = wait_recovered(core, name, replicas, node, started)
    used = cpu_seconds(pid) - cpu
    while core.list_node(field_selector=f"metadata.name={node}").items:
        time.sleep(0.2)
    # what pod GC does to the pods of a node that stays gone: KWOK would not end them on the node made again
    for pod in core.list_namespaced_pod(NS, field_selector=f"spec.nodeName={node}").items:
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
    core.create_node(by_name[node])
    wait_all_ready(core, presets.SIM_LABEL, len(by_name))
    return took, used


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (f"p50 {statistics.median(ordered):.2f}s, p99 {p99:.2f}s"
            f"{' (the maximum)' if len(ordered) < 100 else ''}, min {ordered[0]:.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--sizes", default="16,128", help="gang sizes, one gang of each (comma-separated)")
    ap.add_argument("--kills", type=int, default=5, help="nodes killed per gang size and mode")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"machine: {machine()}")
    local = LocalCluster(state_dir().parent / "cluster-bench-recovery", PORTS)
    local.wipe()
    local.up(local.build(quiet=True))
    try:
        api, objs, _ = simulated_fleet(local, args.nodes)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        by_name = {o["metadata"]["name"]: o for o in objs}
        env = {"KUBECONFIG": str(local.kubeconfig)}
        local.start_process("operator", [sys.executable, "-m", "superpod.cli", "run", "--metrics-port", str(METRICS)],
                            {**os.environ, **env})
        first_cycle(f"http://127.0.0.1:{METRICS}/metrics")
        pid = local.pid("operator")
        core.create_namespace({"metadata": {"name": NS}})
        for size in sizes:
            print(f"gang of {size}: all Running {fresh(core, custom, size):.1f}s after its creation")
        print(f"cluster: {args.nodes} simulated DGX H100 nodes ({args.nodes * 8} GPUs); gangs of {args.sizes} pods "
              f"running (8 GPUs a pod); {args.kills} kill(s) per gang size and mode, the modes taking turns")
        rng = random.Random(args.seed)
        times: dict[tuple[int, str], list[float]] = {}
        cpu: dict[tuple[int, str], list[float]] = {}
        for kill in range(args.kills):
            for size in sizes:
                for mode in MODES if kill % 2 == 0 else MODES[::-1]:
                    if mode == "RestartGang" and interrupted(custom, f"gang{size}"):
                        fresh(core, custom, size)  # its restart backoff grows with the job's interruptions
                    took, used = kill_one(core, custom, f"gang{size}", size, mode, by_name, rng, pid)
                    times.setdefault((size, mode), []).append(took)
                    cpu.setdefault((size, mode), []).append(used)
                    print(f"  kill {kill + 1}, gang of {size}, {mode}: all Running again after {took:.2f}s "
                          f"(operator CPU {used:.2f}s)", flush=True)
        print("time from a node's delete to every replica of its gang Running again:")
        for (size, mode), values in sorted(times.items()):
            print(f"  gang of {size}, {mode}: {quantiles(values)} over {len(values)} kills; operator CPU "
                  f"{statistics.median(cpu[size, mode]):.2f}s a kill (median)")
        for size in sizes:
            status = custom.get_namespaced_custom_object(GROUP, VERSION, NS, "trainingjobs", f"gang{size}")["status"]
            print(f"  gang{size} status: phase {status.get('phase')}, attempt {status.get('attempt')}, replacements "
                  f"{status.get('replacements')}, interruptions {status.get('interruptions')}, restarts "
                  f"{status.get('restarts')}")
    finally:
        local.wipe()


if __name__ == "__main__":
    main()
