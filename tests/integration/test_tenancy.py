"""Hostile tenants on the real control plane. Two tenants, team-a and team-b: each a namespace, a GPUQueue
(guarantee 8 GPUs, limit 16) and a ServiceAccount that holds the built-in `edit` role in its own namespace only, the
chart's tenant roles aggregated into it; 32 simulated GPUs of this module's own. Every attack is made with the
attacking tenant's own token (TokenRequest API), so RBAC decides as it would for a real user.

The API must refuse what a tenant may not write: a placed job's admission (CEL), the status of its pods and jobs,
usage records, queues, the other tenant's namespace, a bound pod's runtime limit and what its gang was bound with;
and, from an admin, a budget period of 0. The operator must withstand what a tenant may write: the annotations and
labels of its own pods. After every attack the other
tenant's guarantee holds (its job runs at once), the fleet schedules, and no queue is over its limit."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from superpod.api.times import rfc3339
from superpod.hardware.presets import SIM_LABEL
from tests.integration.operator_env import (
    GROUP,
    REPO,
    VERSION,
    Jobs,
    once_allowed,
    service_account_client,
    sim_cluster,
    training_job,
)
from tests.integration.wait import wait_for

CHART = str(REPO / "charts" / "superpod-scheduler")
GUARANTEED, LIMIT = 8, 16  # GPUs, each tenant's queue
SCHEDULER = "superpod-scheduler"
# Written literally: these are what a tenant would write, whatever the operator's code calls them.
FORGED_NOMINATION = "superpod.dev/nomination"  # the pod annotation a preempting pod gang once held its nodes by
NOMINATED = "superpod.dev/Nominated"  # the pod condition that holds them now, written through pods/status
QUEUE_LABEL = "superpod.dev/queue"
MAX_RUNTIME = "superpod.dev/max-runtime-seconds"
BOUND_WITH = "superpod.dev/bound-with"  # what a pod gang was bound with: its binding writes it


@dataclass
class Tenant:
    name: str
    namespace: str  # its queue has the same name
    api: client.ApiClient  # authenticated by the tenant's own token

    @property
    def jobs(self) -> Jobs:
        return Jobs(self.api, self.namespace)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def pod(self, name: str) -> client.V1Pod:
        return self.core.read_namespaced_pod(name, self.namespace)

    def said(self, name: str) -> str:
        """Why the operator says the pod waits (its PodScheduled condition), or ""."""
        cond = next((c for c in self.pod(name).status.conditions or [] if c.type == "PodScheduled"), None)
        return f"{cond.reason}: {cond.message}" if cond and cond.status == "False" else ""


@dataclass
class Fleet:
    sim: str
    admin: client.ApiClient
    a: Tenant
    b: Tenant
    allowed_class: str  # the one PriorityClass the chart allows tenants' pods (tenantPolicy.priorityClasses)


def gpu_queue(namespace: str, **spec) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUQueue", "metadata": {"name": namespace},
            "spec": {"namespaces": [namespace], "resources": [
                {"flavor": "*", "guaranteed": GUARANTEED, "limit": LIMIT}], **spec}}


def gang_pod(name: str, sim: str, gpus: int, annotations: dict | None = None) -> dict:
    """A pod for this scheduler, as any controller (or a tenant by hand) makes one: a gang of one."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"schedulerName": SCHEDULER, "restartPolicy": "Never", "nodeSelector": {SIM_LABEL: sim},
                     "containers": [{"name": "main", "image": "trainer",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def refused(call, status: int) -> str:
    """The API's words refusing `call`, which must be refused with `status`."""
    with pytest.raises(ApiException) as e:
        call()
    assert e.value.status == status, e.value.body
    return json.loads(e.value.body)["message"]


def gpus_bound(admin: client.ApiClient, namespace: str) -> int:
    """GPUs the namespace's live pods hold on nodes."""
    pods = client.CoreV1Api(admin).list_namespaced_pod(namespace).items
    return sum(int((c.resources.limits or {}).get("nvidia.com/gpu", 0)) for p in pods
               if p.spec.node_name and not p.metadata.deletion_timestamp
               and p.status.phase not in ("Succeeded", "Failed") for c in p.spec.containers)


def assert_the_fleet_holds(fleet: Fleet, attack: str) -> None:
    """team-b's guarantee (an 8-GPU job runs at once), so the fleet schedules; no tenant is over its limit."""
    name = f"guaranteed-{attack}"
    fleet.b.jobs.create(training_job(name, fleet.sim, 1, gpus=GUARANTEED))
    status: dict = {}

    def running() -> bool:
        status.update(fleet.b.jobs.status(name))
        return status.get("phase") == "Running"
    try:
        wait_for(running, 30, f"{fleet.b.name}'s job {name} Running, inside its guarantee")
    except AssertionError as e:
        raise AssertionError(f"{e}; it says: {status.get('phase')}: {status.get('message')}") from None
    for tenant in (fleet.a, fleet.b):
        assert gpus_bound(fleet.admin, tenant.namespace) <= LIMIT, f"{tenant.name} over its limit of {LIMIT} GPUs"


@pytest.fixture(scope="module")
def fleet(cluster, operator, built_tools):
    run = uuid.uuid4().hex[:6]
    allowed_class = f"tenants-{run}"
    roles = cluster.helm("template", f"tenancy-{run}", CHART, "--kube-version", "1.37.2",
                         "--set", f"tenantPolicy.priorityClasses={{{allowed_class}}}",
                         "--show-only", "templates/tenant-rbac.yaml", "--show-only",
                         "templates/tenant-pod-policy.yaml").stdout
    # the chart's aggregated roles and its tenant pod policy, as `helm install` leaves them (the operator here runs
    # as the cluster's admin, which the policy exempts as it does the operator's ServiceAccount)
    cluster.kubectl("apply", "-f", "-", input=roles)
    core, rbac, custom = (client.CoreV1Api(cluster.api), client.RbacAuthorizationV1Api(cluster.api),
                          client.CustomObjectsApi(cluster.api))
    namespaces = [f"team-a-{run}", f"team-b-{run}"]
    try:
        sim, _ = sim_cluster(cluster.api, "dgx-h100", 4, nodes_per_unit=4)  # 32 GPUs
        tenants = []
        for namespace in namespaces:
            core.create_namespace({"metadata": {"name": namespace}})
            custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", gpu_queue(namespace))
            core.create_namespaced_service_account(namespace, {"metadata": {"name": "tenant"}})
            rbac.create_namespaced_role_binding(namespace, {
                "metadata": {"name": "tenant-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}]})
            wait_for(lambda ns=namespace: any(s.metadata.name == "default" for s in
                                              core.list_namespaced_service_account(ns).items),
                     30, f"{namespace}'s default ServiceAccount (its pods run as it)")
            _, api = service_account_client(cluster.api, namespace, "tenant")
            tenants.append(Tenant(namespace.rsplit("-", 1)[0], namespace, api))
        for tenant in tenants:  # through `edit` alone, once the chart's roles are aggregated into it
            wait_for(lambda t=tenant: once_allowed(lambda: t.custom.list_namespaced_custom_object(
                GROUP, VERSION, t.namespace, "trainingjobs")) is not None, 30, f"{tenant.name} may list its jobs")
        yield Fleet(sim, cluster.api, *tenants, allowed_class)
    finally:
        for namespace in namespaces:
            for call in (lambda n=namespace: custom.delete_cluster_custom_object(GROUP, VERSION, "gpuqueues", n),
                         lambda n=namespace: core.delete_namespace(n)):
                try:
                    call()
                except ApiException as e:
                    if e.status != 404:
                        raise
        cluster.kubectl("delete", "-f", "-", input=roles, check=False)


@pytest.fixture(autouse=True)
def cleared(fleet):
    """Each attack starts on an empty fleet: the last one's jobs and pods are gone."""
    yield
    custom, core = client.CustomObjectsApi(fleet.admin), client.CoreV1Api(fleet.admin)
    for tenant in (fleet.a, fleet.b):
        custom.delete_collection_namespaced_custom_object(GROUP, VERSION, tenant.namespace, "trainingjobs")
        core.delete_collection_namespaced_pod(tenant.namespace, grace_period_seconds=0)
    wait_for(lambda: not any(core.list_namespaced_pod(t.namespace).items or custom.list_namespaced_custom_object(
        GROUP, VERSION, t.namespace, "trainingjobs")["items"] for t in (fleet.a, fleet.b)), 60, "the fleet empty")


def test_a_running_jobs_admission_cannot_be_edited_by_its_tenant(fleet):
    """H5/H6: moving a running job to a queue that does not exist (out of its limit), to `reserved` or a month's
    minRuntimeSeconds (borrowed GPUs made unreclaimable), to a higher priority (what it may preempt)."""
    fleet.a.jobs.create(training_job("steady", fleet.sim, 1, gpus=8))
    fleet.a.jobs.wait_phase("steady", "Running", 30)
    attacks = {"queue": "nowhere", "serviceClass": "reserved", "priority": 1_000_000_000,
               "minRuntimeSeconds": 30 * 86_400}
    for field, value in attacks.items():
        said = refused(lambda f=field, v=value: fleet.a.jobs.patch("steady", {"spec": {f: v}}), 422)
        assert f"spec.{field} cannot change while the job is Starting or Running" in said, said
    fleet.a.jobs.patch("steady", {"spec": {"maxRestarts": 5}})  # what does not decide admission still may change
    spec = Jobs(fleet.admin, fleet.a.namespace).get("steady")["spec"]
    assert (spec.get("queue"), spec["serviceClass"], spec["priority"], spec.get("minRuntimeSeconds")) == (
        None, "spot", 0, None)
    assert_the_fleet_holds(fleet, "admission")


def test_a_tenant_cannot_write_what_the_operator_or_an_admin_owns_nor_the_other_tenants_namespace(fleet):
    a, b = fleet.a, fleet.b
    a.jobs.create(training_job("mine", fleet.sim, 1, gpus=8))
    a.jobs.wait_phase("mine", "Running", 30)
    [pod] = a.jobs.pods("mine")
    every_node = sorted(n.metadata.name for n in client.CoreV1Api(fleet.admin).list_node().items)
    forged_condition = {"type": NOMINATED, "status": "True", "reason": "Preempting",
                        "message": json.dumps({"nodes": every_node, "victims": []})}
    usage = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GPUUsage", "metadata": {"name": f"{a.namespace}-forged"},
             "spec": {"queue": a.namespace, "namespace": a.namespace, "job": "mine", "jobUid": "forged", "attempt": 1,
                      "flavor": "*", "serviceClass": "spot", "gpus": 8, "start": "2026-12-01T00:00:00Z",
                      "end": "2026-12-01T00:00:01Z", "gpuSeconds": 0}}
    billed = dict(usage, metadata={"name": f"{a.namespace}-billed"})
    client.CustomObjectsApi(fleet.admin).create_cluster_custom_object(GROUP, VERSION, "gpuusages", billed)
    assert_the_fleet_holds(fleet, "rbac")  # team-b's job, running, is also a target below
    try:
        attacks = {
            'cannot patch resource "pods/status"': lambda: a.core.patch_namespaced_pod_status(
                pod.metadata.name, a.namespace, {"status": {"conditions": [forged_condition]}}),
            'cannot patch resource "trainingjobs/status"': lambda: a.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, a.namespace, "trainingjobs", "mine", {"status": {"phase": "Succeeded"}}),
            'cannot create resource "gpuusages"': lambda: a.custom.create_cluster_custom_object(
                GROUP, VERSION, "gpuusages", usage),
            'cannot patch resource "gpuusages"': lambda: a.custom.patch_cluster_custom_object(
                GROUP, VERSION, "gpuusages", billed["metadata"]["name"], {"spec": {"gpuSeconds": 0}}),
            'cannot delete resource "gpuusages"': lambda: a.custom.delete_cluster_custom_object(
                GROUP, VERSION, "gpuusages", billed["metadata"]["name"]),
            'cannot create resource "gpuqueues"': lambda: a.custom.create_cluster_custom_object(
                GROUP, VERSION, "gpuqueues", gpu_queue(f"{a.namespace}-more")),
            'cannot patch resource "gpuqueues"': lambda: a.custom.patch_cluster_custom_object(
                GROUP, VERSION, "gpuqueues", a.namespace, {"spec": {"resources": [
                    {"flavor": "*", "guaranteed": 32, "limit": 32}]}}),
            f'cannot create resource "trainingjobs" in API group "{GROUP}" in the namespace "{b.namespace}"':
                lambda: Jobs(a.api, b.namespace).create(training_job("intruder", fleet.sim, 1, gpus=8)),
            f'cannot delete resource "trainingjobs" in API group "{GROUP}" in the namespace "{b.namespace}"':
                lambda: a.custom.delete_namespaced_custom_object(GROUP, VERSION, b.namespace, "trainingjobs",
                                                                 "guaranteed-rbac"),
            f'cannot create resource "pods" in API group "" in the namespace "{b.namespace}"':
                lambda: a.core.create_namespaced_pod(b.namespace, gang_pod("intruder", fleet.sim, 8)),
        }
        for words, attack in attacks.items():
            said = refused(attack, 403)
            assert words in said and f'"system:serviceaccount:{a.namespace}:tenant"' in said, said
    finally:
        client.CustomObjectsApi(fleet.admin).delete_cluster_custom_object(
            GROUP, VERSION, "gpuusages", billed["metadata"]["name"])
    assert not [c for c in a.pod(pod.metadata.name).status.conditions or [] if c.type == NOMINATED]
    # nor through a pod's create: the API server drops the status a pod is created with
    forger = gang_pod("forger", "no-such-cluster", 8)  # matches no node: it waits, and holds nothing
    forger["status"] = {"conditions": [forged_condition]}
    a.core.create_namespaced_pod(a.namespace, forger)
    assert not [c for c in a.pod("forger").status.conditions or [] if c.type == NOMINATED]
    assert a.jobs.phase("mine") == "Running" and b.jobs.phase("guaranteed-rbac") == "Running"
    assert_the_fleet_holds(fleet, "rbac-after")


def test_a_budget_period_of_zero_is_refused_by_the_schema(fleet):
    """H7: `period: 0h` matched the duration pattern, then divided by zero in the operator and dropped every queue's
    limit. An admin's mistake, but one queue's mistake must not open every other."""
    custom = client.CustomObjectsApi(fleet.admin)
    zero = gpu_queue(f"{fleet.a.namespace}-zero", budget={"gpuHours": 10, "period": "0h"})
    zero["spec"]["namespaces"] = []
    said = refused(lambda: custom.create_cluster_custom_object(GROUP, VERSION, "gpuqueues", zero), 422)
    assert "budget.period must be longer than 0" in said, said
    said = refused(lambda: custom.patch_cluster_custom_object(GROUP, VERSION, "gpuqueues", fleet.a.namespace, {
        "spec": {"budget": {"gpuHours": 10, "period": "0m0s"}}}), 422)
    assert "budget.period must be longer than 0" in said, said
    assert_the_fleet_holds(fleet, "period")


def test_a_forged_nomination_annotation_holds_no_node(fleet):
    """H1: a pod that can never fit (16 GPUs on 8-GPU nodes) names every node of the cluster in the annotation a
    preempting pod gang once held its nodes by, and no victims. It must hold nothing: team-b's job is placed."""
    every_node = sorted(n.metadata.name for n in client.CoreV1Api(fleet.admin).list_node().items)
    forged = {"nodes": every_node, "victims": [], "attempts": {}, "time": rfc3339(time.time())}
    fleet.a.core.create_namespaced_pod(fleet.a.namespace, gang_pod(
        "squatter", fleet.sim, 16, annotations={FORGED_NOMINATION: json.dumps(forged)}))
    # the dangerous moment: the operator has decided the squatter, annotation and all, and says why it waits
    said = wait_for(lambda: fleet.a.said("squatter"), 30, "the operator's word on the squatter")
    print(f"\nsquatter: {said}")
    assert_the_fleet_holds(fleet, "nomination")
    assert not fleet.a.pod("squatter").spec.node_name


def test_a_tenant_can_neither_place_gpus_itself_nor_pass_a_pod_off_as_a_replica(fleet):
    """A pod that skips the scheduler (spec.nodeName, another scheduler) holds GPUs no queue admitted; a pod that
    carries a TrainingJob's owner reference or its replica labels is counted and billed as that job's replica. The
    chart's admission policy refuses both, through the tenant's own credentials; what is not ours still passes."""
    a = fleet.a
    a.jobs.create(training_job("mine", fleet.sim, 1, gpus=8))
    a.jobs.wait_phase("mine", "Running", 30)
    [replica] = a.jobs.pods("mine")
    node = replica.spec.node_name
    job = Jobs(fleet.admin, a.namespace).get("mine")["metadata"]
    owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "name": "mine", "uid": job["uid"],
             "controller": True}

    def pod(name: str, gpus: int = 8, labels: dict | None = None, owners: list | None = None, **spec) -> dict:
        body = gang_pod(name, fleet.sim, gpus)
        body["metadata"].update(labels=labels or {}, ownerReferences=owners or [])
        body["spec"].update(spec)
        if not gpus:
            body["spec"]["containers"][0]["resources"] = {}
        return body

    replica_labels = dict(replica.metadata.labels)
    attacks = {
        "may not set spec.nodeName": pod("pinned", nodeName=node),
        f"must name spec.schedulerName: {SCHEDULER}": pod("elsewhere", schedulerName="default-scheduler"),
        "may not be given a TrainingJob owner reference": pod("impostor", owners=[owner]),
        "mark a TrainingJob's pods": pod("lookalike", labels=replica_labels),
    }
    for words, body in attacks.items():
        said = refused(lambda b=body: a.core.create_namespaced_pod(a.namespace, b), 422)
        assert words in said, said
    relabels = {"superpod.dev/attempt": "7", "superpod.dev/job-name": "someone-else"}
    for label, value in relabels.items():  # the operator's replica, moved out of its attempt or job
        said = refused(lambda k=label, v=value: a.core.patch_namespaced_pod(
            replica.metadata.name, a.namespace, {"metadata": {"labels": {k: v}}}), 422)
        assert "mark a TrainingJob's pods" in said, said
    for owners in ([owner, {**owner, "name": "other", "uid": str(uuid.uuid4()), "controller": False}],
                   [{**owner, "controller": False}], [{**owner, "apiVersion": "elsewhere.example/v1"}]):
        said = refused(lambda o=owners: a.core.patch_namespaced_pod(replica.metadata.name, a.namespace, {
            "metadata": {"ownerReferences": o}}), 422)
        assert "may not be given a TrainingJob owner reference, nor have one changed" in said, said
    # through a controller the tenant drives: the DaemonSet controller may bind pods, and is not exempt for that
    daemons = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "grab"}, "spec": {
        "selector": {"matchLabels": {"app": "grab"}}, "template": {
            "metadata": {"labels": {"app": "grab"}},
            "spec": {"tolerations": [{"operator": "Exists"}], "containers": [
                {"name": "c", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}
    client.AppsV1Api(a.api).create_namespaced_daemon_set(a.namespace, daemons)

    def refused_to_the_controller() -> str:
        events = a.core.list_namespaced_event(a.namespace, field_selector="involvedObject.name=grab").items
        return next((e.message for e in events if e.reason == "FailedCreate"), "")
    said = wait_for(refused_to_the_controller, 30, "the DaemonSet controller's pod refused")
    assert "must name spec.schedulerName" in said, said
    assert not [p for p in a.core.list_namespaced_pod(a.namespace).items if p.metadata.name.startswith("grab-")]
    client.AppsV1Api(a.api).delete_namespaced_daemon_set("grab", a.namespace)
    # what the policy leaves alone: a pod without GPUs placed by hand, a label of its own on the replica
    a.core.create_namespaced_pod(a.namespace, pod("cpu-only", gpus=0, nodeName=node, schedulerName="default-scheduler"))
    a.core.patch_namespaced_pod(replica.metadata.name, a.namespace, {"metadata": {"labels": {"team": "a"}}})
    assert a.jobs.phase("mine") == "Running"
    assert_the_fleet_holds(fleet, "placement")


def test_relabelling_a_bound_pods_queue_does_not_lift_its_tenants_limit(fleet):
    """H5: team-a fills its limit with two 8-GPU pods, then relabels them to a queue that does not exist; its third
    pod must still wait at the limit (the pods count in the queue they were bound under)."""
    a = fleet.a
    for name in ("first", "second"):
        a.core.create_namespaced_pod(a.namespace, gang_pod(name, fleet.sim, 8))
    wait_for(lambda: all(a.pod(n).spec.node_name for n in ("first", "second")), 30, "first and second bound")
    for name in ("first", "second"):
        a.core.patch_namespaced_pod(name, a.namespace, {"metadata": {"labels": {QUEUE_LABEL: "nowhere"}}})
    a.core.create_namespaced_pod(a.namespace, gang_pod("third", fleet.sim, 8))
    # the dangerous moment: the operator decides `third` after it saw the relabels (one watch of pods, in order)
    wait_for(lambda: a.pod("third").spec.node_name or a.said("third"), 30, "the operator's decision on third")
    for _ in range(2):  # and keeps to it, cycle after cycle
        assert not a.pod("third").spec.node_name, f"{a.name} past its limit: {gpus_bound(fleet.admin, a.namespace)}"
        assert f"is at its limit of {LIMIT} GPUs" in a.said("third"), a.said("third")
        time.sleep(2)
    assert gpus_bound(fleet.admin, a.namespace) == LIMIT
    assert_the_fleet_holds(fleet, "relabel")


def nested(levels: int) -> str:
    """A JSON value `levels` mappings deep, its innermost string holding brackets and escaped quotes."""
    return '{"a":' * levels + '"[{\\"}]"' + "}" * levels


def test_a_spec_nested_past_what_the_operator_reads_stops_nothing(fleet, cluster):
    """A job's template keeps unknown fields, which the API server keeps nested up to 10,000 levels. One nested 1,100
    levels (past what the operator's JSON decoder reads) once failed every watch event and list page holding it, and
    with them every job after it; one nested 300 levels (past what its encoder writes) failed its own status writes.
    Both must be Invalid, saying why, and the other tenant's guarantee must hold."""
    a, path = fleet.a, f"/apis/{GROUP}/{VERSION}/namespaces/{fleet.a.namespace}/trainingjobs"
    depths = {"deeper": 1_100, "deep": 300}
    try:
        for name, levels in depths.items():
            job = json.dumps(training_job(name, fleet.sim, 1, gpus=8))
            body = job.replace('"containers":', f'"nested": {nested(levels)}, "containers":', 1)
            answer = a.api.rest_client.pool_manager.request(  # raw: the Python client's encoder stops at 1,000
                "POST", a.api.configuration.host + path, body=body.encode(), headers={
                    "Content-Type": "application/json", **a.api.configuration.api_key})
            assert answer.status == 201, f"the API server keeps {levels} levels: {answer.status} {answer.data[:300]}"
        assert_the_fleet_holds(fleet, "nesting")
        for name in depths:
            def said(n=name) -> tuple[str, ...]:
                return tuple(cluster.kubectl("get", "trainingjobs.superpod.dev", n, "-n", a.namespace, "-o",
                                             "jsonpath={.status.phase}|{.status.message}").stdout.split("|", 1))
            wait_for(lambda n=name: said(n)[0] == "Invalid", 30, f"{name} Invalid (it says {said()})")
            assert "spec: nests deeper than 64 levels" in said()[1], said()
    finally:  # by name: a list of these jobs is past the Python client's decoder
        cluster.kubectl("delete", "trainingjobs.superpod.dev", *depths, "-n", a.namespace, "--ignore-not-found")


def test_a_bound_pods_runtime_limit_is_fixed_and_its_gang_keeps_it_past_a_leader_change(fleet, operator):
    """M1 of the DRA review: a tenant removed or raised the runtime limit on its bound pods, and after a leader change
    the gang ran without one. The policy refuses the edit, and any write of what the gang was bound with (its binding
    writes it); a new leader stops the gang at the limit it was bound with, though an admin (exempt) removed it."""
    a, limit = fleet.a, 30
    a.core.create_namespaced_pod(a.namespace, gang_pod("limited", fleet.sim, 8, annotations={MAX_RUNTIME: str(limit)}))
    bound = wait_for(lambda: (p := a.pod("limited")).spec.node_name and p, 30, "limited bound")
    assert json.loads(bound.metadata.annotations[BOUND_WITH]) == {"maxRuntimeSeconds": limit}, "written by its binding"

    def annotate(key: str, value: str | None, api: client.ApiClient = a.api):
        return lambda: client.CoreV1Api(api).patch_namespaced_pod("limited", a.namespace, {
            "metadata": {"annotations": {key: value}}})
    for value in (None, "999999"):
        assert "runtime limit is fixed" in refused(annotate(MAX_RUNTIME, value), 422)
    for value in (None, json.dumps({"maxRuntimeSeconds": 999999})):
        assert f"{BOUND_WITH} says what a pod gang was bound with" in refused(annotate(BOUND_WITH, value), 422)
    assert not [c for c in a.pod("limited").status.conditions or [] if c.type == "DisruptionTarget"], \
        "the dangerous moment: the leader goes before the limit comes"
    operator.kill()
    try:
        annotate(MAX_RUNTIME, None, fleet.admin)()
    finally:
        operator.start()

    def stopped() -> str:
        events = a.core.list_namespaced_event(a.namespace, field_selector="involvedObject.name=limited").items
        return next((e.message for e in events if e.reason == "MaxRuntimeExceeded"), "")
    said = wait_for(stopped, limit + 90, "the new leader stopping the gang at its limit")
    assert f"{MAX_RUNTIME} {limit} reached" in said, said
    assert_the_fleet_holds(fleet, "limit")


def test_no_container_of_a_tenants_pod_sets_what_the_container_toolkit_hands_gpus_out_by(fleet):
    """L3 of the DRA review: a pod asking for no GPUs, with NVIDIA_VISIBLE_DEVICES=all and a GPU node in spec.nodeName,
    sees every GPU there where the container toolkit honours the variable; so would an ephemeral container, added
    through pods/ephemeralcontainers (kubectl debug: granted to the tenant here, as clusters that let tenants debug
    their pods do)."""
    a = fleet.a
    node = client.CoreV1Api(fleet.admin).list_node(label_selector=f"{SIM_LABEL}={fleet.sim}").items[0].metadata.name
    words = "a container may not set NVIDIA_VISIBLE_DEVICES nor NVIDIA_DRIVER_CAPABILITIES"

    def cpu_pod(name: str, where: str = "containers", **container) -> dict:
        spec: dict = {"nodeName": node, "restartPolicy": "Never", "containers": [{"name": "main", "image": "cuda"}]}
        spec.setdefault(where, []).append({"name": "peek", "image": "cuda", **container})
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    attempts = [("NVIDIA_VISIBLE_DEVICES", {"value": "all"}, "containers"),
                ("NVIDIA_VISIBLE_DEVICES", {"valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, "containers"),
                ("NVIDIA_DRIVER_CAPABILITIES", {"value": "all"}, "containers"),
                ("NVIDIA_VISIBLE_DEVICES", {"value": "all"}, "initContainers")]
    for variable, source, where in attempts:
        body = cpu_pod("peek", where, env=[{"name": variable, **source}])
        assert words in refused(lambda b=body: a.core.create_namespaced_pod(a.namespace, b), 422)
    a.core.create_namespaced_pod(a.namespace, cpu_pod("debuggee"))
    rbac = client.RbacAuthorizationV1Api(fleet.admin)
    rbac.create_namespaced_role(a.namespace, {"metadata": {"name": "debug"}, "rules": [
        {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["patch", "update"]}]})
    rbac.create_namespaced_role_binding(a.namespace, {
        "metadata": {"name": "debug"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "debug"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": a.namespace}]})
    try:
        def debug(name: str, **container):
            return lambda: a.core.patch_namespaced_pod_ephemeralcontainers("debuggee", a.namespace, {"spec": {
                "ephemeralContainers": [{"name": name, "image": "cuda", **container}]}})
        wait_for(lambda: once_allowed(debug("debug")) is not None, 30, "the tenant may debug its pods")
        assert words in refused(debug("debug-all", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]), 422)
        assert [c.name for c in a.pod("debuggee").spec.ephemeral_containers] == ["debug"]
    finally:
        rbac.delete_namespaced_role_binding("debug", a.namespace)
        rbac.delete_namespaced_role("debug", a.namespace)
    assert_the_fleet_holds(fleet, "toolkit")


def test_a_pod_kube_scheduler_places_names_only_a_priority_class_the_chart_allows(fleet):
    """L3 of the DRA review: a pod asking for no GPUs, of a high PriorityClass and with an affinity to a GPU node, has
    kube-scheduler preempt other tenants' GPU pods there, past every queue. The chart allows tenants' pods only the
    classes it lists (here one that preempts nothing); pods for this scheduler may name any."""
    a, scheduling = fleet.a, client.SchedulingV1Api(fleet.admin)
    high = f"{a.namespace}-high"
    scheduling.create_priority_class({"metadata": {"name": high}, "value": 1_000_000})
    scheduling.create_priority_class({"metadata": {"name": fleet.allowed_class}, "value": 1_000_000,
                                      "preemptionPolicy": "Never"})
    try:
        def cpu_pod(name: str, priority_class: str) -> dict:
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
                "priorityClassName": priority_class, "nodeSelector": {SIM_LABEL: fleet.sim},
                "restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer"}]}}
        said = refused(lambda: a.core.create_namespaced_pod(a.namespace, cpu_pod("preemptor", high)), 422)
        assert "may name only the PriorityClasses the cluster's admins allow" in said, said
        a.core.create_namespaced_pod(a.namespace, cpu_pod("patient", fleet.allowed_class))
        ranked = gang_pod("ranked", "no-such-cluster", 8)  # matches no node: it waits, and holds nothing
        ranked["spec"]["priorityClassName"] = high
        a.core.create_namespaced_pod(a.namespace, ranked)
        assert a.pod("ranked").spec.priority == 1_000_000
    finally:
        for name in (high, fleet.allowed_class):
            scheduling.delete_priority_class(name)
    assert_the_fleet_holds(fleet, "priority")


def claim_template(count: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpus"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": count}}]}}}}


def test_a_claim_template_swapped_under_a_running_job_is_counted_at_what_its_claims_hold(fleet):
    """H1 of the DRA review: the tenant swaps the ResourceClaimTemplate its running job's replicas claim 5 GPUs from
    (one replica a node) for one of 8 (delete and create under its name), and the claim of a replica made again
    after a node failure holds 8. The attempt stops with ClaimsChanged, and the job is placed again counted at 8 a
    replica: its queue never shows less than its claims hold."""
    a = fleet.a
    sim, _ = sim_cluster(fleet.admin, "dgx-h100", 3, own_leaves=True, dra=True, nodes_per_unit=3)
    templates = lambda *args: a.custom.create_namespaced_custom_object(  # noqa: E731
        "resource.k8s.io", "v1", a.namespace, "resourceclaimtemplates", *args)
    templates(claim_template(5))
    job = training_job("swapped", sim, 2, nodeFailure="Replace")
    job["spec"]["resources"] = {}
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]
    job["spec"]["template"]["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    a.jobs.create(job)
    status = a.jobs.wait_phase("swapped", "Running", 120)
    assert status["admitted"]["claimedGpus"] == 5 and len(status["placement"]) == 2, status
    a.custom.delete_namespaced_custom_object("resource.k8s.io", "v1", a.namespace, "resourceclaimtemplates", "gpus")
    templates(claim_template(8))
    lost = a.pod("swapped-a1-1").spec.node_name
    client.CoreV1Api(fleet.admin).delete_node(lost)  # (a node failure: the replica is made again elsewhere)

    def said() -> str:
        events = a.core.list_namespaced_event(a.namespace, field_selector="involvedObject.name=swapped").items
        return next((e.message for e in events if e.reason == "ClaimsChanged"), "")
    why = wait_for(said, 120, "the attempt stopped for claims that hold more than admitted")
    assert "replica 1's claims" in why and "admitted with 5 a replica" in why, why
    placed = wait_for(lambda: (s := a.jobs.status("swapped")).get("attempt", 0) >= 2 and s.get("admitted") and s,
                      120, "placed again")
    assert placed["admitted"]["claimedGpus"] == 8, placed["admitted"]
    queue = client.CustomObjectsApi(fleet.admin).get_cluster_custom_object(GROUP, VERSION, "gpuqueues", a.namespace)
    assert all(f["allocated"] <= LIMIT for f in queue["status"]["flavors"]), queue["status"]
    a.custom.delete_namespaced_custom_object("resource.k8s.io", "v1", a.namespace, "resourceclaimtemplates", "gpus")
    assert_the_fleet_holds(fleet, "swap")
