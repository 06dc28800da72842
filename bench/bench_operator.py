"""Operator throughput on the local control plane: 1,000 simulated DGX H100 nodes (8,000 GPUs), 500 gangs of mixed
sizes submitted at once -> time until every pod is Running, and pods placed per second; the same gangs as TrainingJobs
and as Indexed Jobs (batch/v1, created by the real kube-controller-manager, spec.schedulerName: superpod-scheduler,
bound by the operator through pods/binding). Beside them, in the same run, the ceiling: a bare client creating the
same number of pods with their nodes already assigned.

    .venv/bin/python bench/bench_operator.py [--nodes 1000] [--jobs 500] [--repeat 3]

Runs on its own ports and state folder and wipes them afterwards."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, watch

from superpod.k8s.client import load
from superpod.localcluster.audit import operator_writes
from superpod.localcluster.cluster import REPO, LocalCluster, Ports, state_dir
from superpod.sim import nodes, presets

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import machine, wait_all_ready  # noqa: E402

PORTS = Ports(etcd=12779, etcd_peer=12780, apiserver=16843, controller_manager=20657, scheduler=20659, kwok=20647)
# (share of jobs, replicas, GPUs per replica): 1-GPU notebooks up to 16-node gangs inside one leaf
MIX = [(0.42, 1, 1), (0.20, 1, 8), (0.20, 2, 8), (0.10, 4, 8), (0.06, 8, 8), (0.02, 16, 8)]
WORKERS = 32


def job_shapes(count: int) -> list[tuple[int, int]]:
    shapes = []
    for share, replicas, gpus in MIX:
        shapes += [(replicas, gpus)] * round(share * count)
    return (shapes + [(1, 1)] * count)[:count]


def wait_running(core: client.CoreV1Api, ns: str, total: int, started: float) -> float:
    running: set[str] = set()
    while len(running) < total:
        for ev in watch.Watch().stream(core.list_namespaced_pod, ns, timeout_seconds=120):
            p = ev["object"]
            if p.status.phase == "Running":
                running.add(p.metadata.name)
            if len(running) >= total:
                break
    return time.monotonic() - started


def bare_client(api: client.ApiClient, node_names: list[str], shapes: list[tuple[int, int]]) -> tuple[float, float]:
    core = client.CoreV1Api(api)
    ns = "bench-bare"
    core.create_namespace({"metadata": {"name": ns}})
    pods, i = [], 0
    for j, (replicas, gpus) in enumerate(shapes):
        for r in range(replicas):
            pods.append({"metadata": {"name": f"j{j}-{r}"}, "spec": {
                "nodeName": node_names[i % len(node_names)], "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "trainer",
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}})
            i += 1
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda p: core.create_namespaced_pod(ns, p, _preload_content=False), pods))
    created = time.monotonic() - started
    running = wait_running(core, ns, len(pods), started)
    core.delete_namespace(ns)
    return created, running


def operator_run(api: client.ApiClient, shapes: list[tuple[int, int]]) -> tuple[float, int]:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    ns = "bench-operator"
    core.create_namespace({"metadata": {"name": ns}})

    def submit(j: int) -> None:
        replicas, gpus = shapes[j]
        custom.create_namespaced_custom_object("superpod.dev", "v1alpha1", ns, "trainingjobs", {
            "apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": f"j{j}"},
            "spec": {"replicas": replicas, "resources": {"gpus": gpus},
                     "topology": {"required": "leaf"} if replicas > 1 else {},
                     "template": {"spec": {"containers": [{"name": "main", "image": "trainer"}]}}}})

    total = sum(r for r, _ in shapes)
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(submit, range(len(shapes))))
    elapsed = wait_running(core, ns, total, started)
    running_jobs = sum(1 for j in custom.list_namespaced_custom_object("superpod.dev", "v1alpha1", ns,
                                                                       "trainingjobs")["items"]
                       if (j.get("status") or {}).get("phase") in ("Starting", "Running"))
    return elapsed, running_jobs


def indexed_jobs_run(api: client.ApiClient, shapes: list[tuple[int, int]]) -> tuple[float, int]:
    """The same gangs as Indexed Jobs whose pods name this scheduler: the gang label and size on the pod template."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    ns = "bench-indexed"
    core.create_namespace({"metadata": {"name": ns}})

    def submit(j: int) -> None:
        replicas, gpus = shapes[j]
        notes = {"superpod.dev/gang-size": str(replicas)}
        if replicas > 1:
            notes["superpod.dev/topology-required"] = "leaf"
        batch.create_namespaced_job(ns, {"metadata": {"name": f"j{j}"}, "spec": {
            "completionMode": "Indexed", "completions": replicas, "parallelism": replicas, "template": {
                "metadata": {"labels": {"superpod.dev/gang": f"j{j}"}, "annotations": notes},
                "spec": {"schedulerName": "superpod-scheduler", "restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}},
            _preload_content=False)

    total = sum(r for r, _ in shapes)
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(submit, range(len(shapes))))
    elapsed = wait_running(core, ns, total, started)
    bound = sum(1 for p in core.list_namespaced_pod(ns).items if p.spec.node_name)
    return elapsed, bound


def writes_per_job(local: LocalCluster, since: float, until: float, jobs: int) -> str:
    """The operator's successful writes between two times, by verb and resource, per job (the Lease left out)."""
    counts = Counter(f"{w.verb} {w.resource}" for w in operator_writes(local.logs / "audit.log")
                     if since <= w.time < until and w.resource != "leases")
    total = sum(counts.values())
    return f"{total / jobs:.2f} (" + ", ".join(f"{what} {n / jobs:.2f}" for what, n in counts.most_common()) + ")"


def wait_no_pods(core: client.CoreV1Api, namespaces: tuple[str, ...]) -> None:
    """Until the namespaces a run used are gone, so the next run starts on an empty cluster."""
    while any(ns.metadata.name in namespaces for ns in core.list_namespace().items):
        time.sleep(1)


def simulated_fleet(local: LocalCluster, count: int) -> tuple[client.ApiClient, list[dict], list[str]]:
    """`count` simulated DGX H100 nodes, all Ready, the CRDs and the sample ClusterTopology: the API client, the
    node objects, and a kubectl command line."""
    api = load(local.kubeconfig, pool_size=WORKERS)
    objs = presets.preset_nodes("dgx-h100", count)
    nodes.create_nodes(api, objs)
    wait_all_ready(client.CoreV1Api(api), presets.SIM_LABEL, len(objs))  # KWOK ignores pods of unready nodes
    kubectl = [str(local.build(quiet=True) / "kubectl"), f"--kubeconfig={local.kubeconfig}"]
    for step in (["apply", "-f", str(REPO / "crds")], ["wait", "--for=condition=Established", "crd", "--all"],
                 ["apply", "-f", str(REPO / "samples" / "topology.yaml")]):
        subprocess.run(kubectl + step, check=True, capture_output=True)
    return api, objs, kubectl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the three runs; medians are printed")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    local = LocalCluster(state_dir().parent / "cluster-bench-operator", PORTS)
    local.wipe()
    local.up(local.build(quiet=True))
    try:
        api, objs, _ = simulated_fleet(local, args.nodes)
        shapes = job_shapes(args.jobs)
        pods = sum(r for r, _ in shapes)
        gpus = sum(r * g for r, g in shapes)
        print(f"cluster: {args.nodes} simulated DGX H100 nodes ({args.nodes * 8} GPUs); workload: {len(shapes)} jobs, "
              f"{pods} pods, {gpus} GPUs (multi-node jobs require one leaf)")
        core = client.CoreV1Api(api)
        env = {**os.environ, "KUBECONFIG": str(local.kubeconfig)}
        local.start_process("operator", [sys.executable, "-m", "superpod.cli", "run", "--metrics-port", "0"], env)
        time.sleep(3)
        runs: dict[str, list[float]] = {"bare": [], "trainingjobs": [], "indexed": []}
        for round_ in range(1, args.repeat + 1):  # interleaved, so drift on this machine hits all three alike
            created, bare = bare_client(api, [o["metadata"]["name"] for o in objs], shapes)
            wait_no_pods(core, ("bench-bare",))
            marks = [time.time()]  # the writes are counted from submission until all run (not the teardown)
            elapsed, running_jobs = operator_run(api, shapes)
            marks.append(time.time())
            core.delete_namespace("bench-operator")
            wait_no_pods(core, ("bench-operator",))
            marks.append(time.time())
            indexed, bound = indexed_jobs_run(api, shapes)
            marks.append(time.time())
            core.delete_namespace("bench-indexed")
            wait_no_pods(core, ("bench-indexed",))
            print(f"round {round_}: bare client {bare:.1f}s (created in {created:.1f}s); TrainingJobs {elapsed:.1f}s "
                  f"({running_jobs}/{len(shapes)} placed); Indexed Jobs {indexed:.1f}s ({bound}/{pods} pods bound)")
            for name, seconds in (("bare", bare), ("trainingjobs", elapsed), ("indexed", indexed)):
                runs[name].append(seconds)
            print(f"  the operator's writes per job (audit log): TrainingJobs "
                  f"{writes_per_job(local, marks[0], marks[1], len(shapes))}; Indexed Jobs "
                  f"{writes_per_job(local, marks[2], marks[3], len(shapes))}")
        median = {name: statistics.median(values) for name, values in runs.items()}
        print(f"medians of {args.repeat} round(s), time until all {pods} pods Running (the operator running in all):")
        for name, label in (("bare", f"bare client, {WORKERS} threads, nodes pre-assigned (the ceiling)"),
                            ("trainingjobs", "operator, TrainingJobs"),
                            ("indexed", "operator, Indexed Jobs (pods by kube-controller-manager, bound through "
                                        "pods/binding)")):
            print(f"  {label}: {median[name]:.1f}s, {pods / median[name]:.0f} pods/s; ratio to the ceiling "
                  f"{median['bare'] / median[name]:.2f}")
    finally:
        local.wipe()


if __name__ == "__main__":
    main()
