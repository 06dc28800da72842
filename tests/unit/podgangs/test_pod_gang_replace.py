"""A running pod gang that loses a node, on the in-memory API: the pod its owner makes again (a Job's, a JobSet's) is
bound onto a node of the gang's placed domain, as a TrainingJob's lost replica is replaced (core/replace.choose),
before any waiting job is placed; the surviving pods are untouched; with no such node it waits, saying why."""

from __future__ import annotations

import pytest

from superpod.api.podgang import TOPOLOGY
from superpod.k8s.api import NODES, PODS
from tests.unit.memory_cluster import MemoryCluster
from tests.unit.podgangs.test_pod_gangs import create, leaf_of, pod, scheduled, stored


def _running_gang(c: MemoryCluster, **notes: str) -> dict[str, dict]:
    """Gang `g`: four 8-GPU pods requiring one leaf, bound and running; its pods by name."""
    pods = [pod(f"g-{i}", "g", 4, index=i, required="leaf") for i in range(4)]
    for body in pods:
        body["metadata"]["annotations"].update(notes)
    create(c, *pods)
    c.settle(3)
    bound = {f"g-{i}": stored(c, f"g-{i}") for i in range(4)}
    assert all(p["spec"].get("nodeName") for p in bound.values())
    assert len({leaf_of(c, p["spec"]["nodeName"]) for p in bound.values()}) == 1
    return bound


def _lose(c: MemoryCluster, name: str, again: str, first: dict | None = None) -> str:
    """The node of pod `name` is deleted; its owner deletes the pod and makes it again as `again` (just after the
    pod `first`, when given)."""
    body = stored(c, name)
    node = body["spec"]["nodeName"]
    c.store.delete_now(NODES, node)
    c.store.delete_now(PODS, f"team-a/{name}")
    c.settle(1)
    index = int(body["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    made = pod(again, "g", 4, index=index, required="leaf")
    made["metadata"]["annotations"].update({k: v for k, v in body["metadata"]["annotations"].items()
                                            if k.startswith("superpod.dev/slice")})
    create(c, *([first] if first else []), made)
    return node


@pytest.mark.parametrize("again", ["g-1", "g-1-x7k2p"])  # an Indexed Job's pod name, or a new one
def test_the_pod_an_owner_makes_again_is_bound_in_the_gangs_leaf_and_the_others_run_on(again):
    c = MemoryCluster(nodes=10, nodes_per_unit=5)
    before = _running_gang(c)
    leaf = leaf_of(c, before["g-0"]["spec"]["nodeName"])
    lost = _lose(c, "g-1", again)
    c.settle(3)
    node = stored(c, again)["spec"].get("nodeName")
    assert node and node != lost and leaf_of(c, node) == leaf, (node, scheduled(c, again))
    for name in ("g-0", "g-2", "g-3"):
        now = stored(c, name)
        assert now["metadata"]["uid"] == before[name]["metadata"]["uid"], "the others run on untouched"
        assert now["spec"]["nodeName"] == before[name]["spec"]["nodeName"]


def test_the_replacement_is_bound_before_a_job_that_waits_ahead_of_it_takes_the_leafs_node():
    c = MemoryCluster(nodes=10, nodes_per_unit=5)
    before = _running_gang(c)
    leaf = leaf_of(c, before["g-0"]["spec"]["nodeName"])
    used = {p["spec"]["nodeName"] for p in before.values()}
    free = next(n for n in sorted(c.store.objects[NODES]) if leaf_of(c, n) == leaf and n not in used)
    blocker = pod("blocker", gpus=8)  # older, of the same priority: ahead of the pod made again in the line
    blocker["spec"]["nodeSelector"] = {"kubernetes.io/hostname": free}
    _lose(c, "g-1", "g-1-x7k2p", first=blocker)
    c.settle(3)
    assert stored(c, "g-1-x7k2p")["spec"].get("nodeName") == free, scheduled(c, "g-1-x7k2p")
    assert stored(c, "blocker")["spec"].get("nodeName") is None


def test_without_a_node_in_the_leaf_the_replacement_waits_saying_why_and_the_others_run_on():
    c = MemoryCluster(nodes=8, nodes_per_unit=4)  # the gang fills its leaf
    before = _running_gang(c)
    _lose(c, "g-1", "g-1-x7k2p")
    c.settle(3)
    assert stored(c, "g-1-x7k2p")["spec"].get("nodeName") is None, "not in another leaf"
    said = scheduled(c, "g-1-x7k2p")
    assert said[0] == "False" and "no node" in said[2] and "leaf" in said[2], said
    for name in ("g-0", "g-2", "g-3"):
        assert stored(c, name)["metadata"]["uid"] == before[name]["metadata"]["uid"]


def test_a_slice_member_made_again_goes_where_the_rest_of_its_slice_is():
    c = MemoryCluster(nodes=16, nodes_per_unit=8)  # one spine, two leaves of 8
    fillers = [pod(f"filler-{i}", gpus=8) for i in range(8)]
    for body in fillers:
        body["spec"]["nodeSelector"] = {"superpod.dev/leaf": "su-1"}
    create(c, *fillers)
    c.settle(2)
    notes = {TOPOLOGY["required"]: "spine", "superpod.dev/slice-size": "2", "superpod.dev/slice-required": "leaf"}
    _running_gang(c, **notes)  # in su-2: su-1 is full
    c.store.delete_now(PODS, "team-a/filler-0")  # su-1 now has one node free, su-2 four
    _lose(c, "g-1", "g-1-x7k2p")
    c.settle(3)
    node = stored(c, "g-1-x7k2p")["spec"].get("nodeName")
    assert node and leaf_of(c, node) == "su-2", (node, scheduled(c, "g-1-x7k2p"))


def test_without_a_required_level_the_replacement_still_goes_near_the_others_first():
    c = MemoryCluster(nodes=10, nodes_per_unit=5)
    pods = [pod(f"g-{i}", "g", 4, index=i) for i in range(4)]
    create(c, *pods)
    c.settle(3)
    leaf = leaf_of(c, stored(c, "g-0")["spec"]["nodeName"])
    other = "su-2" if leaf == "su-1" else "su-1"
    fillers = [pod(f"filler-{i}", gpus=8) for i in range(4)]  # the other leaf keeps one node free
    for body in fillers:
        body["spec"]["nodeSelector"] = {"superpod.dev/leaf": other}
    create(c, *fillers)
    c.settle(2)
    body = stored(c, "g-1")
    c.store.delete_now(NODES, body["spec"]["nodeName"])
    c.store.delete_now(PODS, "team-a/g-1")
    c.settle(1)
    create(c, pod("g-1-x7k2p", "g", 4, index=1))
    c.settle(3)
    node = stored(c, "g-1-x7k2p")["spec"].get("nodeName")
    assert node and leaf_of(c, node) == leaf, (node, scheduled(c, "g-1-x7k2p"))
