"""Nodes that advertise no nvidia.com/gpu and publish their GPUs as DRA devices only, with a DeviceClass naming
nvidia.com/gpu its extendedResourceName (as NVIDIA's DRA driver sets up on 1.36+): kube-scheduler serves a pod's
nvidia.com/gpu there from the devices, by a claim it makes for the pod. A TrainingJob's replicas are placed there by
the devices they will get and go to kube-scheduler pinned to their node; what those claims hold is counted once (the
pods' requests count it); a pod gang, whose pods this scheduler binds by name, keeps off them."""

from __future__ import annotations

from superpod.controller.state.dra import EXTENDED_CLAIM
from superpod.k8s.api import GPUQUEUES, GPUUSAGES, NODES, PODS, RESOURCECLAIMS, RESOURCECLAIMTEMPLATES
from tests.unit.dra.test_claims_past_admission import allocate, pinned_node, template
from tests.unit.dra.test_one_pool import FOUR
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gang_claims import claiming, create_claiming, devices, dra_cluster
from tests.unit.podgangs.test_pod_gangs import create, pod, stored


def served_cluster(nodes: int = 1) -> MemoryCluster:
    """dra_cluster's nodes with their nvidia.com/gpu taken away: the DeviceClass gpu.nvidia.com serves it."""
    c = dra_cluster(nodes, nodes_per_unit=nodes)
    for name in [node["metadata"]["name"] for node in c.store.items(NODES)]:
        c.update_node(name, lambda n: [n["status"][k].pop("nvidia.com/gpu") for k in ("allocatable", "capacity")])
    return c


def held(c: MemoryCluster, claim: str) -> list[tuple[str, str]]:
    """(pool, device) of what claim `claim` was allocated."""
    allocation = (c.store.peek(RESOURCECLAIMS, f"team-a/{claim}").get("status") or {}).get("allocation") or {}
    return [(r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results", ())]


def kube_scheduler_binds(c: MemoryCluster, job: str, first_device: int = 0) -> None:
    """What kube-scheduler does for each of the job's pods pinned to a node: a claim for its nvidia.com/gpu (as many
    devices as it asks, from `first_device` on), named in the pod's status, and the binding."""
    at = first_device
    for body in c.pods(job):
        if body["spec"].get("nodeName"):
            continue
        name, uid, node = body["metadata"]["name"], body["metadata"]["uid"], pinned_node(body)
        gpus = int(body["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"])
        claim = f"{name}-extended-resources-x"
        run(c.admin.create(RESOURCECLAIMS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": claim, "namespace": "team-a", "annotations": {EXTENDED_CLAIM: "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]},
            "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": gpus}}]}}}))
        allocate(c, claim, name, uid, *[(node, f"gpu-{i}") for i in range(at, at + gpus)])
        at += gpus
        run(c.admin.patch_status(PODS, name, {"status": {"extendedResourceClaimStatus": {
            "resourceClaimName": claim, "requestMappings": [{"containerName": "main", "resourceName": "nvidia.com/gpu",
                                                             "requestName": "container-0-request-0"}]}}}, "team-a"))
        run(c.admin.patch(PODS, name, {"spec": {"nodeName": node}}, "team-a"))


def gang_then_classic(c: MemoryCluster, gang: str, template: str, gpus: int) -> dict:
    """A pod gang of one claiming from `template`, bound on dgx-su01-n01; then a classic job of `gpus` GPUs: its
    status."""
    body = claiming(f"{gang}-0", gang, 1, 0)
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    create_claiming(c, body)
    c.settle(4)
    assert stored(c, f"{gang}-0")["spec"].get("nodeName") == "dgx-su01-n01", "the dangerous moment: the gang holds"
    c.submit(training_job("classic", 1, gpus=gpus))
    c.settle(4)
    return c.decided("classic")


def test_a_classic_job_goes_to_kube_scheduler_pinned_to_a_node_whose_dra_devices_serve_its_gpus():
    c = served_cluster()
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(3)
    status = c.decided("classic")
    assert status["phase"] in ("Starting", "Running"), status
    [body] = c.pods("classic")
    assert not body["spec"].get("nodeName"), "bound by name: the kubelet would run it without its GPUs"
    assert body["spec"]["schedulerName"] == "default-scheduler" and pinned_node(body) == "dgx-su01-n01"
    kube_scheduler_binds(c, "classic")
    c.settle(3)
    assert c.decided("classic")["phase"] == "Running"


def test_what_kube_scheduler_claims_for_a_pods_gpus_is_counted_once():
    """4 GPUs through a claim kube-scheduler made for a classic replica, 4 through a pod gang's own claim: the node's
    8, each booked once. Counting the first claim beside the pod's request left no room for the gang."""
    c = served_cluster()
    run(c.admin.create(GPUQUEUES, {
        "apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": "a"},
        "spec": {"namespaces": ["team-a"], "resources": [{"flavor": "*", "guaranteed": 8}]}}))
    c.submit(training_job("classic", 1, gpus=4))
    c.settle(3)
    kube_scheduler_binds(c, "classic")
    c.settle(2)
    assert len(held(c, "classic-a1-0-extended-resources-x")) == 4, "the dangerous moment: the claim holds 4"
    gang = claiming("d-0", "d", 1, 0)
    gang["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four"}]
    run(c.admin.create(RESOURCECLAIMTEMPLATES, template("four", FOUR)))
    create_claiming(c, gang)
    c.settle(4)
    assert stored(c, "d-0")["spec"].get("nodeName") == "dgx-su01-n01", "the gang fits the 4 GPUs left"
    taken = {device for claim in ("classic-a1-0-extended-resources-x", "d-0-gpus") for device in held(c, claim)}
    assert len(taken) == 8, f"a device handed out twice: {taken}"
    c.tick(60)
    c.cycle()
    allocated = c.store.peek(GPUQUEUES, "a")["status"]["flavors"][0]["allocated"]
    assert allocated == 8, f"the queue counts {allocated} GPUs, the pods hold 8"


def test_a_gang_claiming_gpus_is_not_given_those_a_placed_replica_will_get():
    """The replica is placed and pinned, and kube-scheduler has not made its claim yet: its 8 GPUs are booked by its
    request, so a gang claiming 8 waits though every device still looks free."""
    c = served_cluster()
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(3)
    assert not c.pods("classic")[0]["spec"].get("nodeName"), "the dangerous moment: no claim made yet"
    create_claiming(c, claiming("d-0", "d", 1, 0))
    c.settle(4)
    assert not stored(c, "d-0")["spec"].get("nodeName"), "given the GPUs kube-scheduler is to give the replica"
    assert not devices(c, "d-0")


def test_a_pod_gang_asking_nvidia_com_gpu_keeps_off_nodes_whose_dra_devices_serve_it_and_says_why():
    c = served_cluster()
    create(c, pod("g-0", "g", 1, gpus=8, index=0))
    c.settle(3)
    body = stored(c, "g-0")
    assert not body["spec"].get("nodeName"), "bound by name: it would run without its GPUs"
    [condition] = [x for x in body["status"].get("conditions", ()) if x["type"] == "PodScheduled"]
    assert "serving nvidia.com/gpu only to pods kube-scheduler binds" in condition["message"], condition


def test_a_tenants_claim_annotated_as_kube_schedulers_is_still_counted_where_its_pod_uses_it_by_name():
    """Hostile: the annotation kube-scheduler puts on the claims it makes is a tenant's to write on its own claims.
    A claim a pod uses by name is the pod's whatever it says: billed and counted as the devices it holds."""
    c = served_cluster()
    run(c.admin.create(RESOURCECLAIMS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "mine", "namespace": "team-a", "annotations": {EXTENDED_CLAIM: "true"}},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                       "count": 8}}]}}}))
    body = pod("s-0", "s", 1, gpus=0, index=0)
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "mine"}]
    create(c, body)
    c.settle(4)
    assert stored(c, "s-0")["spec"].get("nodeName"), "the dangerous moment: bound, its claim allocated"
    assert len(held(c, "mine")) == 8
    c.tick(100)
    c.settle(2)
    run(c.admin.delete(PODS, "s-0", "team-a"))
    c.settle(3)
    billed = [r["spec"] for r in c.store.objects.get(GPUUSAGES, {}).values() if r["spec"].get("pod") == "s-0"]
    assert billed and billed[0]["gpus"] == 8, billed


def test_a_replica_made_again_for_kube_scheduler_is_left_to_it_until_it_binds():
    """Found on the real control plane: a replica made again after its node was lost, pinned to its new node for
    kube-scheduler and not bound yet, was taken for the lost pod (not on its new node) and deleted at each cycle, and
    made again: kube-scheduler never bound it, and its claims went with it."""
    c = served_cluster(3)
    c.submit(training_job("r", 2, gpus=8, nodeFailure="Replace"))
    c.settle(3)
    kube_scheduler_binds(c, "r")
    c.settle(2)
    assert c.decided("r")["phase"] == "Running"
    lost = stored(c, "r-a1-1")["spec"]["nodeName"]
    c.store.delete_now(NODES, lost)
    c.settle(3)
    made = stored(c, "r-a1-1")
    assert pinned_node(made) != lost and not made["spec"].get("nodeName"), "the dangerous moment: made again, unbound"
    c.settle(4)
    again = stored(c, "r-a1-1")
    assert again["metadata"]["uid"] == made["metadata"]["uid"], "deleted and made again while kube-scheduler binds it"
    kube_scheduler_binds(c, "r", first_device=0)
    c.settle(3)
    status = c.decided("r")
    assert status["phase"] == "Running" and status["replacements"] == 1 and status["attempt"] == 1, status
