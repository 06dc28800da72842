"""The chart's tenant pod policy, rule by rule, on CEL's runtime (tests/unit/tenancy/admission_policy.py): what a
tenant's pod may not be, or become, and what stays the tenant's. The integration tests make the same requests
through a tenant's own token against the real API server."""

from __future__ import annotations

import copy

import pytest

from superpod.api.manifests import MAX_RUNTIME
from superpod.api.podgang import BOUND_WITH
from tests.unit.tenancy.admission_policy import Policy, tenant_pod

OWNER = {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob", "name": "j", "uid": "u1", "controller": True}
REPLICA = {"superpod.dev/job-name": "j", "superpod.dev/attempt": "1", "superpod.dev/replica-index": "0"}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy()


def edited(pod: dict, change) -> dict:
    out = copy.deepcopy(pod)
    change(out)
    return out


def annotated(pod: dict, **annotations) -> dict:
    """`pod` with these annotations (None: removed)."""
    def change(p):
        notes = p["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                notes.pop(key, None)
            else:
                notes[key] = value
    return edited(pod, change)


def refused(policy: Policy, pod: dict, old: dict | None = None, sub_resource: str = "") -> str:
    """The one refusal of the request, in words."""
    said = policy.refusals(pod, old, sub_resource)
    assert len(said) == 1, said
    return said[0]


def test_a_pod_asking_for_gpus_is_placed_by_this_scheduler(policy):
    assert "may not set spec.nodeName" in refused(policy, tenant_pod(gpus=8, nodeName="n1"))
    assert "must name spec.schedulerName" in refused(policy, tenant_pod(gpus=8, scheduler="default-scheduler"))
    claims = tenant_pod(scheduler="default-scheduler", resourceClaims=[{"name": "g", "resourceClaimName": "c"}])
    assert "must name spec.schedulerName" in refused(policy, claims)
    assert policy.refusals(tenant_pod(gpus=8)) == []
    assert policy.refusals(tenant_pod(scheduler="default-scheduler", nodeName="n1")) == [], "no GPUs: not ours"


def test_only_the_operator_marks_a_pod_as_a_training_jobs(policy):
    owned = edited(tenant_pod(), lambda p: p["metadata"].update(ownerReferences=[OWNER]))
    assert "may not be given a TrainingJob owner reference" in refused(policy, owned)
    labelled = edited(tenant_pod(), lambda p: p["metadata"].update(labels=dict(REPLICA)))
    assert "mark a TrainingJob's pods" in refused(policy, labelled)
    moved = edited(labelled, lambda p: p["metadata"]["labels"].update({"superpod.dev/attempt": "2"}))
    assert "mark a TrainingJob's pods" in refused(policy, moved, labelled)
    orphaned = edited(owned, lambda p: p["metadata"].update(ownerReferences=[]))
    assert policy.refusals(orphaned, owned) == [], "a reference may be removed, as the garbage collector does"


def test_only_the_operator_writes_what_a_pod_gang_was_bound_with(policy):
    """M1 of the DRA review: what a gang was bound with is read back by every leader; no tenant may write it."""
    said = '{"maxRuntimeSeconds":600}'
    bound = annotated(tenant_pod(gpus=8, nodeName="n1"), **{BOUND_WITH: said})
    for attempt, old in ((annotated(tenant_pod(gpus=8), **{BOUND_WITH: said}), None),  # created with it
                         (annotated(bound, **{BOUND_WITH: '{"maxRuntimeSeconds":null}'}), bound),  # changed
                         (annotated(bound, **{BOUND_WITH: None}), bound)):  # removed
        assert f"{BOUND_WITH} says what a pod gang was bound with" in refused(policy, attempt, old)
    assert policy.refusals(annotated(bound, note="mine"), bound) == [], "the tenant's own annotations stay its own"


@pytest.mark.parametrize("value", [None, "999999", "60"], ids=["removed", "raised", "lowered"])
def test_a_bound_pods_runtime_limit_is_fixed(policy, value):
    """M1 of the DRA review: a tenant removed or raised the limit on its bound pods."""
    waiting = annotated(tenant_pod(gpus=8), **{MAX_RUNTIME: "600"})
    bound = edited(waiting, lambda p: p["spec"].update(nodeName="n1"))
    assert "runtime limit is fixed" in refused(policy, annotated(bound, **{MAX_RUNTIME: value}), bound)
    assert policy.refusals(annotated(waiting, **{MAX_RUNTIME: value}), waiting) == [], "the tenant's until bound"


def test_a_bound_pod_without_a_limit_may_not_be_given_one(policy):
    bound = tenant_pod(gpus=8, nodeName="n1")
    assert "runtime limit is fixed" in refused(policy, annotated(bound, **{MAX_RUNTIME: "60"}), bound)


@pytest.mark.parametrize("variable", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"])
@pytest.mark.parametrize("where", ["containers", "initContainers"])
@pytest.mark.parametrize("source", [{"value": "all"}, {"valueFrom": {"configMapKeyRef": {"name": "g", "key": "all"}}}],
                         ids=["value", "valueFrom"])
def test_no_container_sets_what_the_container_toolkit_hands_gpus_out_by(policy, variable, where, source):
    """L3 of the DRA review: a pod asking for no GPUs, with NVIDIA_VISIBLE_DEVICES=all on a GPU node, sees them all
    where the toolkit honours the variable."""
    pod = tenant_pod(scheduler="default-scheduler", nodeName="gpu-node")
    pod["spec"].setdefault(where, []).append({"name": "c", "image": "cuda", "env": [
        {"name": "OTHER", "value": "1"}, {"name": variable, **source}]})
    assert "a container may not set NVIDIA_VISIBLE_DEVICES nor NVIDIA_DRIVER_CAPABILITIES" in refused(policy, pod)
    pod["spec"][where][-1]["env"] = [{"name": "OTHER", "value": "1"}]
    assert policy.refusals(pod) == []


def test_nor_an_ephemeral_container_added_to_a_running_pod(policy):
    """L3: ephemeral containers are added through pods/ephemeralcontainers (kubectl debug), an UPDATE."""
    running = tenant_pod(scheduler="default-scheduler", nodeName="gpu-node")
    debugged = edited(running, lambda p: p["spec"].update(ephemeralContainers=[
        {"name": "debug", "image": "cuda", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]))
    assert "may not set NVIDIA_VISIBLE_DEVICES" in refused(policy, debugged, running, "ephemeralcontainers")
    debugged["spec"]["ephemeralContainers"][0].pop("env")
    assert policy.refusals(debugged, running, "ephemeralcontainers") == []


def test_a_pod_made_before_the_rule_may_still_be_updated(policy):
    """A container's env is fixed once it is made: a pod made before the chart had the rule is not stuck (its Job's
    controller still removes its finalizer)."""
    old = tenant_pod(scheduler="default-scheduler")
    old["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,video"}]
    assert policy.refusals(edited(old, lambda p: p["metadata"].update(finalizers=[])), old) == []


def test_a_pod_another_scheduler_places_names_only_an_allowed_priority_class():
    """L3 of the DRA review: a CPU pod of a high PriorityClass, with an affinity to a GPU node, has kube-scheduler
    preempt other tenants' GPU pods there."""
    policy = Policy(priority_classes=("tenants",))
    high = tenant_pod(scheduler="default-scheduler", priorityClassName="high", priority=1_000_000)
    assert "may name only the PriorityClasses the cluster's admins allow" in refused(policy, high)
    assert "may name only the PriorityClasses" in refused(Policy(), edited(high, lambda p: p["spec"].update(
        priorityClassName="tenants")))
    assert policy.refusals(edited(high, lambda p: p["spec"].update(priorityClassName="tenants"))) == []
    assert policy.refusals(edited(high, lambda p: p["spec"].pop("priorityClassName"))) == []
    gang = tenant_pod(gpus=8, priorityClassName="high")  # this scheduler preempts by the queues' rules
    assert policy.refusals(gang) == []
