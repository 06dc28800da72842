"""spec.nodeFailure Replace on the real API server: a gang that loses a node has only that node's replica made again,
in the gang's leaf, under the same name, rank and host name, the other pods untouched; with no node to take it, the
gang restarts at the deadline, saying why."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.operator_env import OperatorProcess, free_port, sim_cluster, training_job
from tests.integration.wait import wait_for

DEADLINE = 20  # --replace-deadline, seconds


@pytest.fixture(scope="module")
def replacing(crds, operator, tmp_path_factory):
    """The operator with a short replacement deadline, in place of the session's for this module."""
    operator.stop()
    op = OperatorProcess(crds.kubeconfig, tmp_path_factory.mktemp("replace") / "operator.log", free_port(), (
        "run", "--namespace", "superpod-system", "--log-level", "INFO", "--replace-deadline", str(DEADLINE)))
    op.start()
    yield op
    op.stop()
    operator.start()


def _by_name(pods) -> dict:
    return {p.metadata.name: p for p in pods}


def _env(pod) -> dict:
    return {e.name: e.value for e in pod.spec.containers[0].env}


def _leaf(core, node: str) -> str:
    return core.read_node(node).metadata.labels["superpod.dev/leaf"]


def test_a_lost_node_of_a_16_replica_leaf_gang_has_only_its_replica_made_again_in_the_leaf(cluster, replacing, jobs):
    core = client.CoreV1Api(cluster.api)
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 36, nodes_per_unit=18)  # two leaves of 18 nodes
    jobs.create(training_job("big", sim, 16, gpus=8, topology={"required": "leaf"}, nodeFailure="Replace"))
    st = jobs.wait_phase("big", "Running", 90)
    leaf = st["domain"]
    before = _by_name(jobs.pods("big"))
    assert len(before) == 16
    victim = before["big-a1-5"]
    core.delete_node(victim.spec.node_name)
    wait_for(lambda: jobs.status("big").get("replacements") == 1 and jobs.status("big").get("phase") == "Running"
             and not jobs.status("big").get("replacing"), 90, "replica 5 made again and running")
    after = _by_name(jobs.pods("big"))
    st = jobs.status("big")
    assert sorted(after) == sorted(before) and st["attempt"] == 1 and st["interruptions"] == 0
    new = after["big-a1-5"]
    assert new.metadata.uid != victim.metadata.uid and new.spec.node_name != victim.spec.node_name
    assert f"leaf {_leaf(core, new.spec.node_name)}" == leaf == st["domain"], "made again inside the gang's leaf"
    assert (new.spec.hostname, new.spec.subdomain) == ("big-a1-5", "big"), "the same DNS name under the Service"
    assert _env(new) == _env(victim) and _env(new)["RANK"] == "5"
    untouched = [name for name in before if name != "big-a1-5"]
    assert [after[name].metadata.uid for name in untouched] == [before[name].metadata.uid for name in untouched]
    assert [(r["replica"], r["lostNode"], r["node"]) for r in st["replaced"]] == [
        (5, victim.spec.node_name, new.spec.node_name)]
    jobs.wait_event("big", "NodeReplaced", f"replica 5 from {victim.spec.node_name} to {new.spec.node_name}")


def test_with_no_node_in_the_leaf_the_gang_restarts_at_the_deadline_with_the_reason(cluster, replacing, jobs):
    core = client.CoreV1Api(cluster.api)
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 32, nodes_per_unit=16)  # the gang fills one leaf of two
    jobs.create(training_job("full", sim, 16, gpus=8, topology={"required": "leaf"}, nodeFailure="Replace"))
    jobs.wait_phase("full", "Running", 90)
    victim = _by_name(jobs.pods("full"))["full-a1-3"].spec.node_name
    core.delete_node(victim)
    jobs.wait_event("full", "AwaitingReplacement", "restarts at")
    st = jobs.status("full")
    assert st["attempt"] == 1 and st["replacementDeadline"] and st["reason"] == "AwaitingReplacement"
    wait_for(lambda: jobs.status("full").get("attempt") == 2 and jobs.phase("full") == "Running", DEADLINE + 90,
             "the gang restarted in the other leaf after the deadline")
    st = jobs.status("full")
    failure = st["failures"][-1]
    assert (failure["reason"], failure["node"], st["interruptions"]) == ("NodeLost", victim, 1)
    assert "no node to replace it was found by" in jobs.wait_event("full", "NodeLost")
    assert not st.get("replacements") and not st.get("replacementDeadline")
    assert victim not in {p.spec.node_name for p in jobs.pods("full")}


def test_with_no_free_node_in_the_leaf_the_replacement_preempts_the_cheapest_lower_priority_gang_there(
        cluster, replacing, jobs):
    core = client.CoreV1Api(cluster.api)
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 8, own_leaves=True, nodes_per_unit=4)  # two leaves of 4 nodes
    jobs.create(training_job("high", sim, 3, gpus=8, topology={"required": "leaf"}, nodeFailure="Replace",
                             priority=100))
    leaf = jobs.wait_phase("high", "Running", 90)["domain"]
    jobs.create(training_job("other-leaf", sim, 4, gpus=8, topology={"required": "leaf"}))
    jobs.wait_phase("other-leaf", "Running", 90)
    jobs.create(training_job("low", sim, 1, gpus=8))
    low_node = next(iter(jobs.wait_phase("low", "Running", 90)["placement"]))
    assert f"leaf {_leaf(core, low_node)}" == leaf, "the last free node was in the gang's leaf"
    before = _by_name(jobs.pods("high"))
    others = {p.metadata.uid for p in jobs.pods("other-leaf")}
    victim = before["high-a1-1"]
    core.delete_node(victim.spec.node_name)
    wait_for(lambda: jobs.status("high").get("replacements") == 1 and jobs.status("high").get("phase") == "Running"
             and not jobs.status("high").get("replacing"), 90, "the replica made again on the preempted gang's node")
    after = _by_name(jobs.pods("high"))
    st = jobs.status("high")
    assert after["high-a1-1"].spec.node_name == low_node and st["attempt"] == 1 and st["interruptions"] == 0
    assert [after[n].metadata.uid for n in ("high-a1-0", "high-a1-2")] == [
        before[n].metadata.uid for n in ("high-a1-0", "high-a1-2")]
    assert "preempted" in jobs.wait_event("high", "Preempting")
    low = jobs.status("low")
    assert low["phase"] != "Running" and low.get("restarts", 0) == 0, "the victim waits again, no restart counted"
    assert {p.metadata.uid for p in jobs.pods("other-leaf")} == others, "nothing outside the leaf was taken"
