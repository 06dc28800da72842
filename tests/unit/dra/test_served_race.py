"""Found by review: kube-scheduler's extended-resource claim given a device an operator-allocated claim holds
(the two-allocator race that held_claims.fault / Controller._devices_taken_twice exist for) is never acted on."""

from __future__ import annotations

from superpod.k8s.api import PODS, RESOURCECLAIMTEMPLATES
from tests.unit.dra.test_claims_past_admission import template
from tests.unit.dra.test_one_pool import FOUR
from tests.unit.dra.test_served_gpus import held, kube_scheduler_binds, served_cluster
from tests.unit.memory_cluster import run, training_job
from tests.unit.podgangs.test_pod_gang_claims import claiming, create_claiming
from tests.unit.podgangs.test_pod_gangs import stored


def test_a_served_replica_whose_extended_claim_got_a_device_an_earlier_claim_holds_is_stopped():
    c = served_cluster()
    c.submit(training_job("classic", 1, gpus=4))
    c.settle(3)
    assert not c.pods("classic")[0]["spec"].get("nodeName")  # pinned, kube-scheduler not done yet
    gang = claiming("d-0", "d", 1, 0)
    gang["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "four"}]
    run(c.admin.create(RESOURCECLAIMTEMPLATES, template("four", FOUR)))
    create_claiming(c, gang)
    c.settle(4)
    assert stored(c, "d-0")["spec"].get("nodeName") == "dgx-su01-n01"
    gang_devices = set(held(c, "d-0-gpus"))
    c.tick(5)
    # kube-scheduler, from a view that has not seen the operator's allocation yet, gives the replica the same GPUs
    first = min(int(d.split("-")[1]) for _, d in gang_devices)
    kube_scheduler_binds(c, "classic", first_device=first)
    ext = set(held(c, "classic-a1-0-extended-resources-x"))
    assert ext & gang_devices, "the dangerous moment: one GPU in two claims"
    c.settle(4)
    reasons = [reason for reason, _ in c.events("classic")]
    gang_pod = c.store.peek(PODS, "team-a/d-0")
    gang_evicted = gang_pod is None or gang_pod["metadata"].get("deletionTimestamp")
    assert "DeviceTakenTwice" in reasons and not gang_evicted, (
        f"two pods share GPUs {sorted(ext & gang_devices)} and nothing acts: classic events {reasons}, "
        f"phase {c.decided('classic')['phase']}, gang bound to {stored(c, 'd-0')['spec'].get('nodeName')}")
