"""TrainingJobs with spec.computeDomain on the in-memory API: the operator asks for the job's ComputeDomain, the job
waits in words until the driver made the domain's channel template, then every replica claims its IMEX channel and
the gang is placed inside one NVLink clique."""

from __future__ import annotations

from superpod.api.compute_domain import CHANNEL_CLAIM, channel_template
from superpod.core.gang_key import GangKey
from superpod.core.request import JobRequest
from superpod.hardware import dra_slices
from superpod.k8s.api import (
    COMPUTEDOMAINS,
    DEVICECLASSES,
    GPUQUEUES,
    NODES,
    PODS,
    RESOURCECLAIMTEMPLATES,
    RESOURCESLICES,
    TRAININGJOBS,
)
from tests.unit.memory_cluster import MemoryCluster, run, training_job

CLIQUE = "nvidia.com/gpu.clique"


TRAY = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}


def gb200(trays: int = 6, trays_per_rack: int = 3) -> MemoryCluster:
    """Racks of GB200 trays (4 GPUs each, one clique a rack) that publish their slices, the driver's classes, and a
    claim template `tray` of a tray's 4 GPUs."""
    c = MemoryCluster("gb200-nvl72", trays, trays_per_rack=trays_per_rack)
    run(c.admin.create(RESOURCECLAIMTEMPLATES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                                                "metadata": {"name": "tray", "namespace": "team-a"},
                                                "spec": {"spec": TRAY}}))
    for body in dra_slices.device_classes():
        run(c.admin.create(DEVICECLASSES, body))
    for node in c.store.items(NODES):
        for body in dra_slices.node_slices(node):
            run(c.admin.create(RESOURCESLICES, body))
    return c


def nvl_job(name: str, replicas: int, **spec) -> dict:
    return training_job(name, replicas, gpus=4, topology={"required": "nvlink"}, computeDomain={}, **spec)


def claiming_nvl_job(name: str, replicas: int) -> dict:
    """A ComputeDomain job whose replicas claim a tray's GPUs through DRA."""
    body = nvl_job(name, replicas)
    body["spec"]["resources"] = {}
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "tray"}]
    return body


def play_the_driver(c: MemoryCluster, name: str) -> None:
    """What the driver's ComputeDomain controller does with the job's domain: its channel template."""
    domain = c.store.peek(COMPUTEDOMAINS, f"team-a/{name}")
    run(c.admin.create(RESOURCECLAIMTEMPLATES, dra_slices.compute_domain_claim_template(
        "team-a", domain["spec"]["channel"]["resourceClaimTemplate"]["name"], domain["metadata"]["uid"])))


def domain_creates(c: MemoryCluster) -> int:
    return sum(1 for w in c.store.writes if w.verb == "create" and w.kind == COMPUTEDOMAINS.plural)


def test_the_job_asks_for_its_compute_domain_waits_for_its_channel_and_is_placed_in_one_clique():
    c = gb200()
    c.submit(nvl_job("nvl", 3))
    c.settle(5)
    domain = c.store.peek(COMPUTEDOMAINS, "team-a/nvl")
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == channel_template(c.job("nvl"))
    assert [o["uid"] for o in domain["metadata"]["ownerReferences"]] == [c.job("nvl")["metadata"]["uid"]]
    assert domain_creates(c) == 1, "asked once, not every cycle"
    assert c.status("nvl").get("phase") != "Invalid"
    assert "waiting for ComputeDomain team-a/nvl" in c.status("nvl")["message"]
    assert not c.pods("nvl")

    play_the_driver(c, "nvl")
    c.settle(8)
    pods = c.pods("nvl")
    assert len(pods) == 3, c.status("nvl")
    cliques = {n["metadata"]["name"]: n["metadata"]["labels"][CLIQUE] for n in c.store.items(NODES)}
    nodes = [p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchFields"][0]["values"][0] for p in pods]
    assert len(set(nodes)) == 3 and len({cliques[n] for n in nodes}) == 1, nodes
    for p in pods:
        assert {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template(c.job("nvl"))} in \
            p["spec"]["resourceClaims"]
        assert p["spec"]["containers"][0]["resources"]["claims"] == [{"name": CHANNEL_CLAIM}]
        assert p["spec"]["schedulerName"] == "default-scheduler" and "nodeName" not in p["spec"]
    assert domain_creates(c) == 1


def test_a_compute_domain_is_asked_for_again_while_its_channel_is_missing():
    c = gb200()
    c.submit(nvl_job("nvl", 2))
    c.settle(5)
    run(c.admin.delete(COMPUTEDOMAINS, "nvl", "team-a"))  # say, the kind was not served yet
    c.settle(40)
    assert c.store.peek(COMPUTEDOMAINS, "team-a/nvl") is not None and domain_creates(c) == 2


def test_the_gang_waits_when_no_clique_holds_it_whole_even_though_the_leaf_does():
    c = gb200(trays=6, trays_per_rack=3)
    c.submit(nvl_job("big", 4))
    c.settle(3)
    play_the_driver(c, "big")
    c.settle(5)
    assert not c.pods("big")
    assert "inside one nvlink" in c.status("big")["message"], c.status("big")


def test_a_template_entry_named_as_the_channel_claim_is_invalid_and_a_domain_needs_a_required_level():
    c = gb200()
    body = nvl_job("taken", 1)
    body["spec"]["template"]["spec"]["resourceClaims"] = [{"name": CHANNEL_CLAIM, "resourceClaimTemplateName": "x"}]
    c.submit(body)
    loose = training_job("loose", 2, gpus=4, computeDomain={})
    c.submit(loose)
    c.submit(training_job("plain", 1, gpus=4))
    c.settle(4)
    assert "the ComputeDomain's channel claim" in c.status("taken")["message"]
    assert c.status("loose")["phase"] == "Invalid" and "needs topology.required" in c.status("loose")["message"]
    assert c.status("plain")["phase"] == "Running"
    assert not any(p for p in c.store.items(PODS) if p["metadata"]["name"].startswith(("taken", "loose")))


def placed_claiming_job(c: MemoryCluster, queue_limit: int = 8) -> None:
    """A queue of `queue_limit` GPUs for team-a; job nvl (2 trays, 8 claimed GPUs) placed in it."""
    run(c.admin.create(GPUQUEUES, {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": "a"},
                                   "spec": {"namespaces": ["team-a"], "resources": [
                                       {"flavor": "*", "guaranteed": queue_limit, "limit": queue_limit}]}}))
    c.submit(claiming_nvl_job("nvl", 2))
    c.settle(3)
    play_the_driver(c, "nvl")
    c.settle(6)
    assert c.status("nvl")["phase"] in ("Starting", "Running") and c.status("nvl")["admitted"]["claimedGpus"] == 4


def test_a_placed_job_keeps_counting_its_claimed_gpus_when_its_channel_template_goes():
    """Found by review: a tenant deleted its running job's channel template (or ComputeDomain) and touched the job's
    labels: the job's claims no longer read, it counted 0 GPUs, and its queue let a job past its limit."""
    c = gb200()
    placed_claiming_job(c)
    template = channel_template(c.job("nvl"))
    run(c.admin.delete(RESOURCECLAIMTEMPLATES, template, "team-a"))
    run(c.admin.patch(TRAININGJOBS, "nvl", {"metadata": {"labels": {"touched": "yes"}}}, "team-a"))
    c.submit(training_job("plain", 1, gpus=4))
    c.settle(4)
    view = c.controller.reader.by_key[GangKey("team-a", "nvl")]
    assert isinstance(view.request, JobRequest) and view.units == 4, view.request
    assert c.status("plain").get("phase") not in ("Starting", "Running"), "the queue is full"

    c.start("op-2")  # a new operator: no earlier reading of the job to keep the claims from
    c.settle(4)
    view = c.controller.reader.by_key[GangKey("team-a", "nvl")]
    assert isinstance(view.request, JobRequest) and view.units == 4, "counted as admitted"
    assert c.status("plain").get("phase") not in ("Starting", "Running")


def test_a_job_made_again_under_its_name_gets_its_own_domain_not_the_template_left_behind():
    c = gb200()
    c.submit(nvl_job("nvl", 2))
    c.settle(3)
    play_the_driver(c, "nvl")
    c.settle(6)
    old = channel_template(c.job("nvl"))
    run(c.admin.delete(TRAININGJOBS, "nvl", "team-a"))
    run(c.admin.delete(COMPUTEDOMAINS, "nvl", "team-a"))  # (garbage collection; its template stays a while)
    c.settle(3)
    c.submit(nvl_job("nvl", 2))
    c.settle(3)
    assert channel_template(c.job("nvl")) != old and c.store.peek(RESOURCECLAIMTEMPLATES, f"team-a/{old}")
    assert c.status("nvl")["reason"] == "ComputeDomainPending" and domain_creates(c) == 2


def test_a_domain_required_wider_than_a_clique_is_invalid_on_this_cluster():
    """Found by review: topology.required at any level was accepted, so a ComputeDomain's gang could span cliques."""
    c = gb200()
    c.submit(training_job("wide", 2, gpus=4, topology={"required": "leaf"}, computeDomain={}))
    c.submit(nvl_job("tight", 1))
    c.settle(4)
    play_the_driver(c, "wide")
    play_the_driver(c, "tight")
    c.settle(6)
    assert c.status("wide")["phase"] == "Invalid" and "wider than an NVLink clique: require nvlink" in \
        c.status("wide")["message"]
    assert len(c.pods("tight")) == 1


def test_the_device_book_is_not_built_again_each_cycle_while_kube_scheduler_has_yet_to_bind_a_placed_job():
    """Found on the way: a placed job's replicas waiting for kube-scheduler were booked on a new book every cycle,
    and a new book makes every waiting job be searched again."""
    c = gb200()
    placed_claiming_job(c)
    c.submit(training_job("waits", 9, gpus=4))  # more trays than there are: it waits, searched when devices change
    c.settle(2)
    builds, build = [], c.state.dra.book

    def counted(*args, **kwargs):
        builds.append(1)
        return build(*args, **kwargs)
    c.state.dra.book = counted
    c.settle(5)
    assert not any(p["spec"].get("nodeName") for p in c.pods("nvl")), "the dangerous moment: still not bound"
    assert len(builds) == 0, f"built {len(builds)} times in 5 idle cycles"
