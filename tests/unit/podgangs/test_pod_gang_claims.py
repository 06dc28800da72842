"""Pod gangs whose pods claim GPUs through DRA, driven on the in-memory API: the claims are allocated on their pods'
nodes and reserved for them before the bindings; a claim written for a binding that failed is released and the pod
bound again with its claim allocated anew on its new node, never two claims on one device."""

from __future__ import annotations

from superpod.hardware import dra_slices
from superpod.k8s.api import (
    DEVICECLASSES,
    GPUQUEUES,
    GPUUSAGES,
    NODES,
    PODS,
    RESOURCECLAIMS,
    RESOURCECLAIMTEMPLATES,
    RESOURCESLICES,
    ApiError,
)
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gangs import create, fail_binding_once, pod, scheduled, stored

H100 = "NVIDIA H100 80GB HBM3"
CLAIM_SPEC = {"devices": {"requests": [{"name": "gpus", "exactly": {
    "deviceClassName": "gpu.nvidia.com", "count": 8, "selectors": [
        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName == '{H100}'"}}]}}]}}


def dra_cluster(nodes: int, nodes_per_unit: int = 4) -> MemoryCluster:
    """Nodes whose GPUs are published as ResourceSlices only, the driver's classes, and a claim template."""
    c = MemoryCluster(nodes=nodes, nodes_per_unit=nodes_per_unit)
    for body in dra_slices.device_classes():
        run(c.admin.create(DEVICECLASSES, body))
    for node in c.store.items(NODES):
        for body in dra_slices.node_slices(node):
            run(c.admin.create(RESOURCESLICES, body))
    run(c.admin.create(RESOURCECLAIMTEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                                "metadata": {"name": "eight", "namespace": "team-a"},
                                                "spec": {"spec": CLAIM_SPEC}}))
    return c


def claiming(name: str, gang: str, size: int, index: int) -> dict:
    """A gang member claiming 8 GPUs from the template."""
    body = pod(name, gang, size, gpus=0, index=index, required="leaf")
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight"}]
    return body


def create_claiming(c: MemoryCluster, *bodies: dict) -> None:
    """The pods, and their claims made as kube-controller-manager makes them (named in the pods' status)."""
    create(c, *bodies)
    for body in bodies:
        name = body["metadata"]["name"]
        run(c.admin.create(RESOURCECLAIMS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"{name}-gpus", "namespace": "team-a",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": c.store.peek(
                             PODS, f"team-a/{name}")["metadata"]["uid"]}]},
            "spec": CLAIM_SPEC}))
        run(c.admin.patch_status(PODS, name, {"status": {"resourceClaimStatuses": [
            {"name": "gpus", "resourceClaimName": f"{name}-gpus"}]}}, "team-a"))


def claim(c: MemoryCluster, name: str) -> dict:
    return c.store.peek(RESOURCECLAIMS, f"team-a/{name}-gpus").get("status") or {}


def devices(c: MemoryCluster, name: str) -> list[tuple[str, str]]:
    results = ((claim(c, name).get("allocation") or {}).get("devices") or {}).get("results") or ()
    return [(r["pool"], r["device"]) for r in results]


def test_each_claim_is_allocated_on_its_pods_node_and_reserved_for_it_before_the_binding():
    c = dra_cluster(8)
    create_claiming(c, *[claiming(f"g-{i}", "g", 2, i) for i in range(2)])
    c.settle(3)
    for name in ("g-0", "g-1"):
        node = stored(c, name)["spec"].get("nodeName")
        assert node, scheduled(c, name)
        assert {pool for pool, _ in devices(c, name)} == {node} and len(devices(c, name)) == 8
        uid = stored(c, name)["metadata"]["uid"]
        assert claim(c, name)["reservedFor"] == [{"resource": "pods", "name": name, "uid": uid}]
        assert c.store.peek(RESOURCECLAIMS, f"team-a/{name}-gpus")["metadata"]["finalizers"] == [
            "resource.kubernetes.io/delete-protection"], "not deleted while its pod may use it"


def test_a_claim_written_for_a_binding_that_failed_is_released_and_allocated_again_where_the_pod_goes():
    c = dra_cluster(8)
    failed = fail_binding_once(c, "team-a/g-1")
    create_claiming(c, *[claiming(f"g-{i}", "g", 2, i) for i in range(2)])
    c.cycle()
    assert failed and not stored(c, "g-1")["spec"].get("nodeName")
    assert claim(c, "g-1").get("allocation"), "the dangerous moment: a claim allocated for a pod left unbound"
    c.settle(4)
    node = stored(c, "g-1")["spec"].get("nodeName")
    assert node, scheduled(c, "g-1")
    assert {pool for pool, _ in devices(c, "g-1")} == {node}, "allocated where the pod is bound"
    assert not set(devices(c, "g-0")) & set(devices(c, "g-1"))
    seen = [e.obj for e in c.store.events if e.kind == RESOURCECLAIMS and e.obj["metadata"]["name"] == "g-1-gpus"]
    first = next(i for i, obj in enumerate(seen) if (obj.get("status") or {}).get("allocation"))
    assert any(not (obj.get("status") or {}).get("allocation") and not obj["metadata"].get("finalizers")
               for obj in seen[first:]), "released, its finalizer removed too"


def test_a_gang_that_loses_its_claims_on_the_way_waits_and_binds_nothing():
    c = dra_cluster(4)
    bodies = [claiming(f"w-{i}", "w", 2, i) for i in range(2)]
    create(c, *bodies)  # the claims are not made yet
    c.settle(2)
    assert not any(stored(c, f"w-{i}")["spec"].get("nodeName") for i in range(2))
    assert "ResourceClaim" in scheduled(c, "w-0")[2], scheduled(c, "w-0")
    assert c.store.peek(PODS, "team-a/w-0")


def test_a_claim_write_the_api_server_refuses_binds_nothing_and_the_pods_say_why():
    c = dra_cluster(4)
    refusal = 'changing status.allocation or status.reservedFor requires resource="resourceclaims/binding"'

    def fault(verb, kind, what, writer):
        if verb == "patch" and kind == RESOURCECLAIMS:
            raise ApiError(422, "Invalid", refusal)
    c.store.fault = fault
    create_claiming(c, *[claiming(f"r-{i}", "r", 2, i) for i in range(2)])
    c.settle(2)
    assert not any(stored(c, f"r-{i}")["spec"].get("nodeName") for i in range(2))
    said = scheduled(c, "r-0")
    assert said and "allocating its pods' ResourceClaims failed" in said[2], said
    assert "resourceclaims/binding" in said[2], said


def test_a_claim_write_that_failed_once_does_not_keep_its_devices_and_the_gang_binds_after_its_backoff():
    c = dra_cluster(2)  # 16 GPUs: the gang needs every one
    failed: list[str] = []

    def fault(verb, kind, what, writer):
        if verb == "patch" and kind == RESOURCECLAIMS and not failed:
            failed.append(what)
            raise ApiError(500, "InternalError", "etcd hiccup")
    c.store.fault = fault
    create_claiming(c, claiming("g-0", "g", 2, 0), claiming("g-1", "g", 2, 1))
    c.cycle()
    assert failed, "the dangerous moment: a claim write failed after its devices were booked"
    c.settle(15)
    assert all(stored(c, f"g-{i}")["spec"].get("nodeName") for i in range(2)), scheduled(c, "g-0")
    assert not c.controller.room.gangs.claims.in_flight


def test_gangs_whose_claim_writes_always_fail_do_not_starve_a_gang_whose_writes_land():
    c = dra_cluster(2)
    refusal = "status.allocation.devices.results[0].request: must be the name of a request in the claim"

    def fault(verb, kind, what, writer):
        if verb == "patch" and kind == RESOURCECLAIMS and what.split("/")[1].startswith(("r1", "r2")):
            raise ApiError(422, "Invalid", refusal)
    c.store.fault = fault
    create_claiming(c, claiming("r1-0", "r1", 1, 0), claiming("r2-0", "r2", 1, 0))
    c.settle(3)
    create_claiming(c, claiming("v-0", "v", 1, 0))
    c.settle(20)
    assert stored(c, "v-0")["spec"].get("nodeName"), scheduled(c, "v-0")
    said = scheduled(c, "r1-0")
    assert said and "failed" in said[2] and "must be the name of a request" in said[2], said


def test_a_trainingjob_whose_claim_entry_does_not_read_is_invalid_and_nothing_else_stops():
    c = dra_cluster(2)
    c.submit(training_job("ok", 1))
    body = training_job("bad", 1, gpus=None)
    body["spec"]["resources"] = {}
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"resourceClaimTemplateName": "eight"}]  # no name
    c.submit(body)
    c.settle(3)
    assert c.status("ok").get("phase") == "Running"
    assert c.status("bad").get("phase") == "Invalid" and "every entry needs a name" in c.status("bad")["message"]


def test_a_trainingjob_submitted_before_its_claim_template_is_placed_once_the_template_exists():
    c = dra_cluster(4)
    body = training_job("late", 2, gpus=None)
    body["spec"]["resources"] = {}
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "later"}]
    c.submit(body)
    c.settle(2)
    assert "ResourceClaimTemplate team-a/later does not exist" in c.status("late")["message"]
    run(c.admin.create(RESOURCECLAIMTEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                                "metadata": {"name": "later", "namespace": "team-a"},
                                                "spec": {"spec": CLAIM_SPEC}}))
    c.settle(8)
    pods = [p for p in c.store.items(PODS) if p["metadata"]["name"].startswith("late-")]
    assert len(pods) == 2 and all(p["spec"]["schedulerName"] == "default-scheduler" for p in pods), \
        c.status("late")


def test_a_bound_gang_counts_the_gpus_its_claims_hold():
    c = dra_cluster(4)
    create_claiming(c, *[claiming(f"q-{i}", "q", 2, i) for i in range(2)])
    c.settle(3)
    [placed] = [r for r in c.controller.room.gangs.placed(c.state) if r.name == "q"]
    assert placed.total_units == 16, placed
    gpus = sum(len(devices(c, f"q-{i}")) for i in range(2))
    assert gpus == 16


def two_claiming_pods(gang: str) -> MemoryCluster:
    """A queue `a` of 32 GPUs for team-a, and gang `gang` of 2 pods claiming 8 GPUs each, created."""
    c = dra_cluster(4)
    queue = {"namespaces": ["team-a"], "resources": [{"flavor": "*", "guaranteed": 32}]}
    run(c.admin.create(GPUQUEUES, {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": "a"},
                                   "spec": queue}))
    create_claiming(c, *[claiming(f"{gang}-{i}", gang, 2, i) for i in range(2)])
    return c


def test_a_pod_gang_is_billed_for_the_gpus_its_claims_hold():
    """Found by review: a pod that asks for no nvidia.com/gpu and claims its GPUs through DRA was never billed (no
    GPUUsage record), nor counted in its queue's budget."""
    c = two_claiming_pods("b")
    c.settle(4)
    assert all(devices(c, f"b-{i}") for i in range(2)), "the dangerous moment: its claims hold devices"
    c.settle(1, seconds=600)
    for i in range(2):
        c.kubelet.finish(f"team-a/b-{i}", 0)
    c.settle(4)
    records = sorted((r["spec"]["pod"], r["spec"]["gpus"], round(r["spec"]["gpuSeconds"]))
                     for r in c.store.objects.get(GPUUSAGES, {}).values())
    assert [(pod_name, gpus) for pod_name, gpus, _ in records] == [("b-0", 8), ("b-1", 8)], records
    assert all(seconds >= 8 * 600 for _, _, seconds in records)


def test_a_waiting_gang_is_counted_anew_when_the_devices_its_claims_may_get_appear():
    """Found by review: a gang claiming H200s before any node published one was counted at 0 GPUs; once a node's
    driver published H200s it was placed past its queue's limit (16 of 8)."""
    c = dra_cluster(4)
    queue = {"namespaces": ["team-a"], "resources": [{"flavor": "*", "guaranteed": 8, "limit": 8}]}
    run(c.admin.create(GPUQUEUES, {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": "a"},
                                   "spec": queue}))
    h200 = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8,
                                                                  "selectors": [{"cel": {"expression": (
                                                                      "device.attributes['gpu.nvidia.com']"
                                                                      ".productName == 'NVIDIA H200'")}}]}}]}}
    run(c.admin.create(RESOURCECLAIMTEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                                "metadata": {"name": "h200", "namespace": "team-a"},
                                                "spec": {"spec": h200}}))
    bodies = [claiming(f"h-{i}", "h", 2, i) for i in range(2)]
    for body in bodies:
        body["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "h200"
    create_claiming(c, *bodies)
    c.settle(3)
    for node in c.store.items(NODES)[:2]:  # two nodes' drivers now publish H200s
        [old] = dra_slices.node_slices(node)
        run(c.admin.delete(RESOURCESLICES, old["metadata"]["name"]))
        for device in old["spec"]["devices"]:
            device["attributes"]["productName"] = {"string": "NVIDIA H200"}
        old["spec"]["pool"]["generation"] = 2
        run(c.admin.create(RESOURCESLICES, old))
    c.settle(4)
    bound = [p for p in c.store.items(PODS) if p["metadata"]["name"].startswith("h-") and p["spec"].get("nodeName")]
    assert not bound, "16 GPUs do not fit in a queue of 8"
    assert "limit" in scheduled(c, "h-0")[2], scheduled(c, "h-0")


def test_pods_whose_claims_were_released_while_no_operator_ran_are_billed_by_their_templates():
    """Found by review: what a pod's claims held was kept in memory only; pods that ended, and whose claims were
    released, while the operator was down were billed 0 GPUs by the next one."""
    c = two_claiming_pods("r")
    c.settle(4)
    assert all(devices(c, f"r-{i}") for i in range(2))
    c.settle(1, seconds=600)
    c.leading = False  # the operator stops; meanwhile the pods end and their claims are released
    for i in range(2):
        c.kubelet.finish(f"team-a/r-{i}", 0)
        run(c.admin.patch_status(RESOURCECLAIMS, f"r-{i}-gpus", {"status": {"allocation": None, "reservedFor": None}},
                                 "team-a"))
    c.leading = True
    c.start("op-2")
    c.settle(4)
    records = sorted((r["spec"]["pod"], r["spec"]["gpus"]) for r in c.store.objects.get(GPUUSAGES, {}).values())
    assert records == [("r-0", 8), ("r-1", 8)], records
