"""The operator on kind, for real: pods it binds are admitted by real kubelets, the chart runs it from its own image
under its ServiceAccount, and a real PyTorch program rendezvouses through the environment it renders."""

from __future__ import annotations

import json
import re
import time

from kubernetes import client

from superpod.api.manifests import ATTEMPT_LABEL, INDEX_LABEL, JOB_LABEL
from superpod.api.podgang import GANG_LABEL, GANG_SIZE
from tests.e2e.conftest import DRA_DRIVER, OPERATOR_NAMESPACE, RELEASE, report
from tests.e2e.test_kind_dra import PRINT_DEVICES
from tests.integration.operator_env import GROUP, VERSION
from tests.integration.wait import wait_for


def job(name: str, replicas: int, gpus: int, image: str, command: list[str] | None = None, cpu: str = "100m") -> dict:
    container = {"name": "main", "image": image, "imagePullPolicy": "Never",
                 "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}
    if command:
        container["command"] = command
    return training_job(name, replicas, gpus, {"containers": [container], "terminationGracePeriodSeconds": 2})


def training_job(name: str, replicas: int, gpus: int, pod_spec: dict) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"replicas": replicas, "resources": {"gpus": gpus}, "template": {"spec": pod_spec}}}


SLEEP = ["sleep", "3600"]


def leader(kind) -> str:
    lease = client.CoordinationV1Api(kind.api).read_namespaced_lease("superpod-scheduler", OPERATOR_NAMESPACE)
    return lease.spec.holder_identity


def test_a_real_pytorch_gang_rendezvouses_and_all_reduces(kind, torch, jobs):
    started = time.monotonic()
    jobs.create(training_job("allreduce", 2, 1, torch.pod_spec(["python", f"{torch.programs}/allreduce.py"],
                                                            kind.operator_image)))
    status = jobs.wait_phase("allreduce", "Succeeded", timeout=300)
    report(f"torch all_reduce job Succeeded in {time.monotonic() - started:.1f}s on {status.get('placement')}")
    logs = report_logs(kind, jobs, "allreduce")
    assert len(logs) == 2
    assert all("all_reduce sum = 3 (expected 3)" in text for text in logs.values()), logs


# TORCH_DISABLE_SHARE_RDZV_TCP_STORE: with the rendezvous store shared (torchrun's default), an agent that joins a
# later round (the replacement) never learns the workers' store address.
ELASTIC = ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 exec python -m torch.distributed.run --nnodes=3 --nproc-per-node=1 "
           "--max-restarts=3 --rdzv-backend=c10d "
           '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv-id="$MASTER_ADDR" '
           '--rdzv-conf="is_host=$([ "$RANK" = 0 ] && echo true || echo false),join_timeout=600" PROGRAM')


def test_an_elastic_pytorch_job_keeps_training_when_a_worker_stops(kind, torch, jobs):
    """Three torchrun agents; the kind worker of one that does not host the rendezvous is paused (a hung server:
    no kubelet, no TCP close). Its replica is made again on another worker under the same name, the agents form the
    group again and the job resumes its steps and succeeds; the other replicas' pods are never touched."""
    command = ["sh", "-c", ELASTIC.replace("PROGRAM", f"{torch.programs}/elastic.py")]
    body = training_job("elastic", 3, 3, torch.pod_spec(command, kind.operator_image))
    body["spec"]["nodeFailure"] = "Replace"
    jobs.create(body)
    jobs.wait_phase("elastic", "Running", timeout=120)
    wait_for(lambda: all("step 2 " in logs_of(kind, jobs, pod) for pod in jobs.pods("elastic")), 180,
             "every replica past step 2")
    pods = {int(pod.metadata.labels[INDEX_LABEL]): pod for pod in jobs.pods("elastic")}
    host = pods[0].spec.node_name
    victim = next(pod.spec.node_name for pod in pods.values() if pod.spec.node_name != host)
    lost = {index for index, pod in pods.items() if pod.spec.node_name == victim}
    kept = {pod.metadata.uid for pod in pods.values() if pod.spec.node_name != victim}
    kind.run("docker", "pause", victim)
    paused = time.monotonic()
    try:
        report(f"elastic: placed {jobs.status('elastic').get('placement')}; {victim} paused (replicas {sorted(lost)})")
        wait_for(lambda: replaced_running(jobs, lost, victim), 300, "the lost replicas running on another worker")
        report(f"elastic: replicas {sorted(lost)} running again {time.monotonic() - paused:.0f}s after the pause")
        status = jobs.wait_phase("elastic", "Succeeded", timeout=300)
        report(f"elastic: Succeeded {time.monotonic() - paused:.0f}s after the pause, {status.get('replaced')}")
    finally:
        kind.run("docker", "unpause", victim)
        kind.kubectl("wait", f"node/{victim}", "--for=condition=Ready", "--timeout=180s")
    logs = report_logs(kind, jobs, "elastic")
    assert status.get("replacements") == len(lost) and status.get("restarts", 0) == 0, status
    assert {pod.metadata.uid for pod in jobs.pods("elastic", live=False)} >= kept  # the survivors were not touched
    for index in lost:
        text = logs[pod_name_of(jobs, "elastic", index)]
        assert "step 39 all_reduce sum = 6 world 3" in text and "resuming at step 0" not in text, text
    survivors = [text for name, text in logs.items() if name not in {pod_name_of(jobs, "elastic", i) for i in lost}]
    assert all("restart 1" in text and "step 39 all_reduce sum = 6 world 3" in text for text in survivors), survivors


def replaced_running(jobs, lost: set[int], victim: str) -> bool:
    pods = {int(pod.metadata.labels[INDEX_LABEL]): pod for pod in jobs.pods("elastic")}
    return all(index in pods and pods[index].spec.node_name not in (None, victim)
               and pods[index].status.phase == "Running" for index in lost)


def pod_name_of(jobs, name: str, index: int) -> str:
    return next(pod.metadata.name for pod in jobs.pods(name, live=False)
                if int(pod.metadata.labels[INDEX_LABEL]) == index)


def logs_of(kind, jobs, pod) -> str:
    return kind.kubectl("logs", "-n", jobs.ns, pod.metadata.name, check=False).stdout


def report_logs(kind, jobs, name: str) -> dict[str, str]:
    """Each pod's log by pod name, its lines reported but for tracebacks' bodies and the steps in between."""
    logs = {}
    for pod in sorted(jobs.pods(name, live=False), key=lambda pod: pod.metadata.name):
        logs[pod.metadata.name] = text = logs_of(kind, jobs, pod)
        for line in text.splitlines():
            if not re.match(r"(\[rank\d+\]:  |frame #|.* step [1-9]\d?\d? all_reduce)", line):
                report(f"{pod.metadata.name}: {line}")
    return logs


def test_a_template_no_worker_can_admit_is_never_bound(kind, jobs):
    jobs.create(job("too-much-cpu", 1, 1, kind.operator_image, cpu="1000", command=SLEEP))
    message = jobs.wait_message("too-much-cpu", "cpu", 60)
    report(f"too-much-cpu waits: {message}")
    time.sleep(5)
    assert jobs.pods("too-much-cpu", live=False) == []


def test_the_operator_pod_deleted_mid_gang_the_new_leader_converges(kind, jobs):
    old, replicas = leader(kind), 16
    jobs.create(job("survivor", replicas, 1, kind.operator_image, command=SLEEP))
    # Killed (no grace) as soon as the first pod of the gang is written: the rest may or may not be.
    wait_for(lambda: jobs.pods("survivor", live=False), 60, "the first pod of the gang", interval=0.02)
    kind.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, old, "--grace-period=0", "--force", "--wait=false")
    created_when_killed = len(jobs.pods("survivor", live=False))
    report(f"leader {old} killed with {created_when_killed} of {replicas} pods created")
    jobs.wait_phase("survivor", "Running", timeout=180)
    new = wait_for(lambda: (holder := leader(kind)) != old and holder, 120, "a new leader")
    pods = jobs.pods("survivor", live=False)
    assert len(pods) == replicas, [pod.metadata.name for pod in pods]
    assert len({pod.metadata.labels[ATTEMPT_LABEL] for pod in pods}) == 1  # no second attempt
    wait_for(lambda: all(pod.status.phase == "Running" for pod in jobs.pods("survivor")), 120, "running pods")
    report(f"new leader {new}; survivor Running with {replicas} pods of one attempt")


def test_describe_and_metrics_from_inside_the_cluster(kind, jobs, namespace):
    described = kind.kubectl("describe", "trainingjob", "-n", namespace, "survivor").stdout
    assert "Running" in described and "Placed" in described, described
    fetch = ("import urllib.request as r\n"
             "import time\n"
             "for _ in range(20):\n"  # the Service balances over both replicas: until the leader answers
             f"    t = r.urlopen('http://{RELEASE}-metrics.{OPERATOR_NAMESPACE}:8080/metrics').read().decode()\n"
             "    if 'superpod_leader 1.0' in t: print(t); break\n"
             "    time.sleep(0.5)\n")
    kind.kubectl("run", "metrics", "-n", namespace, "--image", kind.operator_image, "--image-pull-policy=Never",
                 "--restart=Never", "--command", "--", "python", "-c", fetch)
    wait_for(lambda: kind.kubectl("get", "pod", "-n", namespace, "metrics", "-o", "jsonpath={.status.phase}").stdout
             in ("Succeeded", "Failed"), 120, "the metrics pod to finish")
    metrics = kind.kubectl("logs", "-n", namespace, "metrics").stdout
    running = [line for line in metrics.splitlines() if line.startswith('superpod_jobs{phase="Running"}')]
    report(f"metrics from inside the cluster: {running} {len(metrics.splitlines())} lines")
    assert running and float(running[0].split()[-1]) >= 1, metrics[:2000]


def test_pods_whose_claims_the_operator_allocated_start_under_the_real_dra_driver(kind, dra_example_driver, jobs,
                                                                                   namespace):
    """A pod gang (an Indexed Job) whose claims the operator allocates and reserves before it binds, and a
    TrainingJob whose claims kube-scheduler allocates on the nodes the operator chose: the example driver's kubelet
    plugin prepares each claim, and each container sees exactly the devices of its claim's allocation."""
    resource, batch = client.ResourceV1Api(kind.api), client.BatchV1Api(kind.api)
    resource.create_namespaced_resource_claim_template(namespace, {"metadata": {"name": "two-gpus"}, "spec": {"spec": {
        "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRA_DRIVER, "count": 2}}]}}}})
    container = {"name": "main", "image": kind.operator_image, "imagePullPolicy": "Never",
                 "command": ["sh", "-c", PRINT_DEVICES], "resources": {
                     "requests": {"cpu": "10m", "memory": "16Mi"}, "claims": [{"name": "gpus"}]}}
    claims = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    started = time.monotonic()
    batch.create_namespaced_job(namespace, {"metadata": {"name": "gang"}, "spec": {
        "completionMode": "Indexed", "completions": 2, "parallelism": 2, "backoffLimit": 0, "template": {
            "metadata": {"labels": {GANG_LABEL: "gang"}, "annotations": {GANG_SIZE: "2"}},
            "spec": {"schedulerName": "superpod-scheduler", "restartPolicy": "Never", "resourceClaims": claims,
                     "terminationGracePeriodSeconds": 1, "containers": [container]}}}})
    body = training_job("claims", 2, 0, {"resourceClaims": claims, "containers": [container],
                                          "terminationGracePeriodSeconds": 1})
    body["spec"]["resources"] = {}
    jobs.create(body)
    core = client.CoreV1Api(kind.api)

    def running(selector: str) -> list:
        pods = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                if p.status.phase == "Running"]
        return pods if len(pods) == 2 else []
    for selector in ("job-name=gang", f"{JOB_LABEL}=claims"):
        pods = wait_for(lambda s=selector: running(s), 120, f"2 pods of {selector} Running")
        report(f"{selector}: 2 pods with 2 gpu.example.com devices each Running {time.monotonic() - started:.1f}s "
               "after creation")
        for pod in pods:
            claim = resource.read_namespaced_resource_claim(pod.status.resource_claim_statuses[0].resource_claim_name,
                                                            namespace)
            devices = sorted(r.device for r in claim.status.allocation.devices.results)
            assert {r.pool for r in claim.status.allocation.devices.results} == {pod.spec.node_name}
            assert [ref.uid for ref in claim.status.reserved_for] == [pod.metadata.uid]
            logs = wait_for(lambda p=pod: core.read_namespaced_pod_log(p.metadata.name, namespace), 30, "env")
            seen = sorted(value for name, value in (line.split("=", 1) for line in logs.splitlines())
                          if re.fullmatch(r"GPU_DEVICE_\d+", name))
            report(f"  {pod.metadata.name} on {pod.spec.node_name}: allocated {devices}, the container sees {seen}")
            assert seen == devices


def test_helm_upgrade_keeps_the_gang_and_uninstall_removes_the_operator(kind, jobs):
    def running_uids() -> set[str]:
        return {pod.metadata.uid for pod in jobs.pods("survivor") if pod.status.phase == "Running"}

    before = running_uids()
    assert len(before) == 16
    kind.helm("upgrade", RELEASE, "charts/superpod-scheduler", "--reuse-values", "--set", "logLevel=DEBUG",
              "--wait", "--timeout", "3m")
    jobs.create(job("after-upgrade", 1, 1, kind.operator_image, command=SLEEP))
    jobs.wait_phase("after-upgrade", "Running", timeout=120)
    assert running_uids() == before  # the upgraded operator adopted the gang, it did not restart it
    kind.helm("uninstall", RELEASE, "--wait", "--timeout", "2m")
    remaining = json.loads(kind.kubectl("get", "deploy,pods", "-n", OPERATOR_NAMESPACE, "-o", "json").stdout)
    assert all(item["metadata"].get("deletionTimestamp") for item in remaining["items"]), remaining["items"]
    assert running_uids() == before  # the jobs' pods outlive the operator


def test_every_pod_the_operator_bound_was_admitted_by_its_kubelet(kind, namespace):
    core = client.CoreV1Api(kind.api)
    rejections = ("OutOf", "UnexpectedAdmissionError", "NodeAffinity")
    pods = [pod for pod in core.list_namespaced_pod(namespace).items if pod.metadata.labels.get(JOB_LABEL)]
    rejected = [(pod.metadata.name, pod.status.reason) for pod in pods
                if (pod.status.reason or "").startswith(rejections)]
    events = [(event.involved_object.name, event.reason) for event in core.list_namespaced_event(namespace).items
              if (event.reason or "").startswith(rejections)]
    unstarted = [(pod.metadata.name, pod.status.phase) for pod in pods
                 if pod.status.phase not in ("Running", "Succeeded")]
    report(f"kubelet admission: {len(pods)} pods bound by the operator, {len(rejected)} rejected, "
           f"{len(events)} rejection events, {len(unstarted)} neither Running nor Succeeded")
    assert pods and not rejected and not events and not unstarted, (rejected, events, unstarted)
