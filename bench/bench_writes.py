"""What each kind of write costs the control plane: CPU milliseconds of the API server (and of etcd and
kube-controller-manager, which react) per write, for the writes a TrainingJob's life is made of, beside a bound pod's
create, the write the bare-client ceiling of bench_operator.py is made of. Medians of interleaved rounds.

    .venv/bin/python bench/bench_writes.py [--writes 1000] [--repeat 3]

Nothing else runs meanwhile (no operator, no KWOK nodes: the pods are bound to a node that does not exist, so no
kubelet acts on them). Runs on its own ports and state folder and wipes them afterwards."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from superpod.k8s.client import load
from superpod.localcluster.cluster import REPO, LocalCluster, Ports, state_dir

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import machine  # noqa: E402
from cpu import cpu_seconds  # noqa: E402

PORTS = Ports(etcd=13779, etcd_peer=13780, apiserver=17843, controller_manager=21657, scheduler=21659, kwok=21647)
WORKERS = 32
JOBS = "/apis/superpod.dev/v1alpha1/namespaces/{ns}/trainingjobs"
NOW = "2026-12-01T00:00:00Z"
MEASURED = ("kube-apiserver", "etcd", "kube-controller-manager")


class Client:
    """Plain JSON over the admin client's connection pool (the benchmark's own CPU stays small)."""

    def __init__(self, local: LocalCluster) -> None:
        api = load(local.kubeconfig, pool_size=WORKERS)
        self.host, self.http = api.configuration.host, api.rest_client.pool_manager

    def send(self, method: str, path: str, body: dict) -> dict:
        answer = self.http.request(method, self.host + path, body=orjson.dumps(body),
                                   headers={"Content-Type": "application/json", "Accept": "application/json"})
        if answer.status >= 300:
            raise RuntimeError(f"{method} {path}: {answer.status} {answer.data[:300]!r}")
        return orjson.loads(answer.data)


def job(i: int) -> dict:
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": f"j{i}"},
            "spec": {"replicas": 2, "resources": {"gpus": 8}, "topology": {"required": "leaf"},
                     "template": {"spec": {"containers": [{"name": "main", "image": "trainer"}]}}}}


def status(phase: str) -> dict:
    """A status as the operator writes it at placement (Starting) and when all replicas run."""
    conditions = [{"type": "Schedulable", "status": "True", "reason": "Placed", "lastTransitionTime": NOW,
                   "message": "placed 2 replicas on 2 nodes in leaf su-1"}]
    if phase == "Running":
        conditions.append({"type": "Running", "status": "True", "reason": "Running", "lastTransitionTime": NOW,
                           "message": "all 2 replicas running"})
    return {"phase": phase, "attempt": 1, "gpus": "16 GPUs", "ready": "0/2" if phase == "Starting" else "2/2",
            "domain": "leaf su-1", "domains": {"spine": ["s1"], "leaf": ["su-1"]},
            "placement": {"node-1": [0], "node-2": [1]}, "queuedAt": NOW, "attemptStartTime": NOW,
            "observedGeneration": 1, "reason": "Placed", "message": "placed 2 replicas on 2 nodes in leaf su-1",
            "conditions": conditions}


def pod(name: str, node: str | None) -> dict:
    spec = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer", "resources": {
        "limits": {"nvidia.com/gpu": "8"}}}]}
    return {"metadata": {"name": name, "labels": {"job": name}}, "spec": {**spec, "nodeName": node} if node else
            {**spec, "schedulerName": "nobody"}}


def event(i: int, ns: str) -> dict:
    return {"metadata": {"generateName": f"j{i}."}, "type": "Normal", "reason": "Placed", "count": 1,
            "involvedObject": {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob", "name": f"j{i}",
                               "namespace": ns},
            "message": "placed 2 replicas on 2 nodes in leaf su-1", "firstTimestamp": NOW, "lastTimestamp": NOW,
            "source": {"component": "bench"}}


def writes(client: Client, ns: str) -> list[tuple[str, Callable[[int], object]]]:
    """(what, one write of it by number), in the order they run: each may need what the ones before made."""
    jobs = JOBS.format(ns=ns)
    made: dict[int, dict] = {}

    def create_job(i: int) -> None:
        made[i] = client.send("POST", jobs, job(i))

    def write_status(phase: str) -> Callable[[int], None]:
        def write(i: int) -> None:
            made[i] = client.send("PUT", f"{jobs}/j{i}/status", {**made[i], "status": status(phase)})
        return write

    return [
        ("create pods (bound)", lambda i: client.send("POST", f"/api/v1/namespaces/{ns}/pods", pod(f"b{i}", "n"))),
        ("create trainingjobs", create_job),
        ("update trainingjobs/status (Starting)", write_status("Starting")),
        ("update trainingjobs/status (Running)", write_status("Running")),
        ("create events", lambda i: client.send("POST", f"/api/v1/namespaces/{ns}/events", event(i, ns))),
        ("create services (headless)", lambda i: client.send("POST", f"/api/v1/namespaces/{ns}/services", {
            "metadata": {"name": f"s{i}"}, "spec": {"clusterIP": "None", "selector": {"job": f"b{i}"},
                                                    "ports": [{"port": 29500}]}})),
        ("create pods (unbound)", lambda i: client.send("POST", f"/api/v1/namespaces/{ns}/pods", pod(f"u{i}", None))),
        ("create pods/binding", lambda i: client.send("POST", f"/api/v1/namespaces/{ns}/pods/u{i}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": f"u{i}"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n"}})),
    ]


def measure(local: LocalCluster, write: Callable[[int], object], count: int) -> dict[str, float]:
    """CPU milliseconds per write of each measured process, `count` writes from WORKERS threads, and a few seconds
    after for the controllers that react to them."""
    pids = {name: local.pid(name) for name in MEASURED}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(write, range(count)))
    time.sleep(3)
    return {name: 1000 * (cpu_seconds(pid) - before[name]) / count for name, pid in pids.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=1000, help="writes of each kind per round")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; medians are printed")
    args = ap.parse_args()
    print(f"machine: {machine()}")
    local = LocalCluster(state_dir().parent / "cluster-bench-writes", PORTS)
    local.wipe()
    local.up(local.build(quiet=True))
    try:
        kubectl = [str(local.build(quiet=True) / "kubectl"), f"--kubeconfig={local.kubeconfig}"]
        for step in (["apply", "-f", str(REPO / "crds")], ["wait", "--for=condition=Established", "crd", "--all"]):
            subprocess.run(kubectl + step, check=True, capture_output=True)
        client = Client(local)
        found: dict[str, list[dict[str, float]]] = {}
        for round_ in range(1, args.repeat + 1):
            ns = f"bench-writes-{round_}"
            client.send("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            time.sleep(2)
            for what, write in writes(client, ns):
                found.setdefault(what, []).append(measure(local, write, args.writes))
            subprocess.run(kubectl + ["delete", "namespace", ns, "--wait=true"], check=True, capture_output=True)
        base = statistics.median(m["kube-apiserver"] for m in found["create pods (bound)"])
        print(f"CPU ms per write, medians of {args.repeat} round(s) of {args.writes} writes each ({WORKERS} at once):")
        for what, rounds in found.items():
            median = {name: statistics.median(m[name] for m in rounds) for name in MEASURED}
            print(f"  {what:40s} API server {median['kube-apiserver']:5.2f} ({median['kube-apiserver'] / base:3.1f} "
                  f"bound pod creates); etcd {median['etcd']:4.2f}; kube-controller-manager "
                  f"{median['kube-controller-manager']:4.2f}")
    finally:
        local.wipe()


if __name__ == "__main__":
    main()
