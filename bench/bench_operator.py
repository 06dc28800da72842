"""Operator throughput on the local control plane: 1,000 simulated DGX H100 nodes (8,000 GPUs), 500 gangs of mixed
sizes submitted at once -> time until every pod is Running, and pods placed per second; the same gangs as TrainingJobs
and as Indexed Jobs (batch/v1, created by the real kube-controller-manager, spec.schedulerName: superpod-scheduler,
bound by the operator through pods/binding). Beside them, in the same run, the ceiling: a bare client creating the
same number of pods with their nodes already assigned; and (`--runs bare,floor,...`) the floor of a TrainingJob on
this API server: a bare client making what any scheduler of TrainingJobs must (the job, its Service, its pods, one
status write), the operator stopped. `podgangs` makes the bare client's very pods unbound, each naming this
scheduler and its gang, and the operator binds them: the scheduler's own cost over the ceiling; `kube-scheduler`
leaves the same pods to kube-scheduler (no gangs): what a scheduler that binds costs here.

    .venv/bin/python bench/bench_operator.py [--nodes 1000] [--jobs 500] [--repeat 3] [--runs ...] [--profile DIR]
        [--dra]

--dra publishes the nodes' GPUs as NVIDIA-style ResourceSlices only and has every pod claim its GPUs from a
ResourceClaimTemplate: TrainingJobs' claims are allocated by kube-scheduler on the nodes the operator chose, Indexed
Jobs' by the operator before it binds.

Each run also prints the CPU seconds every process used (where the 2 cores went); --profile samples the operator
with py-spy and the API server with pprof during each run and prints their hottest functions.

Runs on its own ports and state folder and wipes them afterwards."""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import orjson
from kubernetes import client, watch

from superpod.api.manifests import SCHEDULER_NAME
from superpod.api.podgang import GANG_LABEL, GANG_SIZE, RANK_LABEL, TOPOLOGY
from superpod.hardware import nodes, presets
from superpod.k8s.client import load
from superpod.localcluster.audit import operator_writes
from superpod.localcluster.cluster import COMPONENTS, REPO, LocalCluster, Ports, state_dir

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import machine, wait_all_ready  # noqa: E402
from cpu import CpuMeter, GoProfile, Profile, cpu_seconds  # noqa: E402
from scrape import Histograms, ServerWrites, buckets  # noqa: E402

PORTS = Ports(etcd=12779, etcd_peer=12780, apiserver=16843, controller_manager=20657, scheduler=20659, kwok=20647)
METRICS = 20671  # the operator's /metrics
CYCLES = ("superpod_plan_seconds", "superpod_cycle_seconds")
# (share of jobs, replicas, GPUs per replica): 1-GPU notebooks up to 16-node gangs inside one leaf
MIX = [(0.42, 1, 1), (0.20, 1, 8), (0.20, 2, 8), (0.10, 4, 8), (0.06, 8, 8), (0.02, 16, 8)]
WORKERS = 32
GROUP, VERSION = "superpod.dev", "v1alpha1"


def job_shapes(count: int) -> list[tuple[int, int]]:
    shapes = []
    for share, replicas, gpus in MIX:
        shapes += [(replicas, gpus)] * round(share * count)
    return (shapes + [(1, 1)] * count)[:count]


class Incomplete(Exception):
    """Not every pod of a run was Running in time (a gang that found no room: the workload nearly fills the
    cluster, and which jobs get a leaf depends on the order they came in)."""


def wait_running(core: client.CoreV1Api, ns: str, total: int, started: float,
                 seen: dict[str, float] | None = None, timeout: float = 600) -> float:
    """Seconds from `started` until `total` pods of the namespace run; `seen` gets each pod's first Running moment.
    Incomplete after `timeout` seconds."""
    running = {} if seen is None else seen
    while len(running) < total:
        if time.monotonic() - started > timeout:
            raise Incomplete(f"{len(running)} of {total} pods Running after {timeout:.0f}s")
        for ev in watch.Watch().stream(core.list_namespaced_pod, ns, timeout_seconds=60, deserialize=False):
            pod = ev["object"]  # plain JSON: the watcher's own CPU stays small beside the cluster's
            if (pod.get("status") or {}).get("phase") == "Running":
                running.setdefault(pod["metadata"]["name"], time.monotonic())
            if len(running) >= total:
                break
    return max(running.values()) - started


def watch_running(core: client.CoreV1Api, ns: str, total: int, started: float, seen: dict[str, float]) -> Future:
    """wait_running on a thread of its own, started before the first submission: a pod that runs while the rest are
    being submitted is seen when it runs. Incomplete after 600 s, or 0.12 s a pod for more pods (KWOK alone needed
    358 s for 11,100 pods on 10,000 nodes here)."""
    return ThreadPoolExecutor(1).submit(wait_running, core, ns, total, started, seen, max(600.0, 0.12 * total))


def watch_reported(custom: client.CustomObjectsApi, ns: str, total: int, started: float) -> Future:
    """Seconds from `started` until `total` TrainingJobs of the namespace say Running in their status (written
    once their pods all run, or --status-delay after their placement), on a thread of its own."""

    def wait() -> float:
        reported: dict[str, float] = {}
        while len(reported) < total and time.monotonic() - started < 900:
            with contextlib.suppress(client.ApiException):  # e.g. 504 "Too large resource version": watch anew
                for ev in watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, ns,
                                               "trainingjobs", timeout_seconds=60):
                    if (ev["object"].get("status") or {}).get("phase") == "Running":
                        reported.setdefault(ev["object"]["metadata"]["name"], time.monotonic())
                    if len(reported) >= total:
                        break
        return max(reported.values(), default=started) - started

    return ThreadPoolExecutor(1).submit(wait)


def startup_latency(shapes: list[tuple[int, int]], submitted: dict[int, float], running: dict[str, float]) -> str:
    """Per gang size: p50 / p99 of the seconds from a gang's submission (placeable at once: the cluster holds the
    whole workload) until its last pod ran. Pods are named j<job>-..., by every kind of run."""
    last: dict[int, float] = {}
    for name, when in running.items():
        job = int(name.split("-", 1)[0][1:])
        last[job] = max(last.get(job, 0.0), when)
    by_size: dict[int, list[float]] = {}
    for job, when in last.items():
        by_size.setdefault(shapes[job][0], []).append(when - submitted[job])
    return ", ".join(f"{size} pod{'s' if size > 1 else ''}: p50 {_quantile(values, 0.5):.1f}s p99 "
                     f"{_quantile(values, 0.99):.1f}s" for size, values in sorted(by_size.items()))


def start_operator(local: LocalCluster, env: dict, args) -> None:
    local.start_process("operator", [sys.executable, "-m", "superpod.cli", "run", "--metrics-port", str(METRICS),
                                     "--log-level", args.operator_log_level], env)


@contextlib.contextmanager
def stopped_operator(local: LocalCluster, env: dict, args, inside: dict | None = None):
    """No operator inside the block (or, given `inside`, one started with that environment); a new process after
    it, once it has ended its first cycle. (A process paused with SIGSTOP wakes with the cache it had, and acts on
    the objects deleted meanwhile until their events are read: 500 gang writes refused, in the run after.)"""
    stop_operator(local)
    if inside is not None:
        start_operator(local, inside, args)
        wait_started(local)
    try:
        yield
    finally:
        if inside is not None:
            stop_operator(local)
        start_operator(local, env, args)
        wait_started(local)


def wait_started(local: LocalCluster, idle: float = 0.1, limit: float = 30) -> None:
    """Until a new operator process has ended its first cycle and gone quiet (under `idle` CPU seconds a second,
    at most `limit` seconds): what it reads at start-up after the first cycle (kopf's replay of every GPUUsage
    record) must not fall into the next run."""
    first_cycle(f"http://127.0.0.1:{METRICS}/metrics")
    pid, until = local.pid("operator"), time.monotonic() + limit
    used = cpu_seconds(pid)
    while time.monotonic() < until:
        time.sleep(1)
        used, before = cpu_seconds(pid), used
        if used - before < idle:
            return


def run_operator(run: str, local: LocalCluster, env: dict, baseline_env: dict | None, args):
    """The operator a run needs: none for the floor, the --baseline checkout's for the baseline, else the one
    running."""
    if run == "floor":
        return stopped_operator(local, env, args)
    if run == "baseline":
        return stopped_operator(local, env, args, baseline_env)
    return contextlib.nullcontext()


def stop_operator(local: LocalCluster) -> None:
    os.kill(local.pid("operator"), signal.SIGTERM)
    while local.pid("operator"):
        time.sleep(0.2)


def fill_and_restart(local: LocalCluster, api: client.ApiClient, core: client.CoreV1Api, node_names: list[str],
                     count: int, env: dict, args) -> str:
    """`count` pods on the nodes (bound by a bare client, no GPU requested: any count fits), given up to --fill-wait
    seconds to run (KWOK marks about 30 pods/s Running on 10,000 nodes here), then a new operator process: seconds
    until its first cycle ended, and its memory then and after a minute of watching. The operator keeps a bound pod
    whether it runs or not."""
    ns = "bench-fill"
    core.create_namespace({"metadata": {"name": ns}})
    pods = [{"metadata": {"name": f"fill-{i}", "labels": {"app": "fill"}}, "spec": {
        "nodeName": node_names[i % len(node_names)], "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "trainer"}]}} for i in range(count)]
    started = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda p: done(core.create_namespaced_pod(ns, p, _preload_content=False)), pods))
    created = time.monotonic() - started
    with contextlib.suppress(Incomplete):
        wait_running(core, ns, count, started, timeout=created + args.fill_wait)
    filled, running = time.monotonic() - started, count_running(core, ns)
    watched = memory(local.pid("operator"))  # the process that watched every pod come
    stop_operator(local)
    begun = time.monotonic()
    start_operator(local, env, args)
    first_cycle(f"http://127.0.0.1:{METRICS}/metrics")
    first = time.monotonic() - begun
    at_first = memory(local.pid("operator"))
    time.sleep(60)
    return (f"{count} more pods bound (created in {created:.0f}s; {running} Running after {filled:.0f}s); a new "
            f"operator process's first cycle ended {first:.1f}s after it started; {at_first}; a minute later "
            f"{memory(local.pid('operator'))}; the process that watched them come: {watched}")


def count_running(core: client.CoreV1Api, ns: str) -> int:
    """How many pods of the namespace are Running now (a paged list, read as plain JSON)."""
    running, token = 0, None
    while True:
        page = orjson.loads(core.list_namespaced_pod(ns, limit=1000, _continue=token, _preload_content=False,
                                                     field_selector="status.phase=Running").data)
        running += len(page.get("items") or [])
        token = page["metadata"].get("continue")
        if not token:
            return running


def first_cycle(url: str) -> None:
    """Until the operator at `url` has ended its first cycle."""
    while True:
        try:
            if sum(buckets(url, "superpod_plan_seconds").values()):
                return
        except OSError:
            pass
        time.sleep(0.2)


def memory(pid: int | None) -> str:
    """The operator's resident memory now and at its peak (VmRSS, VmHWM)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    mib = {name: int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM")}
    return f"operator RSS {mib['VmRSS']:.0f} MiB (peak {mib['VmHWM']:.0f} MiB)"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def done(response) -> None:
    """An answer read to its end and its connection given back (unread ones held a socket each until collected)."""
    response.read()
    response.release_conn()


def bare_pods(node_names: list[str], shapes: list[tuple[int, int]]) -> list[list[dict]]:
    """Each job's pods with their nodes already assigned (round robin: KWOK books nothing)."""
    out, i = [], 0
    for j, (replicas, gpus) in enumerate(shapes):
        out.append([])
        for r in range(replicas):
            out[-1].append({"metadata": {"name": f"j{j}-{r}", "labels": {"job": f"j{j}"}}, "spec": {
                "nodeName": node_names[i % len(node_names)], "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "trainer",
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}})
            i += 1
    return out


def bare_run(api: client.ApiClient, node_names: list[str], shapes: list[tuple[int, int]], submitted: dict,
             running: dict, ns: str) -> tuple[float, str]:
    """The ceiling: a bare client creating the same pods, their nodes already assigned."""
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    pods = [pod for job in bare_pods(node_names, shapes) for pod in job]
    started = time.monotonic()
    watching = watch_running(core, ns, len(pods), started, running)
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda p: done(core.create_namespaced_pod(ns, p, _preload_content=False)), pods))
    created = time.monotonic() - started
    return watching.result(), f"created in {created:.1f}s"


def podgangs_run(api: client.ApiClient, node_names: list[str], shapes: list[tuple[int, int]], submitted: dict,
                 running: dict, ns: str) -> tuple[float, str]:
    """The bare client's very pods, made by the same client the same way but unbound: each names this scheduler and
    its gang (label, size, the leaf for gangs of two or more), and the operator binds each gang whole
    (pods/binding). What the scheduler costs over a client that needs none."""
    pods = []
    for j, job in enumerate(bare_pods(node_names, shapes)):
        notes = {GANG_SIZE: str(len(job))}
        if len(job) > 1:
            notes[TOPOLOGY["required"]] = "leaf"
        for rank, pod in enumerate(job):
            del pod["spec"]["nodeName"]
            pod["spec"]["schedulerName"] = SCHEDULER_NAME
            pod["metadata"]["labels"].update({GANG_LABEL: f"j{j}", RANK_LABEL: str(rank)})
            pod["metadata"]["annotations"] = notes
            pods.append((j, pod))
    return create_unbound(api, ns, pods, submitted, running)


def kube_scheduler_run(api: client.ApiClient, node_names: list[str], shapes: list[tuple[int, int]],
                       submitted: dict, running: dict, ns: str) -> tuple[float, str]:
    """The bare client's very pods, unbound, left to kube-scheduler (one pod at a time: no gang, no topology): what
    a scheduler that binds costs on this API server. The largest pods are created first: kube-scheduler spreads,
    and small pods spread first over many nodes would leave too few whole nodes for the 8-GPU ones."""
    pods = sorted(((j, pod) for j, job in enumerate(bare_pods(node_names, shapes)) for pod in job),
                  key=lambda item: -shapes[item[0]][1])
    for _, pod in pods:
        del pod["spec"]["nodeName"]
    return create_unbound(api, ns, pods, submitted, running)


def create_unbound(api: client.ApiClient, ns: str, pods: list[tuple[int, dict]], submitted: dict,
                   running: dict) -> tuple[float, str]:
    """Creates the namespace, then the (job, pod) pairs from WORKERS threads: seconds until all run, and how long
    the creates took."""
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    started = time.monotonic()
    watching = watch_running(core, ns, len(pods), started, running)

    def one(item: tuple[int, dict]) -> None:
        submitted.setdefault(item[0], time.monotonic())
        done(core.create_namespaced_pod(ns, item[1], _preload_content=False))

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(one, pods))
    created = time.monotonic() - started
    return watching.result(), f"created in {created:.1f}s"


def floor_run(api: client.ApiClient, node_names: list[str], shapes: list[tuple[int, int]], submitted: dict,
              running: dict, ns: str) -> tuple[float, str]:
    """What the API server must do for a TrainingJob whatever schedules it, done by a bare client with the
    operator stopped: the job created, its headless Service (two replicas or more), its pods with their nodes, one
    status write (Running, with the placement)."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    pods = bare_pods(node_names, shapes)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def one(j: int) -> None:
        submitted[j] = time.monotonic()
        job = training_job(j, shapes[j])
        created = custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", job)
        if len(pods[j]) > 1:
            done(core.create_namespaced_service(ns, {"metadata": {"name": f"j{j}"}, "spec": {
                "clusterIP": "None", "selector": {"job": f"j{j}"}, "ports": [{"port": 29500}]}},
                _preload_content=False))
        for pod in pods[j]:
            done(core.create_namespaced_pod(ns, pod, _preload_content=False))
        placement: dict[str, list[int]] = {}
        for r, pod in enumerate(pods[j]):
            placement.setdefault(pod["spec"]["nodeName"], []).append(r)
        created["status"] = {"phase": "Running", "attempt": 1, "placement": placement, "ready": f"{len(pods[j])}/"
                             f"{len(pods[j])}", "gpus": f"{len(pods[j]) * shapes[j][1]} GPUs", "startTime": now,
                             "conditions": [{"type": "Running", "status": "True", "reason": "Running",
                                             "message": "all replicas running", "lastTransitionTime": now}]}
        done(custom.replace_namespaced_custom_object_status(GROUP, VERSION, ns, "trainingjobs", f"j{j}", created,
                                                             _preload_content=False))

    started = time.monotonic()
    watching = watch_running(core, ns, sum(len(p) for p in pods), started, running)
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(one, range(len(shapes))))
    return watching.result(), "job, Service, pods and one status write each"


DRA = {"on": False}  # --dra: the nodes' GPUs are ResourceSlices and every pod claims its GPUs from a template


def claim_templates(api: client.ApiClient, ns: str, shapes: list[tuple[int, int]]) -> None:
    """A ResourceClaimTemplate per GPU count of the workload (`gpus-<n>`: n devices of class gpu.nvidia.com)."""
    for gpus in sorted({g for _, g in shapes}):
        client.ResourceV1Api(api).create_namespaced_resource_claim_template(ns, {
            "metadata": {"name": f"gpus-{gpus}"}, "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": gpus}}]}}}})


def pod_gpus(gpus: int) -> tuple[dict, dict]:
    """(the pod spec's claims, its container's resources) for `gpus` GPUs: claimed (--dra) or nvidia.com/gpu."""
    if DRA["on"]:
        return ({"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{gpus}"}]},
                {"claims": [{"name": "gpus"}]})
    return {}, {"limits": {"nvidia.com/gpu": str(gpus)}}


def training_job(j: int, shape: tuple[int, int]) -> dict:
    replicas, gpus = shape
    claims, resources = pod_gpus(gpus)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": f"j{j}"},
            "spec": {"replicas": replicas, "resources": {} if claims else {"gpus": gpus},
                     "topology": {"required": "leaf"} if replicas > 1 else {},
                     "template": {"spec": {**claims, "containers": [
                         {"name": "main", "image": "trainer", **({"resources": resources} if claims else {})}]}}}}


def paced(job: int, started: float, rate: float, submitted: dict[int, float], submit) -> None:
    """Submit one job: at once (rate 0), or at its turn when `rate` jobs are submitted per second."""
    if rate:
        time.sleep(max(0.0, started + job / rate - time.monotonic()))
    submitted[job] = time.monotonic()
    submit(job)


def operator_run(api: client.ApiClient, shapes: list[tuple[int, int]], rate: float = 0,
                 submitted: dict | None = None, running: dict | None = None,
                 ns: str = "bench-operator") -> tuple[float, int, float]:
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    if DRA["on"]:
        claim_templates(api, ns, shapes)
    submitted = {} if submitted is None else submitted
    running = {} if running is None else running

    def submit(j: int) -> None:
        done(custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", training_job(j, shapes[j]),
                                                    _preload_content=False))

    total = sum(r for r, _ in shapes)
    started = time.monotonic()
    watching, reported = watch_running(core, ns, total, started, running), watch_reported(custom, ns, len(shapes),
                                                                                           started)
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda j: paced(j, started, rate, submitted, submit), range(len(shapes))))
    elapsed = watching.result()
    return elapsed, len({name.split("-", 1)[0] for name in running}), reported.result()


def trainingjobs_run(api: client.ApiClient, node_names: list[str], shapes: list[tuple[int, int]], submitted: dict,
                     running: dict, ns: str) -> tuple[float, str]:
    elapsed, placed, reported = operator_run(api, shapes, 0, submitted, running, ns)
    return elapsed, f"{placed}/{len(shapes)} placed; every status Running after {reported:.1f}s"


def indexed_run(api: client.ApiClient, node_names: list[str], shapes: list[tuple[int, int]], submitted: dict,
                running: dict, ns: str) -> tuple[float, str]:
    """The same gangs as Indexed Jobs whose pods name this scheduler: the gang label and size on the pod template."""
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    if DRA["on"]:
        claim_templates(api, ns, shapes)

    def submit(j: int) -> None:
        replicas, gpus = shapes[j]
        claims, resources = pod_gpus(gpus)
        notes = {"superpod.dev/gang-size": str(replicas)}
        if replicas > 1:
            notes["superpod.dev/topology-required"] = "leaf"
        batch.create_namespaced_job(ns, {"metadata": {"name": f"j{j}"}, "spec": {
            "completionMode": "Indexed", "completions": replicas, "parallelism": replicas, "template": {
                "metadata": {"labels": {"superpod.dev/gang": f"j{j}"}, "annotations": notes},
                "spec": {"schedulerName": "superpod-scheduler", "restartPolicy": "Never", **claims, "containers": [
                    {"name": "main", "image": "trainer", "resources": resources}]}}}},
            _preload_content=False)

    total = sum(r for r, _ in shapes)
    started = time.monotonic()
    watching = watch_running(core, ns, total, started, running)
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(lambda j: paced(j, started, 0, submitted, submit), range(len(shapes))))
    elapsed = watching.result()
    bound = sum(1 for p in core.list_namespaced_pod(ns).items if p.spec.node_name)
    return elapsed, f"{bound}/{total} pods bound"


RUNS = {"bare": bare_run, "floor": floor_run, "trainingjobs": trainingjobs_run, "baseline": trainingjobs_run,
        "indexed": indexed_run, "podgangs": podgangs_run, "kube-scheduler": kube_scheduler_run}
OPERATED = ("trainingjobs", "baseline", "indexed", "podgangs")  # the operator schedules these: its writes are counted
LABELS = {"bare": f"bare client, {WORKERS} threads, nodes pre-assigned (the ceiling)",
          "floor": "bare client, what a TrainingJob needs (the operator stopped)",
          "trainingjobs": "operator, TrainingJobs",
          "baseline": "operator of --baseline, TrainingJobs",
          "indexed": "operator, Indexed Jobs (pods by kube-controller-manager, bound through pods/binding)",
          "podgangs": "operator, the bare client's pods unbound in gangs (bound through pods/binding)",
          "kube-scheduler": "kube-scheduler, the bare client's pods unbound (no gangs, no topology)"}


def round_ratios(reference: list[float | None], times: list[float | None]) -> list[float]:
    """reference / time, round by round, for the rounds both completed (None: incomplete): on a shared VM the hour
    moves both runs of a round alike, the rounds apart."""
    return [ref / took for ref, took in zip(reference, times, strict=True) if ref is not None and took is not None]


def summary(runs: dict[str, list[float | None]], name: str, pods: int) -> str:
    """A run's median time and pods/s, and its ratio to the bare client's of the same round, round by round and
    their median."""
    times = [elapsed for elapsed in runs[name] if elapsed is not None]
    if not times:
        return "no complete round"
    ratios = round_ratios(runs["bare"], runs[name])
    middle = statistics.median(times)
    each = " / ".join(f"{ratio:.2f}" for ratio in ratios)
    return (f"{middle:.1f}s, {pods / middle:.0f} pods/s; ratio to the ceiling of its round {each}"
            + (f", median {statistics.median(ratios):.2f}" if ratios else ""))


def waiting(api: client.ApiClient, ns: str) -> str:
    """The TrainingJobs of a namespace that are not Running, and why (their status message)."""
    try:
        jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs")["items"]
    except client.ApiException:
        return "no TrainingJobs"
    stuck = [f"{j['metadata']['name']}: {(j.get('status') or {}).get('message')}" for j in jobs
             if (j.get("status") or {}).get("phase") != "Running"]
    return f"{len(stuck)} job(s) not Running" + (f", e.g. {stuck[0]}" if stuck else "")


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
    if DRA["on"]:  # the GPUs are published through DRA only, as with NVIDIA's DRA driver
        for obj in objs:
            obj["status"]["allocatable"].pop("nvidia.com/gpu", None)
            obj["status"]["capacity"].pop("nvidia.com/gpu", None)
    nodes.create_nodes(api, objs, dra=DRA["on"])
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
    ap.add_argument("--paced", type=float, default=0, help="then one more TrainingJob run, jobs submitted at this "
                    "rate per second: gang startup latency under a steady load")
    ap.add_argument("--fill", type=int, default=0, help="then this many pods, bound by a bare client, and "
                    "the operator restarted: its time from start to first cycle and its memory with them")
    ap.add_argument("--fill-wait", type=float, default=600, help="seconds the --fill pods get to run once created")
    ap.add_argument("--operator-log-level", default="INFO", help="DEBUG logs every cycle's timings")
    ap.add_argument("--profile", type=Path, help="folder for py-spy profiles of the operator and pprof profiles of "
                    "the API server (TrainingJob runs)")
    ap.add_argument("--profile-seconds", type=int, default=10, help="length of the API server's profile")
    ap.add_argument("--logs", type=Path, help="copy the cluster's and the operator's logs here before the wipe")
    ap.add_argument("--runs", default="bare,trainingjobs,indexed", help="which runs each round makes (comma-separated; "
                    "the bare client's is the ceiling every ratio is taken to)")
    ap.add_argument("--baseline", type=Path, help="a checkout of other code: the run `baseline` makes the "
                    "TrainingJob run with its operator (e.g. `git worktree add /tmp/base HEAD~1`)")
    ap.add_argument("--dra", action="store_true", help="the GPUs published as ResourceSlices and claimed from "
                    "ResourceClaimTemplates (runs trainingjobs and indexed; bare for the ceiling)")
    args = ap.parse_args()
    DRA["on"] = args.dra
    chosen = [run for run in args.runs.split(",") if run]
    unknown = set(chosen) - set(RUNS)
    if unknown or "bare" not in chosen:
        raise SystemExit(f"--runs: {', '.join(sorted(unknown)) or 'bare is missing'} (of {', '.join(RUNS)}; the "
                         "bare client's run is the ceiling every ratio is taken to)")
    if "baseline" in chosen and args.baseline is None:
        raise SystemExit("--runs baseline needs --baseline DIR")
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
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
        baseline_env = {**env, "PYTHONPATH": str(args.baseline.resolve() / "operator")} if args.baseline else None
        start_operator(local, env, args)
        wait_started(local)
        runs: dict[str, list[float | None]] = {run: [] for run in chosen}  # a round's time, None if incomplete
        node_names = [o["metadata"]["name"] for o in objs]

        def meter(operator: bool) -> CpuMeter:
            return CpuMeter({**{name: local.pid(name) for name in COMPONENTS}, "bench": os.getpid(),
                             **({"operator": local.pid("operator")} if operator else {})})

        for round_ in range(1, args.repeat + 1):  # interleaved, so drift on this machine hits all runs alike
            print(f"round {round_}:")
            writes = []
            for run in chosen if round_ % 2 else chosen[::-1]:  # each in turn first: the hour moves them alike
                # A namespace of its own each run: a namespace made again right after its deletion may refuse pods
                # for a while (403 "being terminated"), and kube-controller-manager backs off for minutes.
                ns = f"bench-{run}-{round_}"
                submitted, running = {}, {}
                with run_operator(run, local, env, baseline_env, args):  # until its namespace is deleted
                    since = time.time()  # the writes are counted from submission until all run (not the teardown)
                    cpu = meter(run != "floor")
                    cycles = Histograms(f"http://127.0.0.1:{METRICS}/metrics", CYCLES) if run in OPERATED else None
                    served_writes = ServerWrites(local.api_url, local.admin_ssl())
                    profile = Profile(local.pid("operator"), str(args.profile / f"operator-{run}-{round_}.txt")) \
                        if args.profile and run != "floor" else contextlib.nullcontext()
                    served = GoProfile(local.api_url, local.admin_ssl(), str(args.profile / f"apiserver-{run}-"
                                       f"{round_}.pb.gz"), args.profile_seconds) if args.profile \
                        else contextlib.nullcontext()
                    with profile, served:
                        try:
                            elapsed, outcome = RUNS[run](api, node_names, shapes, submitted, running, ns)
                        except Incomplete as e:
                            elapsed, outcome = None, f"{e}; left out of the medians; {waiting(api, ns)}"
                        until, used = time.time(), cpu.report(elapsed or time.monotonic() - cpu.started)
                        everyone = served_writes.report(len(shapes))
                    runs[run].append(elapsed)
                    print(f"  {LABELS[run]}: {'incomplete' if elapsed is None else f'{elapsed:.1f}s'} ({outcome}); "
                          f"{used}")
                    print(f"    the API server's writes, every client's: {everyone}")
                    if run in OPERATED:
                        print(f"    operator cycles: {cycles.report()}; {memory(local.pid('operator'))}")
                        print(f"    gang startup, submitted to all pods running: "
                              f"{startup_latency(shapes, submitted, running)}")
                        writes.append(f"{LABELS[run]} {writes_per_job(local, since, until, len(shapes))}")
                    if args.profile:
                        if run != "floor":
                            print(profile.hottest())
                        print(served.hottest())
                    # Gone before the next operator goes on: it would see jobs it did not place.
                    core.delete_namespace(ns)
                    wait_no_pods(core, (ns,))
            if writes:
                print(f"  the operator's writes per job (audit log): {'; '.join(writes)}")
        print(f"medians of {args.repeat} round(s), time until all {pods} pods Running (the operator running in all):")
        for name in chosen:
            print(f"  {LABELS[name]}: {summary(runs, name, pods)}")
        if args.fill:
            print(fill_and_restart(local, api, core, [o["metadata"]["name"] for o in objs], args.fill, env, args))
        if args.paced:
            submitted, running = {}, {}
            cycles = Histograms(f"http://127.0.0.1:{METRICS}/metrics", CYCLES)
            elapsed, running_jobs, _ = operator_run(api, shapes, args.paced, submitted, running)
            print(f"TrainingJobs submitted at {args.paced:g} jobs/s: all {pods} pods running after {elapsed:.1f}s "
                  f"({running_jobs}/{len(shapes)} placed); operator cycles: {cycles.report()}")
            print(f"  gang startup, submitted to all pods running: {startup_latency(shapes, submitted, running)}")
    finally:
        if args.logs:
            shutil.copytree(local.logs, args.logs, dirs_exist_ok=True)
        local.wipe()


if __name__ == "__main__":
    main()
