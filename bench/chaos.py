"""Chaos on the real local control plane: two operator replicas scheduling a stream of gangs while they are
SIGKILLed at random instants (>= 100 times), the API server is restarted, and — in a second phase — one replica
runs an artificially slow cycle (longer than its Lease) and is frozen (SIGSTOP) mid-cycle now and then. A sampler
lists everything every 0.5 s and counts what must never be seen:

- overcommitted nodes: a node whose live pods request more of any resource than it has;
- partial gangs: a placed job whose current attempt has some but not all of its pods for longer than --settle
  seconds (a gang being written, or finished by the next leader after a kill, is partial for a moment);
- jobs with two live attempts: live pods (not terminating, not finished) of two attempts of one job;
- jobs lost: submitted jobs that never finish (each runs 5-20 s; some fail and restart);
- double writers: writes by a replica while another held the Lease, from the API server's audit log.

    .venv/bin/python bench/chaos.py [--gangs 240] [--kills 110] [--nodes 48]

Runs on its own ports and state folder and wipes them afterwards. Prints the figures; exit code 1 if any is not 0."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from kubernetes import client

from superpod.api.resources import pod_requests, quantity
from superpod.hardware import nodes, presets
from superpod.k8s.client import load
from superpod.localcluster.audit import operator_writes, second_writers
from superpod.localcluster.cluster import REPO, LocalCluster, Ports, state_dir

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import machine, wait_all_ready  # noqa: E402

PORTS = Ports(etcd=12879, etcd_peer=12880, apiserver=16943, controller_manager=20757, scheduler=20759, kwok=20747)
NS = "chaos"
LEASE = "4"  # seconds: a killed leader is replaced within about this long


class Replica:
    def __init__(self, local: LocalCluster, name: str, extra: tuple[str, ...] = ()) -> None:
        self.local, self.name, self.extra, self.proc = local, name, extra, None
        self.log = local.logs / f"{name}.log"

    def start(self) -> None:
        out = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, "KUBECONFIG": str(self.local.kubeconfig)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "superpod.cli", "run", "--metrics-port", "0", "--identity", self.name,
             "--lease-duration", LEASE, "--namespace", "superpod-system", "--api-workers", "4", *self.extra],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        out.close()

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait(10)

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        if self.proc:
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


class Sampler(threading.Thread):
    """Every 0.5 s: pods, jobs and nodes, and what is wrong with them."""

    def __init__(self, api: client.ApiClient, settle: float) -> None:
        super().__init__(daemon=True)
        self.core, self.custom, self.settle = client.CoreV1Api(api), client.CustomObjectsApi(api), settle
        self.stop = threading.Event()
        self.samples = 0
        self.bad = Counter()  # what -> samples in which it was seen
        self.examples: dict[str, str] = {}
        self.partial_since: dict[str, float] = {}
        self.longest_partial = 0.0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.sample()
            except Exception as e:  # noqa: BLE001 - the API server may be restarting: skip this sample
                self.bad["samples missed (API unreachable)"] += 1
                self.examples.setdefault("samples missed (API unreachable)", str(e)[:200])
            self.stop.wait(0.5)

    def sample(self) -> None:
        pods = self.core.list_namespaced_pod(NS, _preload_content=False).json()["items"]
        jobs = self.custom.list_namespaced_custom_object("superpod.dev", "v1alpha1", NS, "trainingjobs")["items"]
        alloc = {n["metadata"]["name"]: n["status"].get("allocatable") or {}
                 for n in self.core.list_node(_preload_content=False).json()["items"]}
        now = time.monotonic()
        self.samples += 1
        used: dict[str, Counter] = defaultdict(Counter)
        live: dict[str, set] = defaultdict(set)
        by_attempt: Counter = Counter()
        for p in pods:
            meta, phase = p["metadata"], (p.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                continue
            used[p["spec"].get("nodeName")].update(
                pod_requests(p["spec"], lambda f, q: {r: quantity(v, r) for r, v in q.items()}))
            job = (meta.get("labels") or {}).get("superpod.dev/job-name")
            if job and not meta.get("deletionTimestamp"):
                live[job].add(meta["labels"]["superpod.dev/attempt"])
        for p in pods:
            labels = p["metadata"].get("labels") or {}
            if not p["metadata"].get("deletionTimestamp") and labels.get("superpod.dev/job-name"):
                by_attempt[(labels["superpod.dev/job-name"], labels["superpod.dev/attempt"])] += 1
        over = [f"{n}: {dict(c)}" for n, c in used.items() if n in alloc and any(
            v > quantity(alloc[n].get(r, 0), r) for r, v in c.items())]
        self._count("overcommitted nodes", over)
        self._count("jobs with two live attempts", [f"{j}: {sorted(a)}" for j, a in live.items() if len(a) > 1])
        partial = []
        for j in jobs:
            st, name = j.get("status") or {}, j["metadata"]["name"]
            have = by_attempt.get((name, str(st.get("attempt"))), 0)
            if st.get("phase") in ("Starting", "Running") and 0 < have < j["spec"]["replicas"]:
                since = self.partial_since.setdefault(name, now)
                self.longest_partial = max(self.longest_partial, now - since)
                if now - since > self.settle:
                    partial.append(f"{name}: {have} of {j['spec']['replicas']} for {now - since:.0f}s")
            else:
                self.partial_since.pop(name, None)
        self._count(f"partial gangs (> {self.settle:.0f}s)", partial)

    def _count(self, what: str, found: list[str]) -> None:
        self.bad[what] += 1 if found else 0
        if found:
            self.examples.setdefault(what, "; ".join(found[:3]))

    def cut_short(self) -> int:
        """Gangs partly written right now (listed at once, not from the last sample): right after a kill, the gangs
        the kill cut short."""
        pods = self.core.list_namespaced_pod(NS, _preload_content=False).json()["items"]
        jobs = self.custom.list_namespaced_custom_object("superpod.dev", "v1alpha1", NS, "trainingjobs")["items"]
        have = Counter((p["metadata"]["labels"].get("superpod.dev/job-name"), p["metadata"]["labels"].get(
            "superpod.dev/attempt")) for p in pods if not p["metadata"].get("deletionTimestamp"))
        return sum(1 for j in jobs if (j.get("status") or {}).get("phase") == "Starting" and 0 < have.get(
            (j["metadata"]["name"], str(j["status"].get("attempt"))), 0) < j["spec"]["replicas"])


def gang(rng: random.Random, i: int) -> dict:
    replicas = rng.choice([1, 1, 2, 2, 4, 8])
    gpus = 8 if replicas > 1 else rng.choice([4, 8])
    notes = {"sim.superpod.dev/run-for": f"{rng.randint(5, 20)}s"}
    if rng.random() < 0.1:
        notes = {"sim.superpod.dev/fail-after": f"{rng.randint(2, 6)}s"}
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": f"g{i:04d}"},
            "spec": {"replicas": replicas, "resources": {"gpus": gpus}, "maxRestarts": 1,
                     "topology": {"required": "leaf"} if replicas > 1 else {},
                     "template": {"metadata": {"annotations": notes},
                                  "spec": {"containers": [{"name": "main", "image": "trainer"}]}}}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gangs", type=int, default=240)
    ap.add_argument("--kills", type=int, default=110)
    ap.add_argument("--pauses", type=int, default=12, help="SIGSTOPs of the slow replica in phase 2")
    ap.add_argument("--nodes", type=int, default=48)
    ap.add_argument("--settle", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep-logs", default="/tmp/superpod-chaos-logs", help="the operators' and components' logs")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print(f"machine: {machine()}")
    local = LocalCluster(state_dir().parent / "cluster-chaos", PORTS)
    local.wipe()
    local.up(local.build(quiet=True))
    started = time.monotonic()
    replicas: list[Replica] = []
    try:
        api = load(local.kubeconfig)
        objs = presets.preset_nodes("dgx-h100", args.nodes, nodes_per_unit=8)
        nodes.create_nodes(api, objs)
        wait_all_ready(client.CoreV1Api(api), presets.SIM_LABEL, len(objs))
        kubectl = [str(local.build(quiet=True) / "kubectl"), f"--kubeconfig={local.kubeconfig}"]
        for step in (["apply", "-f", str(REPO / "crds")], ["wait", "--for=condition=Established", "crd", "--all"],
                     ["apply", "-f", str(REPO / "samples" / "topology.yaml")], ["create", "namespace", NS]):
            subprocess.run(kubectl + step, check=True, capture_output=True)
        custom = client.CustomObjectsApi(api)
        sampler = Sampler(api, args.settle)
        sampler.start()
        replicas = [Replica(local, "replica-a"), Replica(local, "replica-b")]
        for r in replicas:
            r.start()
        print(f"cluster: {args.nodes} simulated DGX H100 nodes in leaves of 8; {args.gangs} gangs; "
              f"Lease {LEASE}s; sampling every 0.5s")
        submitted = 0
        kills = mid_gang = pauses = 0
        half = args.gangs // 2
        restarted_api = False
        phase2 = False
        while submitted < args.gangs or kills < args.kills or (phase2 and pauses < args.pauses):
            for _ in range(rng.randint(1, 3)):
                if submitted < args.gangs:
                    _submit(custom, gang(rng, submitted))
                    submitted += 1
            if kills < args.kills:
                victim = rng.choice(replicas)
                victim.kill()
                with contextlib.suppress(Exception):  # the API server may be restarting
                    mid_gang += sampler.cut_short()
                victim.start()
                kills += 1
            if not restarted_api and submitted >= half // 2:
                pid = int((local.root / "run" / "kube-apiserver.pid").read_text())
                os.kill(pid, signal.SIGTERM)
                time.sleep(3)
                local.up()
                restarted_api = True
                print(f"  API server restarted after {submitted} gangs")
            if not phase2 and submitted >= half and kills >= args.kills // 2:
                phase2 = True  # replica-a decides, then sleeps 6s (longer than its Lease) before writing
                replicas[0].kill()
                replicas[0] = Replica(local, "replica-a", ("--debug-slow-cycle", "6"))
                replicas[0].start()
                print(f"  phase 2 after {submitted} gangs, {kills} kills: replica-a with a 6s slow cycle")
            if phase2 and pauses < args.pauses and rng.random() < 0.5:
                replicas[0].signal(signal.SIGSTOP)
                time.sleep(rng.uniform(5, 9))
                replicas[0].signal(signal.SIGCONT)
                pauses += 1
            time.sleep(rng.uniform(1.5, 3.5))
        print(f"  stream done after {time.monotonic() - started:.0f}s: {submitted} gangs, {kills} kills (gangs left "
              f"partly written by a kill, seen right after it: {mid_gang}), {pauses} pauses of the slow replica")
        drained = _drain(custom, submitted, 600)
        sampler.stop.set()
        sampler.join(5)
        writes = operator_writes(local.logs / "audit.log")
        second = second_writers(writes)
        jobs = custom.list_namespaced_custom_object("superpod.dev", "v1alpha1", NS, "trainingjobs")["items"]
        phases = Counter((j.get("status") or {}).get("phase") for j in jobs)
        lost = submitted - phases.get("Succeeded", 0) - phases.get("Failed", 0)
        print(f"finished: {dict(phases)} after {drained:.0f}s of draining; {time.monotonic() - started:.0f}s in all")
        print(f"samples: {sampler.samples} in {drained + time.monotonic() - started:.0f}s (one every 0.5s, or as fast "
              f"as listing allows); longest partial gang seen {sampler.longest_partial:.1f}s")
        figures = {**{k: v for k, v in sampler.bad.items() if not k.startswith("samples missed")},
                   "jobs lost": lost, "double writers (audit log)": len(second)}
        for what, n in figures.items():
            print(f"  {what}: {n}" + (f"   e.g. {sampler.examples.get(what, '')}" if n else ""))
        print(f"  samples missed while the API server restarted: {sampler.bad['samples missed (API unreachable)']}")
        print(f"operator writes in the audit log: {len(writes)} by {sorted({w.replica for w in writes})}")
        if second:
            print("  second writers:", second[:5])
        errors = [line for r in replicas for line in _tracebacks(r.log.read_text())]
        print(f"tracebacks in the operators' logs: {len(errors)}" + "".join(f"\n    {e}" for e in errors[:10]))
        kept = Path(args.keep_logs)
        kept.mkdir(parents=True, exist_ok=True)
        for log in local.logs.glob("*.log"):
            shutil.copy(log, kept / log.name)
        print(f"logs kept in {kept}")
        return 1 if any(figures.values()) else 0
    finally:
        for r in replicas:
            r.stop()
        local.wipe()


def _tracebacks(text: str) -> list[str]:
    """The last line (exception and message) of each traceback in a log, with the log line that announced it."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j] and not lines[j].startswith((" ", "\t"))), i)
            out.append(f"{lines[i - 1][:100] if i else ''} -> {lines[end][:160]}")
    return out


def _submit(custom: client.CustomObjectsApi, body: dict) -> None:
    for _ in range(30):
        try:
            custom.create_namespaced_custom_object("superpod.dev", "v1alpha1", NS, "trainingjobs", body)
            return
        except Exception:  # noqa: BLE001 - the API server may be restarting
            time.sleep(1)


def _drain(custom: client.CustomObjectsApi, total: int, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            items = custom.list_namespaced_custom_object("superpod.dev", "v1alpha1", NS, "trainingjobs")["items"]
        except Exception:  # noqa: BLE001
            items = []
        done = sum(1 for j in items if (j.get("status") or {}).get("phase") in ("Succeeded", "Failed"))
        if done >= total:
            break
        time.sleep(2)
    return time.monotonic() - started


if __name__ == "__main__":
    sys.exit(main())
