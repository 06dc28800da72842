"""--spares: per domain of a level, wholly free nodes that ordinary placement leaves free and only a replacement
(spec.nodeFailure Replace) takes, before any other free node of the gang's domain."""

from __future__ import annotations

import argparse

import pytest

from superpod.controller.judge import Settings
from superpod.controller.operator import spares as spares_flag
from superpod.core import spares
from superpod.core.model import Level, Node, Pod, Snapshot, Topology
from superpod.core.placement import Placement
from superpod.core.request import GPU, JobRequest
from superpod.k8s.api import NODES, TRAININGJOBS
from tests.unit.dra.test_dra_placement import cluster as dra_cluster
from tests.unit.dra.test_dra_placement import gang
from tests.unit.dra.test_dra_queues import claiming, dra_only
from tests.unit.memory_cluster import MemoryCluster, training_job

LEAF = {"required": "leaf"}
SPARES = Settings(not_ready_grace=300, spares=("leaf", 1))


def _cluster(settings: Settings = SPARES) -> MemoryCluster:
    """Two leaves of four 8-GPU nodes; gang `r`: 2 replicas in leaf su-1."""
    c = MemoryCluster(nodes=8, nodes_per_unit=4, settings=settings)
    c.submit(training_job("r", 2, 8, topology=LEAF, nodeFailure="Replace"))
    c.settle(3)
    assert c.status("r")["phase"] == "Running" and c.status("r")["domain"] == "leaf su-1"
    return c


def _leaves(c: MemoryCluster) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, node in sorted(c.store.objects[NODES].items()):
        out.setdefault(node["metadata"]["labels"]["superpod.dev/leaf"], []).append(name)
    return out


def _nodes(c: MemoryCluster, job: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in c.pods(job)}


def test_a_spare_is_kept_from_waiting_jobs_and_taken_first_by_a_replacement():
    c = _cluster()
    su1, su2 = _leaves(c).values()
    c.submit(training_job("big", 3, 8, topology=LEAF))  # leaf su-2 but its spare
    c.submit(training_job("one", 1, 8))  # su-1's third node
    c.submit(training_job("two", 1, 8))  # would fit only on a spare
    c.settle(3)
    assert sorted(_nodes(c, "big").values()) == su2[:3] and list(_nodes(c, "one").values()) == [su1[2]]
    st = c.status("two")
    assert (st["phase"], st["reason"]) == ("Queued", "NoRoom") and not st.get("placement"), st
    assert st["message"].endswith("; 2 nodes kept spare for replacing lost nodes and for jobs whose "
                                  "maxRuntimeSeconds is at most 256"), st["message"]
    lost = _nodes(c, "r")["r-a1-1"]
    c.store.delete_now(NODES, lost)
    c.settle(3)
    assert _nodes(c, "r")["r-a1-1"] == su1[3], "the leaf's spare replaces the lost node"
    assert c.status("r")["replacements"] == 1 and c.status("two")["phase"] == "Queued", "su-2's spare stays free"


def test_a_spare_comes_before_a_free_node_of_the_leaf_and_is_kept_again():
    c = _cluster()
    su1 = _leaves(c)["su-1"]
    assert sorted(_nodes(c, "r").values()) == su1[:2]
    c.store.delete_now(NODES, su1[0])
    c.settle(3)
    assert _nodes(c, "r")["r-a1-0"] == su1[3], "the spare, not the free su-1 node before it"
    c.submit(training_job("one", 1, 8))
    c.settle(3)
    assert list(_nodes(c, "one").values()) == [_leaves(c)["su-2"][0]], "su-1's last free node is its spare now"


def test_a_short_job_runs_on_a_spare_no_other_node_offers_and_is_gone_before_a_replacement_gives_up():
    """A job whose limit is at most --spare-runtime (default: the replace deadline) may take a spare when no other
    node fits it, a longer one may not; a replacement that finds its leaf's spare lent waits for it, and gets it
    when the short job's limit ends it, before its own deadline."""
    c = _cluster()
    su1, su2 = _leaves(c).values()
    c.submit(training_job("big", 3, 8, topology=LEAF))  # su-2 but its spare
    c.submit(training_job("one", 1, 8))  # su-1's third node
    c.settle(3)
    c.submit(training_job("long", 1, 8, maxRuntimeSeconds=300))
    c.submit(training_job("short", 1, 8, maxRuntimeSeconds=240))
    c.settle(3)
    assert (c.status("long")["phase"], c.status("long")["reason"]) == ("Queued", "NoRoom"), c.status("long")
    assert c.status("short")["phase"] == "Running" and list(_nodes(c, "short").values()) == [su1[3]]
    c.settle(3)
    assert c.status("long")["phase"] == "Queued", "the other leaf's spare stays booked"
    c.store.delete_now(NODES, _nodes(c, "r")["r-a1-1"])
    c.settle(3)
    st = c.status("r")
    assert st.get("replacementDeadline") and st["phase"] == "Running" and not st.get("replacements"), st
    c.settle(300, seconds=1.0)
    short = c.status("short")
    assert (short["phase"], short["reason"]) == ("Failed", "MaxRuntimeExceeded"), short
    st = c.status("r")
    assert st["replacements"] == 1 and _nodes(c, "r")["r-a1-1"] == su1[3], st
    assert st["attempt"] == 1 and c.status("long")["phase"] == "Queued"


def test_lend_books_again_the_spares_a_placement_leaves_and_keeps_what_did_not_fit():
    topo = Topology((Level("leaf", "superpod.dev/leaf"),))
    nodes = [Node(f"n{i}", {"superpod.dev/leaf": "a" if i < 3 else "b"}, {GPU: 8}) for i in range(5)]
    snap = Snapshot(nodes, topo, [])
    spares.keep(snap, 1, 1)
    snap.spare_runtime = 300.0
    job = lambda limit: JobRequest("team-a", "s", 1, ((GPU, 8),), limit=limit)  # noqa: E731
    assert spares.lends_to(snap, job(300.0)) and not spares.lends_to(snap, job(301.0))
    assert not spares.lends_to(snap, job(None)), "a job with no limit may run for ever"
    unfit = snap.unfit = {"shape": "did not fit"}
    taken = Placement(job(300.0).key, {"n4": [0]}, (1, 1), ("b",))
    placement = spares.lend(snap, lambda: taken)
    assert placement.assignments == {"n4": [0]} and sorted(snap.spares) == ["n2"] and snap.unfit is unfit
    assert spares.lend(snap, lambda: None) is None and sorted(snap.spares) == ["n2"] and snap.recount_ok()


def test_without_spares_every_free_node_is_placement_s():
    c = _cluster(Settings(not_ready_grace=300))
    c.submit(training_job("big", 4, 8, topology=LEAF))
    c.submit(training_job("two", 2, 8))
    c.settle(3)
    assert c.status("big")["domain"] == "leaf su-2" and c.status("two")["phase"] == "Running"
    assert sorted(_nodes(c, "two").values()) == _leaves(c)["su-1"][2:]


def test_a_gang_the_size_of_a_leaf_starts_on_an_idle_cluster_and_the_other_leaf_keeps_its_spare():
    """Spares never make a job unplaceable: a leaf whose usable nodes hold a waiting leaf-required gang only
    without its spare keeps none; once the gang runs, small jobs leave the other leaf's spare alone."""
    c = MemoryCluster(nodes=8, nodes_per_unit=4, settings=SPARES)
    su1, su2 = _leaves(c).values()
    c.submit(training_job("full", 4, 8, topology=LEAF))
    c.settle(3)
    st = c.status("full")
    assert (st["phase"], st["domain"]) == ("Running", "leaf su-1") and sorted(_nodes(c, "full").values()) == su1, st
    for i in range(4):
        c.submit(training_job(f"one{i}", 1, 8))
    c.settle(3)
    assert sorted(node for i in range(3) for node in _nodes(c, f"one{i}").values()) == su2[:3]
    st = c.status("one3")
    assert (st["phase"], st["reason"]) == ("Queued", "NoRoom"), st
    assert st["message"].endswith("; 1 node kept spare for replacing lost nodes and for jobs whose "
                                  "maxRuntimeSeconds is at most 256"), st["message"]


def test_a_whole_leaf_gang_s_reservation_is_met_when_the_leaf_frees():
    """Both leaves partly busy: the whole-leaf gang reserves one, whose spare is not kept while it waits, and starts
    there once the leaf's job ends."""
    c = _cluster()
    c.submit(training_job("b", 1, 8, topology=LEAF))  # su-1's third node
    c.settle(3)
    c.submit(training_job("c", 1, 8))  # su-2's first node
    c.settle(3)
    c.submit(training_job("full", 4, 8, topology=LEAF))
    c.settle(3)
    assert c.status("full")["phase"] == "Queued"
    c.store.delete_now(TRAININGJOBS, "team-a/c")
    c.settle(5)
    st = c.status("full")
    assert (st["phase"], st["domain"]) == ("Running", "leaf su-2"), st
    assert c.status("r")["phase"] == "Running" and c.status("b")["phase"] == "Running"


def test_choose_keeps_no_spare_where_only_spares_keep_a_waiting_job_out():
    topo = Topology((Level("leaf", "superpod.dev/leaf"),))
    nodes = [Node(f"n{i}", {"superpod.dev/leaf": "a" if i < 3 else "b"}, {GPU: 8}) for i in range(5)]
    snap = Snapshot(nodes, topo, [])
    named = lambda waiting: [snap.nodes[i].name for i in spares.choose(snap, 1, 1, waiting)]  # noqa: E731
    whole = lambda gpus, required=None: JobRequest("team-a", "w", gpus // 8, ((GPU, 8),), required=required)  # noqa: E731
    assert named([]) == named(spares.needs(snap, 1, [whole(8, "leaf")])) == ["n2", "n4"]
    assert named(spares.needs(snap, 1, [whole(16, "leaf")])) == ["n2"], "leaf a holds it beside its spare, b not"
    assert named(spares.needs(snap, 1, [whole(24, "leaf")])) == ["n4"], "leaf a holds it only without its spare"
    assert named(spares.needs(snap, 1, [whole(32, "leaf")])) == ["n2", "n4"], "no leaf holds it: spares stay"
    assert named(spares.needs(snap, 1, [whole(40)])) == [], "anywhere: the whole cluster without spares"
    assert named(spares.needs(snap, 1, [whole(24)])) == ["n2", "n4"]


def test_choose_takes_the_last_free_nodes_of_each_domain_and_keep_books_them_whole():
    topo = Topology((Level("leaf", "superpod.dev/leaf"),))
    nodes = [Node(f"n{i}", {"superpod.dev/leaf": "a" if i < 3 else "b"}, {GPU: 8, "cpu": 100}) for i in range(5)]
    nodes.append(Node("lone", {}, {GPU: 8}))  # a domain of its own: never a spare
    snap = Snapshot(nodes, topo, [Pod("x", "n2", ((GPU, 1),)), Pod("y", "n4", (("cpu", 4),))])
    assert [snap.nodes[i].name for i in spares.choose(snap, 1, 1)] == ["n1", "n4"]
    spares.keep(snap, 1, 1)
    assert snap.free[snap.index["n1"]][GPU] == 0 and snap.free[snap.index["n4"]] == {GPU: 0, "cpu": 0}
    spares.keep(snap, 1, 1)
    assert sorted(snap.spares) == ["n1", "n4"] and snap.recount_ok()
    assert spares.release(snap) == ["n1", "n4"] and snap.free[snap.index["n1"]][GPU] == 8 and not snap.spares


def test_a_spare_never_keeps_a_job_whose_gpus_are_claimed_from_the_leaf_it_requires():
    """A job's GPUs are those its claims take too: a leaf-required gang of four 8-GPU claims is placed on the whole
    leaf, as the same gang asking nvidia.com/gpu is."""
    for advertised in (True, False):  # nvidia.com/gpu advertises the GPUs too, or not
        c = dra_only(settings=SPARES, advertised=advertised)
        body = claiming("claims", 4)
        body["spec"]["topology"] = LEAF
        c.submit(body)
        c.settle(6)
        st = c.decided("claims")
        assert st.get("phase") in ("Starting", "Running"), (advertised, st.get("message"))


def test_a_fleet_whose_gpus_only_dra_publishes_keeps_spares():
    """Nodes that advertise no nvidia.com/gpu: their DRA GPUs make them spares, kept from waiting jobs."""
    c = dra_only(settings=SPARES)
    c.submit(claiming("three", 3))
    c.settle(3)
    assert c.decided("three").get("phase") in ("Starting", "Running"), c.decided("three")
    c.submit(claiming("one", 1))
    c.settle(3)
    st = c.decided("one")
    assert (st.get("phase"), st.get("reason")) == ("Queued", "NoRoom"), st
    assert "1 node kept spare for replacing lost nodes" in st["message"], st["message"]


def test_choose_reads_the_gpus_dra_publishes_and_the_claims_that_hold_them():
    snap, _ = dra_cluster(4)  # two leaves of two nodes; no nvidia.com/gpu
    level = snap.topology.index("leaf")
    named = lambda waiting=None: [snap.nodes[i].name for i in spares.choose(snap, level, 1, waiting)]  # noqa: E731
    assert named() == ["d-dgx-su01-n02", "d-dgx-su02-n02"]
    snap.devices.take(frozenset([snap.published_gpus("d-dgx-su02-n02")[1][0]]))  # a claim holds one of its GPUs
    assert named() == ["d-dgx-su01-n02", "d-dgx-su02-n01"]
    two, three = spares.needs(snap, level, [gang("g", 2)]), spares.needs(snap, level, [gang("g", 3)])
    assert two == {level: [16.0]}, "a job's GPUs are what its claims take"
    assert named(two) == [], "each leaf holds it only without its spare"
    assert named(three) == ["d-dgx-su01-n02", "d-dgx-su02-n01"], "no leaf holds it: spares stay"


def test_the_flag_reads_level_equals_count():
    assert spares_flag("leaf=1") == ("leaf", 1) and spares_flag(" nvl72 = 2 ") == ("nvl72", 2)
    for bad in ("leaf", "=1", "leaf=x", "leaf=-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            spares_flag(bad)
