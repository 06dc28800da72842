"""A TrainingJob's replicas whose DRA claims ask for or hold more GPUs than the job was admitted with: a template
swapped after placement (delete and create under its name; the spec is immutable, the object is not) makes claims
that kube-controller-manager makes and kube-scheduler allocates as the template says now. Found by review (H1): the
queue counted and the bill charged what the templates were worth at placement, 1 GPU a replica for 8 held."""

from __future__ import annotations

from superpod.api.manifests import pinned_to
from superpod.k8s.api import GPUQUEUES, GPUUSAGES, PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gang_claims import CLAIM_SPEC, claiming, devices, dra_cluster
from tests.unit.podgangs.test_pod_gangs import create, stored

ONE = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}}]}}


def template(name: str, spec: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": {"spec": spec}}


def placed_at_one_gpu() -> MemoryCluster:
    """Queue `a` (limit 2 GPUs) and job `cheap`: 2 replicas claiming 1 GPU each from template `one`, placed; then the
    tenant swaps `one` for a template of 8 GPUs."""
    c = dra_cluster(2)
    run(c.admin.create(RESOURCECLAIMTEMPLATES, template("one", ONE)))
    run(c.admin.create(GPUQUEUES, {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": "a"},
                                   "spec": {"namespaces": ["team-a"],
                                            "resources": [{"flavor": "*", "guaranteed": 2, "limit": 2}]}}))
    body = training_job("cheap", 2, gpus=None)
    body["spec"]["resources"] = {}
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one"}]
    c.submit(body)
    c.settle(3)
    assert c.decided("cheap")["admitted"]["claimedGpus"] == 1.0
    run(c.admin.delete(RESOURCECLAIMTEMPLATES, "one", "team-a"))
    run(c.admin.create(RESOURCECLAIMTEMPLATES, template("one", CLAIM_SPEC)))
    c.settle(2)
    return c


def pinned_node(pod: dict) -> str | None:
    return pinned_to(pod["spec"])


def make_claims(c: MemoryCluster, allocated: bool, job: str = "cheap") -> None:
    """What kube-controller-manager does for each pod (its claim from the template as it is now) and, if `allocated`,
    what kube-scheduler does next (8 devices on the pod's node, reserved for it, the pod bound)."""
    for pod in c.pods(job):
        name, uid, node = pod["metadata"]["name"], pod["metadata"]["uid"], pinned_node(pod)
        run(c.admin.create(RESOURCECLAIMS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"{name}-gpus", "namespace": "team-a",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]},
            "spec": CLAIM_SPEC}))
        run(c.admin.patch_status(PODS, name, {"status": {"resourceClaimStatuses": [
            {"name": "gpus", "resourceClaimName": f"{name}-gpus"}]}}, "team-a"))
        if not allocated:
            continue
        allocate(c, f"{name}-gpus", name, uid, *[(node, f"gpu-{i}") for i in range(8)])
        run(c.admin.patch(PODS, name, {"spec": {"nodeName": node}}, "team-a"))


def held(c: MemoryCluster, job: str = "cheap") -> int:
    return sum(len((((c.store.peek(RESOURCECLAIMS, f"team-a/{p['metadata']['name']}-gpus") or {}).get("status") or {})
                    .get("allocation") or {}).get("devices", {}).get("results", [])) for p in c.pods(job))


def job_records(c: MemoryCluster) -> list[dict]:
    """The job's attempts' GPUUsage records (not its pods' own)."""
    return [r["spec"] for r in c.store.objects.get(GPUUSAGES, {}).values()
            if r["spec"]["job"] == "cheap" and "pod" not in r["spec"]]


def test_claims_that_hold_more_than_admitted_are_counted_billed_and_stopped():
    c = placed_at_one_gpu()
    make_claims(c, allocated=True)
    assert held(c) == 16, "the dangerous moment: the job's claims hold 8 GPUs a replica, admitted at 1"
    c.tick(1)
    c.tick(600)  # they run ten minutes while no operator looks (a restart, a long cycle)
    c.cycle()
    allocated = c.store.peek(GPUQUEUES, "a")["status"]["flavors"][0]["allocated"]
    assert allocated == 16, f"queue a counts {allocated} GPUs while the job's claims hold 16"
    c.settle(4)
    assert c.decided("cheap")["phase"] == "Queued"
    [why] = [message for reason, message in c.events("cheap") if reason == "ClaimsChanged"]
    assert "claims hold 8 GPUs, but the job was admitted with 1 a replica" in why, why
    [record] = job_records(c)
    assert record["gpus"] == 16 and record["gpuSeconds"] >= 16 * 600, record


def test_claims_that_ask_for_more_than_admitted_stop_the_attempt_before_it_runs():
    c = placed_at_one_gpu()
    make_claims(c, allocated=False)
    c.settle(3)
    status = c.decided("cheap")
    assert status["phase"] == "Queued" and status["reason"] == "QueueAtLimit", "counted at what it asks now"
    [why] = [message for reason, message in c.events("cheap") if reason == "ClaimsChanged"]
    assert "claims ask for 8 GPUs" in why, why
    assert not any(p["spec"].get("nodeName") for p in c.pods("cheap", live=False)), "no replica ran"
    assert not job_records(c)


def one_gpu_gang(c: MemoryCluster) -> tuple[str, str]:
    """Pod gang g-0 claiming 1 GPU from template `one` (its claim made as kube-controller-manager makes it), placed
    and bound by the operator: the device its claim was given."""
    gang = claiming("g-0", "g", 1, 0)
    gang["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one"}]
    create(c, gang)
    own_claim(c, "g-0", stored(c, "g-0")["metadata"]["uid"], ONE)
    run(c.admin.patch_status(PODS, "g-0", {"status": {"resourceClaimStatuses": [
        {"name": "gpus", "resourceClaimName": "g-0-gpus"}]}}, "team-a"))
    c.settle(3)
    [taken] = devices(c, "g-0")
    return taken


def one_gpu_job(c: MemoryCluster) -> tuple[str, str]:
    """TrainingJob `cheap`, one replica claiming 1 GPU from template `one`, placed: its pod's name and uid."""
    body = training_job("cheap", 1, gpus=None)
    body["spec"]["resources"] = {}
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one"}]
    c.submit(body)
    c.settle(3)
    [pod] = c.pods("cheap")
    return pod["metadata"]["name"], pod["metadata"]["uid"]


def own_claim(c: MemoryCluster, pod: str, uid: str, spec: dict) -> None:
    """The claim kube-controller-manager makes for `pod` from its template."""
    run(c.admin.create(RESOURCECLAIMS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": f"{pod}-gpus", "namespace": "team-a",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}]},
        "spec": spec}))


def allocate(c: MemoryCluster, claim: str, pod: str, uid: str, *devices: tuple[str, str]) -> None:
    """kube-scheduler's allocation of `claim` to `devices` (pool, device) of one node, reserved for `pod`."""
    node = devices[0][0]
    run(c.admin.patch_status(RESOURCECLAIMS, claim, {"status": {
        "allocation": {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": pool,
                                                "device": device} for pool, device in devices]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]}}, "team-a"))


def test_a_replica_given_a_device_an_earlier_claim_holds_is_stopped():
    """Two allocators share the devices (L2): kube-scheduler, allocating a TrainingJob's claim from a view that has
    not seen this operator's allocation for a pod gang yet, gives it the device the gang's claim holds."""
    c = dra_cluster(1, nodes_per_unit=1)
    run(c.admin.create(RESOURCECLAIMTEMPLATES, template("one", ONE)))
    taken = one_gpu_gang(c)
    name, uid = one_gpu_job(c)
    own_claim(c, name, uid, ONE)
    allocate(c, f"{name}-gpus", name, uid, taken)
    assert devices(c, f"{name}") == [taken], "the dangerous moment: one device in two claims"
    c.settle(3)
    [why] = [message for reason, message in c.events("cheap") if reason == "DeviceTakenTwice"]
    assert f"was given device {taken[1]} of pool {taken[0]}, which the earlier claim team-a/g-0-gpus holds" in why, why
    assert devices(c, "g-0") == [taken] and stored(c, "g-0")["spec"]["nodeName"], "the earlier claim keeps it"


def test_a_pod_gang_given_a_device_an_earlier_claim_holds_is_evicted():
    """Found by review: the race the other way round, the later claim a pod gang's (the operator's allocation, from
    a view that had not seen kube-scheduler's): nothing looked at it, and both kept the device."""
    c = dra_cluster(1, nodes_per_unit=1)
    run(c.admin.create(RESOURCECLAIMTEMPLATES, template("one", ONE)))
    name, uid = one_gpu_job(c)
    own_claim(c, name, uid, ONE)
    c.tick(2)
    taken = one_gpu_gang(c)
    allocate(c, f"{name}-gpus", name, uid, taken)
    run(c.admin.patch(PODS, name, {"spec": {"nodeName": taken[0]}}, "team-a"))
    assert devices(c, name) == [taken] == devices(c, "g-0"), "the dangerous moment: one device in two claims"
    c.settle(3)
    gone = c.store.peek(PODS, "team-a/g-0")
    assert gone is None or gone["metadata"].get("deletionTimestamp"), "the later claim's gang is evicted"
    assert c.decided("cheap")["phase"] in ("Starting", "Running"), "the earlier claim's job runs on"


def test_a_claim_the_replicas_share_reserved_for_one_of_them_yet_counts_at_its_share():
    """Found by review: kube-scheduler reserves a shared claim for one pod at a time; counted whole against the
    first replica, it stopped the job as though its template had changed, at every attempt."""
    c = dra_cluster(1, nodes_per_unit=1)
    run(c.admin.create(RESOURCECLAIMS, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                        "metadata": {"name": "shared8", "namespace": "team-a"}, "spec": CLAIM_SPEC}))
    body = training_job("share", 2, gpus=None)
    body["spec"]["resources"] = {}
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "shared8"}]
    c.submit(body)
    c.settle(3)
    first = sorted(c.pods("share"), key=lambda p: p["metadata"]["name"])[0]
    name, uid, node = first["metadata"]["name"], first["metadata"]["uid"], pinned_node(first)
    run(c.admin.patch_status(RESOURCECLAIMS, "shared8", {"status": {
        "allocation": {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": node,
                                                "device": f"gpu-{i}"} for i in range(8)]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": name, "uid": uid}]}}, "team-a"))
    run(c.admin.patch(PODS, name, {"spec": {"nodeName": node}}, "team-a"))
    c.settle(3)
    assert not [m for r, m in c.events("share") if r == "ClaimsChanged"]
    assert c.decided("share")["phase"] in ("Starting", "Running"), c.decided("share")
