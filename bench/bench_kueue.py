"""This operator beside Kueue with Topology Aware Scheduling, in one run, on the same simulated cluster with the same
gangs: bench_operator's 500 gangs (1,110 pods) on 1,000 DGX H100 nodes. This operator runs them as TrainingJobs;
Kueue admits the same gangs as batch/v1 Indexed Jobs (the queue label, `kueue.x-k8s.io/podset-required-topology:
superpod.dev/leaf` on the multi-node ones) and kube-scheduler binds them. Printed for each: time until every pod is
Running, pods/s, and the share of multi-node gangs inside one leaf.

    bash hack/build.sh --kueue && .venv/bin/python bench/bench_kueue.py [--nodes 1000] [--jobs 500] [--qps 500] \
        [--repeat 3]

Kueue runs as a local process: no leader election, only the batch/Job integration, its webhooks on 127.0.0.1 with
the local CA's certificate and its webhook configuration rewritten to `clientConfig.url`. With internal certificate
management off it reads a metrics certificate from /etc/kueue/metrics/certs, so the bench writes the local one
there (it runs as root here). Runs on its own ports and state folder and wipes them afterwards."""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from kubernetes import client

from superpod.localcluster.cluster import COMPONENTS, LocalCluster, Ports, state_dir

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import machine  # noqa: E402
from bench_operator import (  # noqa: E402
    WORKERS,
    Incomplete,
    first_cycle,
    job_shapes,
    operator_run,
    paced,
    round_ratios,
    simulated_fleet,
    startup_latency,
    watch_running,
)
from cpu import CpuMeter  # noqa: E402

PORTS = Ports(etcd=12879, etcd_peer=12880, apiserver=16943, controller_manager=20757, scheduler=20759, kwok=20747)
LEAF = "superpod.dev/leaf"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def kueue_up(local: LocalCluster, kubectl: list[str], qps: int) -> subprocess.Popen:
    """Kueue's CRDs, the process, and its webhooks (those of the batch/Job integration and its own objects)."""
    bin_dir = local.build(quiet=True)
    files = bin_dir / "kueue-config"
    for crd in sorted(files.glob("kueue.x-k8s.io_*.yaml")):
        subprocess.run(kubectl + ["apply", "--server-side", "-f", str(crd)], check=True, capture_output=True)
    subprocess.run(kubectl + ["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"], check=True,
                   capture_output=True)
    work = local.root / "kueue"
    certs = work / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    METRICS_CERTS.mkdir(parents=True, exist_ok=True)
    for target in (certs, METRICS_CERTS):
        shutil.copy(local.pki / "apiserver.crt", target / "tls.crt")
        shutil.copy(local.pki / "apiserver.key", target / "tls.key")
    webhook, health = _free_port(), _free_port()
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
              "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
              "webhook": {"port": webhook, "host": "127.0.0.1", "certDir": str(certs)},
              "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}, "metrics": {"bindAddress": "0"},
              "clientConnection": {"qps": qps, "burst": qps}, "integrations": {"frameworks": ["batch/job"]}}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    log = open(local.logs / "kueue.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([str(bin_dir / "kueue"), f"--config={work / 'config.yaml'}",
                             "--feature-gates=VisibilityOnDemand=false"], stdout=log, stderr=log,
                            env={**os.environ, "KUBECONFIG": str(local.kubeconfig)})
    deadline = time.monotonic() + 120
    while not LocalCluster.http_ok(f"http://127.0.0.1:{health}/readyz"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"Kueue did not become ready; see {local.logs / 'kueue.log'}")
        time.sleep(0.5)
    ca = base64.b64encode((local.pki / "ca.crt").read_bytes()).decode()
    docs = [doc for doc in yaml.safe_load_all((files / "manifests.yaml").read_text()) if doc]
    for doc in docs:
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        doc["webhooks"] = [hook for hook in doc["webhooks"] if "kueue-x-k8s-io" in hook["clientConfig"]["service"]
                           ["path"] or "batch-v1-job" in hook["clientConfig"]["service"]["path"]]
        for hook in doc["webhooks"]:
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook}{hook['clientConfig']['service']['path']}",
                                    "caBundle": ca}
    subprocess.run(kubectl + ["apply", "-f", "-"], input=yaml.safe_dump_all(docs), text=True, check=True,
                   capture_output=True)
    return proc


def kueue_queues(kubectl: list[str], namespace: str, gpus: int) -> None:
    """Topology (leaf, then node), a flavor of the H100 nodes on it, a ClusterQueue with every GPU, a LocalQueue."""
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "superpod"},
         "spec": {"levels": [{"nodeLabel": LEAF}, {"nodeLabel": "kubernetes.io/hostname"}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100"},
         "spec": {"nodeLabels": {"nvidia.com/gpu.product": PRODUCT}, "topologyName": "superpod"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "all"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
             {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq",
                                                                                  "namespace": namespace},
         "spec": {"clusterQueue": "all"}},
    ]
    subprocess.run(kubectl + ["create", "namespace", namespace], check=True, capture_output=True)
    subprocess.run(kubectl + ["apply", "-f", "-"], input=yaml.safe_dump_all(objects), text=True, check=True,
                   capture_output=True)


def kueue_run(api: client.ApiClient, namespace: str, shapes: list[tuple[int, int]], submitted: dict,
              running: dict) -> float:
    """The gangs as Indexed Jobs in Kueue's queue, suspended until Kueue admits them; kube-scheduler binds."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)

    def job(j: int) -> dict:
        replicas, gpus = shapes[j]
        notes = {"kueue.x-k8s.io/podset-required-topology": LEAF} if replicas > 1 else {}
        return {"metadata": {"name": f"j{j}", "labels": {"kueue.x-k8s.io/queue-name": "lq"}}, "spec": {
            "completionMode": "Indexed", "completions": replicas, "parallelism": replicas, "suspend": True,
            "template": {"metadata": {"annotations": notes}, "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}

    def submit(j: int) -> None:
        batch.create_namespaced_job(namespace, job(j), _preload_content=False)

    started = time.monotonic()
    watching = watch_running(core, namespace, sum(r for r, _ in shapes), started, running)
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda j: paced(j, started, 0, submitted, submit), range(len(shapes))))
    return watching.result()


def one_leaf(api: client.ApiClient, namespace: str, label: str) -> tuple[int, int]:
    """Of the gangs with more than one pod: how many sit inside one leaf, of how many."""
    core = client.CoreV1Api(api)
    leaf = {n.metadata.name: (n.metadata.labels or {}).get(LEAF) for n in core.list_node().items}
    gangs: dict[str, list] = {}
    for pod in core.list_namespaced_pod(namespace).items:
        gangs.setdefault((pod.metadata.labels or {}).get(label, ""), []).append(leaf.get(pod.spec.node_name))
    multi = [leaves for leaves in gangs.values() if len(leaves) > 1]
    return sum(1 for leaves in multi if len(set(leaves)) == 1 and None not in leaves), len(multi)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--qps", type=int, default=500, help="Kueue's client QPS and burst (it ships with 50/100)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of the two, interleaved (each goes first in every other round); medians are printed")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    local = LocalCluster(state_dir().parent / "cluster-bench-kueue", PORTS)
    local.wipe()
    local.up(local.build(quiet=True))
    try:
        api, _, kubectl = simulated_fleet(local, args.nodes)
        shapes = job_shapes(args.jobs)
        pods = sum(r for r, _ in shapes)
        print(f"cluster: {args.nodes} simulated DGX H100 nodes ({args.nodes * 8} GPUs), leaves of 32; workload: "
              f"{len(shapes)} gangs, {pods} pods (multi-node gangs require one leaf)")
        took: dict[str, list[float | None]] = {"kueue": [], "operator": []}  # None: an incomplete round
        rounds = {"kueue": lambda r: kueue_round(local, api, kubectl, shapes, args.qps, args.nodes * 8,
                                                 f"bench-kueue-{r}"),
                  "operator": lambda r: operator_round(local, api, shapes, f"bench-operator-{r}")}
        for round_ in range(1, args.repeat + 1):
            print(f"round {round_}:")
            for name in sorted(rounds, reverse=round_ % 2 == 0):  # each goes first in every other round
                took[name].append(rounds[name](round_))
        faster = round_ratios(took["kueue"], took["operator"])
        if not faster:
            raise SystemExit("no complete round of both")
        kueue, ours = (statistics.median(t for t in took[name] if t is not None) for name in ("kueue", "operator"))
        print(f"medians, all {pods} pods Running: Kueue + TAS {kueue:.1f}s "
              f"({pods / kueue:.0f} pods/s), this operator {ours:.1f}s ({pods / ours:.0f} pods/s); faster in the "
              f"{len(faster)} rounds both completed {' / '.join(f'{x:.2f}x' for x in faster)}, median "
              f"{statistics.median(faster):.2f}x")
    finally:
        local.wipe()


def kueue_round(local: LocalCluster, api: client.ApiClient, kubectl: list[str], shapes: list[tuple[int, int]],
                qps: int, gpus: int, namespace: str) -> float | None:
    """Kueue started, the gangs run in a namespace of their own, Kueue stopped: seconds until all ran."""
    kueue = kueue_up(local, kubectl, qps)
    try:
        kueue_queues(kubectl, namespace, gpus)
        took = measured(api, namespace, "batch.kubernetes.io/job-name", f"Kueue + TAS (client QPS {qps}), "
                        "kube-scheduler binds", meter(local, kueue.pid), shapes,
                        lambda submitted, running: kueue_run(api, namespace, shapes, submitted, running))
        gone(api, namespace)  # while Kueue runs: it removes its finalizers
    finally:
        kueue.terminate()
        kueue.wait(30)
    return took


def operator_round(local: LocalCluster, api: client.ApiClient, shapes: list[tuple[int, int]],
                   namespace: str) -> float | None:
    """The operator started and through its first cycle (as Kueue is through its readiness check), the gangs run as
    TrainingJobs in a namespace of their own, the operator stopped."""
    env = {**os.environ, "KUBECONFIG": str(local.kubeconfig)}
    port = _free_port()
    local.start_process("operator", [sys.executable, "-m", "superpod.cli", "run", "--metrics-port", str(port)], env)
    try:
        first_cycle(f"http://127.0.0.1:{port}/metrics")
        took = measured(api, namespace, "superpod.dev/job-name", "this operator, TrainingJobs",
                        meter(local, local.pid("operator")), shapes,
                        lambda submitted, running: operator_run(api, shapes, 0, submitted, running, namespace)[0])
        gone(api, namespace)
    finally:
        os.kill(local.pid("operator"), signal.SIGTERM)
        while local.pid("operator"):
            time.sleep(0.2)
    return took


def measured(api: client.ApiClient, namespace: str, job_label: str, what: str, cpu: CpuMeter,
             shapes: list[tuple[int, int]], run: Callable[[dict, dict], float]) -> float | None:
    """Seconds until all of one round's gangs ran (None if they did not), printed with their locality, the CPU
    each process used and the gangs' startup latency."""
    submitted: dict[int, float] = {}
    running: dict[str, float] = {}
    try:
        took = run(submitted, running)
    except Incomplete as e:
        print(f"  {what}: incomplete, {e}; left out of the medians")
        return None
    inside, multi = one_leaf(api, namespace, job_label)
    print(f"  {what}: all Running in {took:.1f}s; {inside} of {multi} multi-node gangs inside one leaf; "
          f"{cpu.report(took)}")
    print(f"    gang startup, submitted to all pods running: {startup_latency(shapes, submitted, running)}")
    return took


def gone(api: client.ApiClient, namespace: str) -> None:
    client.CoreV1Api(api).delete_namespace(namespace)
    while any(ns.metadata.name == namespace for ns in client.CoreV1Api(api).list_namespace().items):
        time.sleep(1)


def meter(local: LocalCluster, scheduler: int | None) -> CpuMeter:
    """CPU of the control plane, the scheduler under test (Kueue or the operator) and this client."""
    return CpuMeter({**{name: local.pid(name) for name in COMPONENTS}, "scheduler": scheduler, "bench": os.getpid()})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
