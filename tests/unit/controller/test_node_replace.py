"""spec.nodeFailure Replace end to end on the in-memory API: a lost node's replicas are made again on another node of
the gang's required domain, same names, ranks and environment, the others untouched; with no such node the gang
restarts at the deadline; a replacement cut short by a crash is finished by the next leader."""

from __future__ import annotations

from datetime import datetime

import pytest

from superpod.controller.judge import Settings
from superpod.core.phases import Reason
from superpod.k8s.api import GPUUSAGES, NODES, PODS, TRAININGJOBS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run, training_job

LEAF = {"required": "leaf"}


def _cluster(**spec) -> MemoryCluster:
    """Two leaves of four 8-GPU nodes; gang `r`: 3 replicas in leaf su-1, its fourth node free."""
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    c.submit(training_job("r", 3, 8, topology=LEAF, nodeFailure="Replace", **spec))
    c.settle(3)
    assert c.status("r")["phase"] == "Running" and c.status("r")["domain"] == "leaf su-1"
    return c


def _pods(c: MemoryCluster) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in c.pods("r")}


def _lose(c: MemoryCluster, replica: int) -> str:
    """Delete the node of `r`'s replica (a node gone: its pods stay until someone deletes them)."""
    node = _pods(c)[f"r-a1-{replica}"]["spec"]["nodeName"]
    c.store.delete_now(NODES, node)
    return node


def _leaf(c: MemoryCluster, node: str) -> str:
    return c.store.objects[NODES][node]["metadata"]["labels"]["superpod.dev/leaf"]


def test_a_lost_node_has_only_its_replica_made_again_in_the_gangs_leaf():
    c = _cluster()
    before = _pods(c)
    lost = _lose(c, 1)
    c.settle(3)
    after = _pods(c)
    st = c.status("r")
    assert sorted(after) == sorted(before), "the same pod names: the same host names under the Service"
    assert after["r-a1-1"]["metadata"]["uid"] != before["r-a1-1"]["metadata"]["uid"]
    node = after["r-a1-1"]["spec"]["nodeName"]
    assert node != lost and _leaf(c, node) == "su-1", "made again inside the gang's required leaf"
    for name in ("r-a1-0", "r-a1-2"):
        assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"], "the others run on untouched"
    assert after["r-a1-1"]["spec"]["hostname"] == "r-a1-1" and after["r-a1-1"]["spec"]["subdomain"] == "r"
    assert after["r-a1-1"]["spec"]["containers"][0]["env"] == before["r-a1-1"]["spec"]["containers"][0]["env"]
    assert (st["phase"], st["reason"], st["attempt"]) == ("Running", "Running", 1)
    assert (st["replacements"], st["interruptions"], st["restarts"]) == (1, 0, 0)
    assert [(r["replica"], r["lostNode"], r["node"]) for r in st["replaced"]] == [(1, lost, node)]
    assert st["placement"][node] == [1] and lost not in st["placement"] and not st.get("replacing")
    assert Reason.NODE_REPLACED in [reason for reason, _ in c.events("r")]


def test_a_not_ready_node_past_the_grace_is_replaced_and_its_pod_deleted_at_once():
    c = _cluster()
    before = _pods(c)
    lost = before["r-a1-2"]["spec"]["nodeName"]
    c.kubelet.set_ready(lost, False)
    c.settle(31, seconds=10)
    after = _pods(c)
    assert after["r-a1-2"]["spec"]["nodeName"] != lost and after["r-a1-2"]["status"]["phase"] == "Running"
    assert not [p for p in c.store.objects[PODS].values() if p["spec"]["nodeName"] == lost], \
        "the pod on the unreachable node is force-deleted: its name is free for the replacement"
    assert c.status("r")["replacements"] == 1 and c.status("r")["attempt"] == 1


def test_without_a_node_in_the_leaf_the_gang_waits_then_restarts_at_the_deadline():
    c = _cluster()
    c.submit(training_job("filler", 1, 8, topology=LEAF))  # takes su-1's last node
    c.settle(3)
    lost = _lose(c, 0)
    c.settle(3)
    st = c.status("r")
    assert (st["phase"], st["reason"], st["attempt"]) == ("Running", Reason.AWAITING_REPLACEMENT, 1)
    assert st["replacementDeadline"] and "restarts at" in st["message"]
    assert all(_leaf(c, p["spec"]["nodeName"]) == "su-1" for p in c.pods("r") if p["spec"]["nodeName"] != lost), \
        "never outside the leaf"
    c.settle(30, seconds=10)  # past the 300 s deadline
    st = c.status("r")
    assert (st["phase"], st["reason"], st.get("placement")) == ("Queued", "NodeLost", None)
    assert st["message"].startswith(f"node {lost} is gone or stayed not ready and no node to replace it was found by")
    c.settle(3, seconds=10)  # the restart's backoff
    st = c.status("r")
    assert (st["phase"], st["attempt"], st["failures"][-1]["reason"]) == ("Running", 2, "NodeLost")
    assert st["interruptions"] == 1 and st.get("replacements", 0) == 0 and not st.get("replacementDeadline")


def test_restart_gang_is_the_default():
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    c.submit(training_job("g", 3, 8, topology=LEAF))
    c.settle(3)
    c.store.delete_now(NODES, c.pods("g")[0]["spec"]["nodeName"])
    c.settle(2)
    st = c.status("g")
    assert st["interruptions"] == 1 and st["failures"][-1]["reason"] == "NodeLost" and not st.get("replacements")


def test_a_replacement_cut_short_after_its_status_is_finished_by_the_next_leader():
    """The status (new placement, replicas being made again) is the commit point: a leader that stopped before the
    pods were written leaves a gang the next one completes, without a restart."""
    c = _cluster()
    c.submit(training_job("big", 4, 8, topology=LEAF))  # fills leaf su-2
    c.settle(2)
    before = _pods(c)
    lost = _lose(c, 1)

    def stop_after_status(verb, kind, obj, writer):
        if verb in ("create", "delete") and kind is PODS:
            c.leading = False  # the Lease is lost right after the status write landed
            raise ApiError(503, "ServiceUnavailable", "stopping")

    c.store.fault = stop_after_status
    c.cycle()
    c.store.fault = None
    c.leading = True
    st = c.status("r")
    assert st["replacing"] == [1] and lost not in st["placement"], "the status landed"
    assert before["r-a1-1"]["metadata"]["name"] in {p["metadata"]["name"] for p in c.store.objects[PODS].values()
                                                     if p["spec"]["nodeName"] == lost}, "the pods were not touched"
    c.submit(training_job("one", 1, 8))  # the one node free is the replica's new node: held for it
    c.start("op-2")
    c.settle(3)
    assert c.status("one")["phase"] == "Queued"
    after = _pods(c)
    st = c.status("r")
    assert after["r-a1-1"]["spec"]["nodeName"] == next(n for n, ranks in st["placement"].items() if ranks == [1])
    assert (st["phase"], st["attempt"], st["replacements"], st["interruptions"]) == ("Running", 1, 1, 0)
    assert not st.get("replacing")
    for name in ("r-a1-0", "r-a1-2"):
        assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"]


def test_the_replacement_is_booked_before_waiting_jobs_are_placed():
    """The replica's new node is taken in the cycle that decides it: a job waiting for one node does not get it."""
    c = _cluster()
    c.submit(training_job("big", 4, 8, topology=LEAF))  # waits: su-2 is free, so it goes there
    c.settle(2)
    c.submit(training_job("one", 1, 8, topology=LEAF))  # no node is free once su-1's last is taken
    lost = _lose(c, 2)
    c.settle(3)
    node = _pods(c)["r-a1-2"]["spec"]["nodeName"]
    assert node != lost and _leaf(c, node) == "su-1"
    assert c.status("one")["phase"] == "Queued"
    assert run(c.admin.list(PODS))  # the API is consistent


class _Runs:
    """Every pod run of gang `r` as the API shows it: its start, and its end (finish, or removal)."""

    def __init__(self, c: MemoryCluster) -> None:
        self.c, self.start, self.end, self.at_cycle = c, {}, {}, 0.0

    def step(self, seconds: float = 1.0) -> None:
        self.c.cycle()
        self.look()
        self.at_cycle = self.gpu_seconds()  # up to the cycle's time
        self.c.tick(seconds)

    def look(self) -> None:
        live = {}
        for pod in self.c.store.objects.get(PODS, {}).values():
            if pod["metadata"]["name"].startswith("r-a"):
                live[pod["metadata"]["uid"]] = pod
        for uid, pod in live.items():
            status = pod.get("status") or {}
            if status.get("startTime"):
                self.start.setdefault(uid, datetime.fromisoformat(status["startTime"]).timestamp())
            finished = [s["state"]["terminated"]["finishedAt"] for s in status.get("containerStatuses") or []
                        if "terminated" in (s.get("state") or {})]
            if finished and uid not in self.end:
                self.end[uid] = datetime.fromisoformat(max(finished)).timestamp()
        for uid in self.start:
            if uid not in live:
                self.end.setdefault(uid, self.c.now)

    def gpu_seconds(self) -> float:
        return 8 * sum(self.end.get(uid, self.c.now) - start for uid, start in self.start.items())


@pytest.mark.parametrize("next_leader", [False, True])
def test_a_replica_replaced_twice_in_one_attempt_has_every_pod_run_billed_once(next_leader):
    """Every run of each pod of the attempt, those replaced included, is billed exactly once: in the attempt's
    GPUUsage records and its status.gpuSeconds, from the replacement's own status write on; also when the attempt
    is closed by a next leader that never saw the replaced pods."""
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    c.submit(training_job("r", 2, 8, topology=LEAF, nodeFailure="Replace"))
    runs = _Runs(c)
    for _ in range(5):
        runs.step(10)
    for times in (1, 2):
        _lose(c, 1)
        runs.step()
        st = c.status("r")
        assert st["replacements"] == times and st["attempt"] == 1
        assert st["gpuSeconds"] == round(runs.at_cycle, 3), "the replacement's status write is up to date"
        for _ in range(3):
            runs.step(10)
    assert len(runs.start) == 4, "replica 1 ran on three nodes"
    if next_leader:
        c.start("op-2")
    for pod in c.pods("r"):
        c.kubelet.finish(f"team-a/{pod['metadata']['name']}", 0)
    for _ in range(3):
        runs.step()
    st = c.status("r")
    assert st["phase"] == "Succeeded"
    billed = sum(r["spec"]["gpuSeconds"] for r in c.store.objects.get(GPUUSAGES, {}).values())
    assert billed == pytest.approx(runs.gpu_seconds(), abs=0.01), "every pod run billed, none twice"
    assert st["gpuSeconds"] == st["finishedGpuSeconds"] == pytest.approx(runs.gpu_seconds(), abs=0.01)


def _taint(key: str, effect: str = "NoExecute"):
    def change(node: dict) -> None:
        node["spec"].setdefault("taints", []).append({"key": key, "value": "x", "effect": effect})
    return change


def _replaced_from(c: MemoryCluster, replica: int, node: str, why: str) -> None:
    st = c.status("r")
    assert (st["phase"], st["attempt"], st["replacements"], st["interruptions"]) == ("Running", 1, 1, 0)
    assert [(r["replica"], r["lostNode"]) for r in st["replaced"]] == [(replica, node)]
    new = _pods(c)[f"r-a1-{replica}"]["spec"]["nodeName"]
    assert new != node and _leaf(c, new) == "su-1"
    assert [m for reason, m in c.events("r") if reason == Reason.NODE_REPLACED and m.startswith(why)], "the Event"


def test_a_noexecute_taint_the_pods_do_not_tolerate_replaces_the_node_and_restarts_a_restart_gang():
    c = _cluster()
    node = _pods(c)["r-a1-1"]["spec"]["nodeName"]
    c.update_node(node, _taint("example.com/maintenance"))
    c.settle(2)
    _replaced_from(c, 1, node, f"node {node} is tainted example.com/maintenance:NoExecute")
    g = MemoryCluster(nodes=8, nodes_per_unit=4)
    g.submit(training_job("g", 3, 8, topology=LEAF))
    g.settle(3)
    g.update_node(g.pods("g")[0]["spec"]["nodeName"], _taint("example.com/maintenance"))
    g.settle(2)
    st = g.status("g")
    assert st["interruptions"] == 1 and st["failures"][-1]["reason"] == "NodeLost"
    assert "is tainted example.com/maintenance:NoExecute; gang restarts" in st["message"]


def test_a_tolerated_or_not_ready_taint_or_a_noschedule_one_is_no_failure():
    tolerant = [{"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}]
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    job = training_job("r", 3, 8, topology=LEAF, nodeFailure="Replace")
    job["spec"]["template"]["spec"]["tolerations"] = tolerant
    c.submit(job)
    c.settle(3)
    nodes = [p["spec"]["nodeName"] for p in c.pods("r")]
    c.update_node(nodes[0], _taint("example.com/maintenance"))
    c.update_node(nodes[1], _taint("node.kubernetes.io/unreachable"))  # the not-ready grace covers it
    c.update_node(nodes[2], _taint("example.com/other", "NoSchedule"))
    c.settle(3)
    st = c.status("r")
    assert (st["phase"], st.get("replacements", 0), st["interruptions"]) == ("Running", 0, 0)


def test_a_configured_failure_condition_replaces_the_node_and_keeps_it_out_of_placement():
    c = MemoryCluster(nodes=8, nodes_per_unit=4,
                      settings=Settings(not_ready_grace=300, failure_conditions=(("GpuUnhealthy", "True"),)))
    c.submit(training_job("r", 3, 8, topology=LEAF, nodeFailure="Replace"))
    c.settle(3)
    node = _pods(c)["r-a1-2"]["spec"]["nodeName"]

    def unhealthy(obj: dict) -> None:
        obj["status"]["conditions"].append({"type": "GpuUnhealthy", "status": "True", "reason": "XidError"})
    c.update_node(node, unhealthy)
    c.settle(2)
    _replaced_from(c, 2, node, f"node {node} has the failure condition GpuUnhealthy=True")
    c.submit(training_job("one", 1, 8, topology=LEAF))  # su-1 has only the unhealthy node left
    c.settle(2)
    assert _leaf(c, c.pods("one")[0]["spec"]["nodeName"]) == "su-2"


def test_fewer_gpus_allocatable_than_the_gang_holds_there_replaces_the_node():
    c = _cluster()
    node = _pods(c)["r-a1-0"]["spec"]["nodeName"]
    c.update_node(node, lambda obj: obj["status"]["allocatable"].update({"nvidia.com/gpu": "7"}))
    c.settle(2)
    assert c.status("r")["reason"] == Reason.NODE_NOT_READY and not c.status("r").get("replacements")
    c.settle(31, seconds=10)  # for the not-ready grace: a kubelet restart zeroes the GPUs for seconds
    _replaced_from(c, 0, node, f"node {node} offers 7 GPUs, fewer than the 8 the gang's pods hold there")


def test_a_cordon_alone_is_no_failure_its_pods_evicted_are():
    c = _cluster()
    before = _pods(c)
    node = before["r-a1-1"]["spec"]["nodeName"]
    c.update_node(node, lambda obj: obj["spec"].update({"unschedulable": True}))
    c.settle(3)
    assert c.status("r").get("replacements", 0) == 0 and _pods(c) == before
    run(c.admin.delete(PODS, "r-a1-1", "team-a"))  # the drain evicts it (graceful)
    c.settle(3)
    _replaced_from(c, 1, node, f"node {node} is drained")
    after = _pods(c)
    for name in ("r-a1-0", "r-a1-2"):
        assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"]


def _real_cluster() -> MemoryCluster:
    """`_cluster`, its pods slow to stop as on a real cluster: a graceful delete of a pod on a dead node never
    completes (its kubelet is not there to finish it)."""
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    job = training_job("r", 3, 8, topology=LEAF, nodeFailure="Replace",
                       annotations={"sim.superpod.dev/terminate-after": "3600"})
    job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 3600
    c.submit(job)
    c.settle(3)
    assert c.status("r")["phase"] == "Running"
    return c


def _cut_off(c: MemoryCluster, replica: int) -> str:
    """Make the node of `r`'s replica not ready (its kubelet cut off: its pods stay until force-deleted)."""
    node = _pods(c)[f"r-a1-{replica}"]["spec"]["nodeName"]
    c.kubelet.set_ready(node, False)
    return node


def _replica_running_elsewhere(c: MemoryCluster, replica: int, lost: str) -> None:
    st = c.status("r")
    pod = _pods(c)[f"r-a1-{replica}"]
    assert (st["phase"], st["attempt"]) == ("Running", 1), (st["phase"], st["attempt"], st.get("message"))
    assert pod["spec"]["nodeName"] != lost and pod["status"]["phase"] == "Running", \
        (pod["spec"]["nodeName"], pod["metadata"].get("deletionTimestamp"), st.get("message"))


def test_a_replacement_cut_short_before_the_force_delete_is_finished_by_the_next_leader():
    """The next leader force-deletes the lost pod before it makes the replica again: its create never meets the old
    pod's name, and no rollback deletes the old pod gracefully (which would leave it terminating on its dead node)."""
    c = _real_cluster()
    lost = _cut_off(c, 1)
    c.settle(25, seconds=10)  # not ready: within the grace
    calls = []

    def stop_after_status(verb, kind, obj, writer):
        if verb in ("create", "delete") and kind is PODS:
            calls.append(verb)
            c.leading = False
            raise ApiError(503, "ServiceUnavailable", "stopping")

    _cycle_with_fault(c, stop_after_status, calls)
    c.leading = True
    assert c.status("r").get("replacing") == [1], "the status landed, the pods were not touched"
    c.start("op-2")
    c.settle(60, seconds=1)
    _replica_running_elsewhere(c, 1, lost)


def _cycle_with_fault(c: MemoryCluster, fault, reached: list) -> None:
    """Cycles with `fault` injected until it has struck (it appends to `reached`), then without it."""
    c.store.fault = fault
    while not reached:
        c.cycle()
        c.tick(10)
    c.store.fault = None


def test_a_force_delete_that_fails_once_is_tried_again_before_the_replica_is_made():
    c = _real_cluster()
    lost = _cut_off(c, 1)
    c.settle(25, seconds=10)
    failed = []

    def once(verb, kind, obj, writer):
        if verb == "delete" and kind is PODS and not failed:
            failed.append(obj)
            raise ApiError(503, "ServiceUnavailable", "try again")

    _cycle_with_fault(c, once, failed)
    assert failed, "the force delete failed once"
    c.settle(60, seconds=1)
    _replica_running_elsewhere(c, 1, lost)


def test_a_lost_pods_run_is_billed_though_the_leader_stopped_before_its_record_and_the_pod_is_gone():
    """The lost pod's own GPUUsage record is written before the replacement's status: a leader stopped in between
    leaves the replacement undecided, and the next one bills the pod it still sees; a pod removed meanwhile (the
    pod GC of a deleted node) was billed already."""
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    c.submit(training_job("r", 2, 8, topology=LEAF, nodeFailure="Replace"))
    runs = _Runs(c)
    for _ in range(5):
        runs.step(10)
    _lose(c, 1)
    old = _pods(c)["r-a1-1"]

    def stop_before_status(verb, kind, obj, writer):
        if verb == "update" and kind is TRAININGJOBS:
            c.leading = False
            raise ApiError(503, "ServiceUnavailable", "stopping")

    c.store.fault = stop_before_status
    c.cycle()
    c.store.fault = None
    assert not c.status("r").get("replacing"), "the replacement's status did not land"
    assert [r for r in c.store.objects[GPUUSAGES].values() if r["spec"].get("pod") == old["metadata"]["name"]]
    runs.look()
    c.store.delete_now(PODS, f"team-a/{old['metadata']['name']}")  # podgc: its node is gone
    runs.look()
    c.leading = True
    c.start("op-2")
    for _ in range(3):
        runs.step(10)
    for pod in c.pods("r"):
        c.kubelet.finish(f"team-a/{pod['metadata']['name']}", 0)
    for _ in range(3):
        runs.step()
    assert c.status("r")["phase"] == "Succeeded"
    billed = sum(r["spec"]["gpuSeconds"] for r in c.store.objects.get(GPUUSAGES, {}).values())
    assert billed == pytest.approx(runs.gpu_seconds(), abs=0.01), "every pod run billed, none twice"


def test_a_replacement_keeps_off_the_nodes_a_preemptor_is_nominated_to():
    """A preemptor's nominated nodes are held for it (its victims are stopping): a replacement decided before the
    cycle's reservations are booked does not take them."""
    from tests.unit.preemption.test_preemption import job, live_pods
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(job("r", replicas=2, priority=50, nodeFailure="Replace", topology=LEAF))
    c.submit(job("low-a", priority=0, preemptionGracePeriodSeconds=5))
    c.submit(job("low-b", priority=0, preemptionGracePeriodSeconds=5))
    c.settle(5)
    c.tick(100)
    c.submit(job("big", replicas=2, priority=100))
    c.cycle()
    big = c.status("big")
    assert big["reason"] == "Preempting"
    nominated = set(big["nomination"]["nodes"])
    c.store.delete_now(NODES, c.pods("r")[0]["spec"]["nodeName"])
    c.settle(15)
    taken = {p["spec"]["nodeName"] for p in live_pods(c, "r")} & nominated
    assert not taken, (f"r's replacement took {taken}, held for big", c.status("big")["phase"])


@pytest.mark.parametrize("mode", ["RestartGang", "Replace"])
def test_a_momentary_drop_of_allocatable_gpus_is_no_failure(mode):
    """A kubelet restart zeroes a device plugin's resource until the plugin registers again (kubernetes#73948): a
    few seconds of `nvidia.com/gpu: 0` on a Ready node lose nothing."""
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    c.submit(training_job("g", 3, 8, topology=LEAF, nodeFailure=mode))
    c.settle(3)
    node = c.pods("g")[0]["spec"]["nodeName"]
    c.update_node(node, lambda obj: obj["status"]["allocatable"].update({"nvidia.com/gpu": "0"}))
    c.cycle()
    c.tick(10)
    c.cycle()
    c.update_node(node, lambda obj: obj["status"]["allocatable"].update({"nvidia.com/gpu": "8"}))
    c.settle(3)
    st = c.status("g")
    assert (st["attempt"], st.get("interruptions", 0), st.get("replacements", 0)) == (1, 0, 0), st.get("message")


def test_the_taint_managers_eviction_on_a_not_ready_node_replaces_the_replica():
    """Kubernetes evicts a NotReady node's pods when their 300 s toleration of the unreachable taint ends, the same
    300 s as --not-ready-grace but counted from the taint, which the operator sees a little later: the pod evicted
    (Terminating: its kubelet is gone) is a replica lost with its node, not one deleted by someone else."""
    c = _real_cluster()
    node = _cut_off(c, 1)
    t0 = c.now
    c.tick(0.5)
    c.cycle()  # the operator sees the node not ready half a second after the node lifecycle controller said so
    while c.now + 10 < t0 + 300:
        c.tick(10)
        c.cycle()
    c.now = t0 + 300  # the taint manager: toleration over, the pod is evicted (graceful; no kubelet to finish it)
    run(c.admin.delete(PODS, "r-a1-1", "team-a"))
    c.now += 0.2
    c.cycle()
    c.settle(5)
    st = c.status("r")
    assert (st["attempt"], st.get("replacements", 0)) == (1, 1), (st["attempt"], st.get("failures"), node)
    _replica_running_elsewhere(c, 1, node)


def _crowded(neighbour_priority: int, grace: int = 5, **neighbour) -> tuple[MemoryCluster, str]:
    """`r` (priority 50) fills three nodes of leaf su-1, `low` (one 8-GPU replica) its fourth; leaf su-2 is full of
    gangs `far-*` of priority 0 that started later (less work lost: cheaper victims, were they in r's leaf)."""
    from tests.unit.preemption.test_preemption import job
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    c.submit(job("r", replicas=3, priority=50, nodeFailure="Replace", topology=LEAF))
    c.settle(3)
    c.submit(job("low", priority=neighbour_priority, topology=LEAF, preemptionGracePeriodSeconds=grace,
                 **neighbour))
    c.settle(3)
    c.tick(100)
    for i in range(4):
        c.submit(job(f"far-{i}", priority=0))
    c.settle(3)
    low_node = c.pods("low")[0]["spec"]["nodeName"]
    assert _leaf(c, low_node) == "su-1" and all(
        _leaf(c, c.pods(f"far-{i}")[0]["spec"]["nodeName"]) == "su-2" for i in range(4))
    c.tick(100)  # past any minimum runtime
    return c, low_node


def test_a_replacement_with_no_free_node_preempts_the_lower_priority_gang_in_its_leaf():
    from tests.unit.preemption.test_preemption import live_pods
    c, low_node = _crowded(0)
    far = {p["metadata"]["uid"] for i in range(4) for p in c.pods(f"far-{i}")}
    lost = _lose(c, 0)
    c.settle(3)
    st = c.status("r")
    assert st["reason"] == Reason.AWAITING_REPLACEMENT and st["nomination"]["nodes"] == [low_node], st["message"]
    low = c.status("low")
    assert low["phase"] == "Queued" and low["preemptions"] == 1
    assert Reason.PREEMPTED in [reason for reason, _ in c.events("low")]
    assert Reason.PREEMPTING in [reason for reason, _ in c.events("r")]
    c.settle(20, seconds=1)  # the victim's grace period, then the replacement
    st = c.status("r")
    assert (st["phase"], st["attempt"], st["replacements"], st["restarts"]) == ("Running", 1, 1, 0), st["message"]
    assert [(r["replica"], r["lostNode"], r["node"]) for r in st["replaced"]] == [(0, lost, low_node)]
    assert not st.get("nomination") and not st.get("replacementDeadline")
    assert {p["spec"]["nodeName"] for p in live_pods(c, "r")} >= {low_node}
    low = c.status("low")
    assert low["phase"] == "Queued" and low["restarts"] == 0 and low.get("interruptions", 0) == 0, \
        "the victim waits again, no restart counted; it does not take back the node held for the replacement"
    assert {p["metadata"]["uid"] for i in range(4) for p in c.pods(f"far-{i}")} == far, \
        "nothing outside the gang's leaf is taken, though cheaper"


@pytest.mark.parametrize("neighbour", [{"priority": 50}, {"priority": 0, "serviceClass": "reserved"}],
                         ids=["equal-priority", "reserved"])
def test_a_replacement_never_preempts_an_equal_priority_or_reserved_neighbour(neighbour):
    priority = neighbour.pop("priority")
    c, low_node = _crowded(priority, **neighbour)
    low = c.pods("low")[0]["metadata"]["uid"]
    _lose(c, 0)
    c.settle(3)
    st = c.status("r")
    assert st["reason"] == Reason.AWAITING_REPLACEMENT and not st.get("nomination")
    c.settle(30, seconds=10)  # past the 300 s deadline
    st = c.status("r")
    assert (st["interruptions"], st.get("replacements", 0), st["failures"][-1]["reason"]) == (1, 0, "NodeLost")
    assert c.pods("low")[0]["metadata"]["uid"] == low and not c.status("low").get("preemptions")


def test_a_replacement_whose_victim_outlasts_the_deadline_restarts_the_gang_and_drops_its_nomination():
    c, low_node = _crowded(0, grace=900)  # the victim's pods stop long after r's 300 s deadline
    _lose(c, 0)
    c.settle(3)
    assert c.status("r")["nomination"]["nodes"] == [low_node]
    c.settle(32, seconds=10)
    st = c.status("r")
    assert (st["interruptions"], st.get("replacements", 0), st["failures"][-1]["reason"]) == (1, 0, "NodeLost")
    assert not st.get("replacementDeadline") and "team-a/low" not in (st.get("nomination") or {}).get("victims", []), \
        "the replacement's nomination went with its attempt (waiting, it may preempt anew as any job does)"


def test_the_nodes_a_replacement_preempted_for_are_held_from_waiting_jobs_while_its_victims_stop():
    from tests.unit.preemption.test_preemption import job
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    c.submit(job("r", replicas=3, priority=50, nodeFailure="Replace", topology=LEAF))
    c.settle(3)
    for name, grace in (("quick", 5), ("slow", 120)):  # two 4-GPU gangs share su-1's fourth node
        c.submit(training_job(name, 1, 4, priority=0, topology=LEAF, preemptionGracePeriodSeconds=grace,
                              annotations={"sim.superpod.dev/terminate-after": "1000s"}))
        c.settle(3)
    shared = c.pods("quick")[0]["spec"]["nodeName"]
    assert c.pods("slow")[0]["spec"]["nodeName"] == shared and _leaf(c, shared) == "su-1"
    for i in range(4):
        c.submit(job(f"far-{i}", priority=50))  # su-2 full, not to be preempted
    c.settle(3)
    c.tick(100)
    _lose(c, 0)
    c.settle(3)
    assert c.status("r")["nomination"]["nodes"] == [shared]
    c.submit(training_job("small", 1, 4, priority=0))  # would fit in the half quick frees
    c.settle(30, seconds=1)  # quick is gone, slow still stops
    taken = [p["metadata"]["name"] for name in ("small", "quick") for p in c.pods(name)
             if p["spec"]["nodeName"] == shared and not p["metadata"].get("deletionTimestamp")]
    assert not taken, "the held node is no waiting job's, its victim's included"
    assert "held for it" in c.status("r")["message"]
    c.settle(20, seconds=10)  # slow's grace ends; the replica lands there
    st = c.status("r")
    assert (st["replacements"], st["interruptions"]) == (1, 0) and st["placement"][shared] == [0]
