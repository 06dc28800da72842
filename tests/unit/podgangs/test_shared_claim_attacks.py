"""A tenant's attacks on the ResourceClaims its gangs share by name (found by a hostile review): counted less than
held once the other sharers leave, shared GPUs unbilled, a refused reservation written every cycle, a claim's
replacement hidden from its users by giving it a Pod owner. Each failed before its fix."""

from __future__ import annotations

import contextlib

from superpod.k8s.api import GPUQUEUES, RESOURCECLAIMS
from tests.unit.memory_cluster import run, training_job
from tests.unit.podgangs.test_pod_gang_claims import CLAIM_SPEC, dra_cluster
from tests.unit.podgangs.test_pod_gangs import create, pod, stored
from tests.unit.queues.test_controller_queues import gpu_queue, phase


def shared_claim(c, name="x", spec=CLAIM_SPEC):
    run(c.admin.create(RESOURCECLAIMS, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                        "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}))


def sharing_pod(name, gang, size, index, claim="x"):
    body = pod(name, gang, size, gpus=0, index=index)
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return body


def claim_status(c, name="x"):
    return c.store.peek(RESOURCECLAIMS, f"team-a/{name}").get("status") or {}


def four_sharing(queue: dict):
    """A cluster with GPUQueue `queue` and gang `s` of 4 pods sharing an 8-GPU claim `x`, settled; and the claim's
    status then."""
    c = dra_cluster(4)
    run(c.admin.create(GPUQUEUES, queue))
    shared_claim(c)
    create(c, *[sharing_pod(f"s-{i}", "s", 4, i) for i in range(4)])
    c.settle(4)
    return c, claim_status(c)


def leave_s0_alone(c, status: dict) -> None:
    """Pods s-1..s-3 end, and their reservations of `x` are dropped (kube-controller-manager's cleanup)."""
    for i in (1, 2, 3):
        c.kubelet.finish(f"team-a/s-{i}", 0)
    c.settle(2)
    keep = [r for r in status["reservedFor"] if r["name"] == "s-0"]
    run(c.admin.patch_status(RESOURCECLAIMS, "x", {"status": {"reservedFor": keep}}, "team-a"))


def test_a_gang_whose_other_sharers_ended_is_counted_at_what_the_claim_holds():
    """1 pod keeps an 8-GPU shared claim after its 3 co-sharers exited; kube-controller-manager drops their
    reservations. The queue must count 8, not the stale 8/4."""
    c, status = four_sharing(gpu_queue("a", 8, limit=8))
    assert all(stored(c, f"s-{i}")["spec"].get("nodeName") for i in range(4))
    assert len(status["allocation"]["devices"]["results"]) == 8 and len(status["reservedFor"]) == 4
    leave_s0_alone(c, status)
    c.settle(3)
    [placed] = [r for r in c.controller.room.gangs.placed(c.state) if r.name == "s"]
    assert claim_status(c)["allocation"], "s-0 still holds all 8 GPUs"
    assert placed.total_units == 8, f"counted {placed.total_units} GPUs in queue a while holding 8"


def test_a_queue_at_its_limit_through_a_shared_claim_admits_no_more():
    c, status = four_sharing(gpu_queue("a", 8, limit=8))
    leave_s0_alone(c, status)
    c.settle(3)
    c.submit(training_job("after", 1, 6))  # 6 more GPUs in queue a (limit 8), whose 8 are held by s-0's claim
    c.settle(3)
    assert phase(c, "a", "after") == "Queued", (
        f"{phase(c, 'a', 'after')}: admitted past its queue's limit: 14 GPUs held under a limit of 8")


def _shared_job_view():
    """A TrainingJob whose replicas share one 8-GPU ResourceClaim by name (no template): the queue counts 8 while
    it waits, but its usage (JobView.units, used by metering/queues budgets/GPUUsage records) is 0 GPUs, and
    status.admitted.claimedGpus does not keep the 8 across a restart."""
    from superpod.api.claims import Shared
    from superpod.controller.jobs import _view
    from superpod.core.dra.model import read_claim_spec
    from superpod.core.gang_key import GangKey

    class Source:
        def template(self, namespace, name):
            raise LookupError(name)

        def shared(self, namespace, name):
            return Shared(read_claim_spec(CLAIM_SPEC, name), None)

        def worth(self, request):
            return 1.0

    job = {"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": "llm", "namespace": "team-a", "uid": "u1",
                        "creationTimestamp": "2026-12-05T00:00:00Z"},
           "spec": {"replicas": 2, "resources": {}, "template": {"spec": {
               "resourceClaims": [{"name": "gpus", "resourceClaimName": "x"}],
               "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}]}}}}
    return _view(GangKey("team-a", "llm"), job, None, Source())


def test_a_trainingjob_sharing_a_claim_bills_its_gpus():
    view = _shared_job_view()
    assert view.request.total_units == 8, "the queue counts the shared claim"
    assert view.gang_units == 8, f"billed {view.gang_units} GPUs (units {view.units}/replica) for 8 held"


def test_a_placed_trainingjob_sharing_a_claim_keeps_its_count_in_status_admitted():
    view = _shared_job_view()
    assert view.admission().get("claimedGpus") or view.admission().get("sharedGpus"), \
        f"status.admitted keeps nothing of the 8 shared GPUs: {view.admission()}"


def test_a_reservation_write_refused_every_time_is_backed_off():
    """A gang sharing a claim allocated already (its only claim): its write is reservedFor only, never in
    Claims.in_flight, so its failure (e.g. reservedFor over 256 entries: 422) sets no backoff; the gang is placed
    and written again every cycle, forever."""
    from superpod.k8s.api import NODES, ApiError
    c = dra_cluster(2)
    shared_claim(c)
    node = c.store.items(NODES)[0]["metadata"]["name"]
    run(c.admin.patch_status(RESOURCECLAIMS, "x", {"status": {
        "allocation": {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": node,
                                                "device": f"gpu-{i}"} for i in range(8)]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": f"other-{i}", "uid": f"other-{i}"} for i in range(255)]}},
        "team-a"))
    attempts = []

    def fault(verb, kind, what, writer):
        if verb == "patch" and kind == RESOURCECLAIMS and writer != "admin":
            attempts.append(what)
            raise ApiError(422, "Invalid", "status.reservedFor: Too many: 257: must have at most 256 items")
    c.store.fault = fault
    create(c, *[sharing_pod(f"h-{i}", "h", 2, i) for i in range(2)])
    c.settle(30)
    assert len(attempts) <= 4, f"{len(attempts)} refused writes in 30 cycles: no backoff"


def test_a_claim_pods_use_by_name_is_read_again_whatever_owner_a_tenant_gives_it():
    """state/dra.py _claim_changed: `by_name` is judged by ownerReferences, which the tenant writes. A claim used
    by name but given a Pod owner (any idle pod of the tenant) is replaced by one asking 8x more, and no reader
    reads it again: a waiting gang/TrainingJob keeps counting the old spec."""
    from tests.unit.dra.test_shared_claims import claim_object, nodes, store
    dra = store(nodes(1))
    small = claim_object()
    small["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "idle", "uid": "idle-uid"}]
    dra.kind_store("resourceclaims").store("ns/shared", small, 0)
    dra.shared("ns", "shared")  # (a gang that uses it by name read it)
    edits = dra.reading_edits()
    dra.kind_store("resourceclaims").forget("ns/shared", "claim-uid", small, 0)
    big = {**small, "metadata": {**small["metadata"], "uid": "claim-uid-2"},
           "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                           "count": 8}}]}}}
    dra.kind_store("resourceclaims").store("ns/shared", big, 0)
    assert dra.reading_edits() != edits, "replaced by a claim of 8 GPUs: its users are not told"


def differing(name, gang, size, index, cpu):
    body = sharing_pod(name, gang, size, index)
    body["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{cpu}m"}
    body["spec"]["containers"][0]["resources"]["limits"] = {"cpu": f"{cpu}m"}
    return body


def test_a_bound_gang_whose_members_differ_counts_its_shared_claim_in_full():
    """4 pods, each a different cpu request (1 identical member + 3 `others`), share an 8-GPU claim.
    Waiting it counts 8; bound, _as_admitted sets claimed_gpus = held/len(bound) = 2 per *identical* member and
    total_units multiplies by replicas (1): 2."""
    c = dra_cluster(4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8, limit=8)))
    shared_claim(c)
    create(c, *[differing(f"s-{i}", "s", 4, i, 100 + i) for i in range(4)])
    c.settle(4)
    assert all(stored(c, f"s-{i}")["spec"].get("nodeName") for i in range(4))
    assert len(claim_status(c)["allocation"]["devices"]["results"]) == 8
    [placed] = [r for r in c.controller.room.gangs.placed(c.state) if r.name == "s"]
    assert placed.total_units == 8, f"bound gang with others counted {placed.total_units} GPUs while holding 8"


def test_a_queue_full_through_a_differing_gang_shared_claim_admits_no_more():
    c = dra_cluster(4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8, limit=8)))
    shared_claim(c)
    create(c, *[differing(f"s-{i}", "s", 4, i, 100 + i) for i in range(4)])
    c.settle(4)
    c.submit(training_job("after", 1, 6))
    c.settle(3)
    assert phase(c, "a", "after") == "Queued", f"{phase(c, 'a', 'after')}: 14 GPUs held under a limit of 8"


def test_named_forgets_claims_no_pod_names_any_more():
    """DraStore.named only grew: every name any pod ever gave (existing or not) stayed for the operator's life."""
    from tests.unit.dra.test_shared_claims import nodes, store
    dra = store(nodes(1))
    for i in range(10000):
        with contextlib.suppress(LookupError):
            dra.shared("ns", f"junk-{i}")  # pods naming claims that never exist, then deleted
    assert len(dra.named) < 10000, f"{len(dra.named)} names kept, none used by any pod"


def test_template_claims_of_differing_members_are_counted():
    """Found by the second review, older than shared claims: the claims of the members that differ (every member of a
    gang claims alike) were left out of what the gang counts."""
    from superpod.core.request import make_request
    r = make_request("ns", "g", 1, {"cpu": 100}, claimed_gpus=8, others=((("cpu", 200),),))
    assert r.total_units == 16, f"2 pods each claiming 8 GPUs counted {r.total_units}"


def test_a_pod_left_alone_on_a_shared_claim_is_billed_what_it_holds():
    """Found by the first review: a running pod's bill kept its share of a shared claim as last seen before a change
    of what a claim holds, so once the other sharers left (their reservations dropped) it ran 8 GPUs billed at 2 (its
    queue's budget counts the running bills)."""
    from superpod.k8s.api import GPUUSAGES
    c, status = four_sharing(gpu_queue("a", 32))
    assert len(status["reservedFor"]) == 4, "the dangerous moment: four pods share 8 GPUs"
    leave_s0_alone(c, status)
    c.settle(2)
    running = c.controller.bills.live["team-a/s-0"]
    assert running.claimed == 8, f"s-0 holds the claim's 8 GPUs alone, billed {running.claimed} while it runs"
    c.kubelet.finish("team-a/s-0", 0)
    c.settle(4)
    records = {r["spec"]["pod"]: r["spec"]["gpus"] for r in c.store.objects.get(GPUUSAGES, {}).values()}
    assert records.get("s-0") == 8, records
