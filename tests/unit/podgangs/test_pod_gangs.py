"""Pods of other controllers as gangs (controller/podgangs.py) on the in-memory API: bound all at once through
pods/binding when every pod exists and fits, a clear PodScheduled=False message otherwise, and a gang left partly
bound (a failed binding, a killed operator) finished inside its domain."""

from __future__ import annotations

import json

from superpod.api.podgang import COMPLETION_INDEX, GANG_LABEL, GANG_SIZE, POD_GROUP_LABEL, TOPOLOGY
from superpod.k8s.api import NODES, PODGROUPS, PODS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run, training_job

SCHEDULER = "superpod-scheduler"


def pod(name: str, gang: str | None = None, size: int | None = None, gpus: int = 8, index: int | None = None,
        required: str | None = None, resource: str = "nvidia.com/gpu") -> dict:
    labels, notes = {}, {}
    if gang:
        labels[GANG_LABEL] = gang
    if size is not None:
        notes[GANG_SIZE] = str(size)
    if index is not None:
        notes[COMPLETION_INDEX] = str(index)
    if required:
        notes[TOPOLOGY["required"]] = required
    limits = {resource: str(gpus)} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a", "labels": labels, "annotations": notes},
            "spec": {"schedulerName": SCHEDULER, "containers": [
                {"name": "main", "image": "trainer", "resources": {"limits": limits, "requests": limits}}]}}


def pod_group(c: MemoryCluster, name: str, min_member: int, gpus: int = 8):
    """A coscheduling PodGroup in team-a; returns a maker of its members (pods of `gpus` GPUs)."""
    run(c.admin.create(PODGROUPS, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                                   "metadata": {"name": name, "namespace": "team-a"},
                                   "spec": {"minMember": min_member}}))

    def member(pod_name: str) -> dict:
        body = pod(pod_name, gpus=gpus)
        body["metadata"]["labels"][POD_GROUP_LABEL] = name
        return body
    return member


def create(c: MemoryCluster, *pods: dict) -> None:
    for body in pods:
        run(c.admin.create(PODS, body))


def stored(c: MemoryCluster, name: str) -> dict:
    return c.store.peek(PODS, f"team-a/{name}")


def scheduled(c: MemoryCluster, name: str) -> tuple[str, str, str] | None:
    for cond in (stored(c, name).get("status") or {}).get("conditions") or []:
        if cond["type"] == "PodScheduled":
            return cond["status"], cond.get("reason", ""), cond.get("message", "")
    return None


def leaf_of(c: MemoryCluster, node: str) -> str:
    return c.store.peek(NODES, node)["metadata"]["labels"]["superpod.dev/leaf"]


def test_an_indexed_gang_is_bound_only_when_its_last_pod_exists_all_in_one_leaf_in_rank_order():
    c = MemoryCluster(nodes=16, nodes_per_unit=8)
    names = [f"train-{i}" for i in range(8)]
    for i, name in enumerate(names[:7]):
        create(c, pod(name, "train", 8, index=i, required="leaf"))
        c.settle(2)
        assert stored(c, name)["spec"].get("nodeName") is None
    assert scheduled(c, "train-0") == ("False", "Unschedulable", "waiting for all 8 pods of the gang to exist")
    told = [w for w in c.store.writes if w.writer == "op-1" and w.verb == "patch-status"]
    assert len(told) == 7, "each waiting pod told once, not again as each later pod appears"
    create(c, pod(names[7], "train", 8, index=7, required="leaf"))
    c.settle(3)
    nodes = [stored(c, name)["spec"]["nodeName"] for name in names]
    assert all(nodes), nodes
    assert len({leaf_of(c, node) for node in nodes}) == 1
    assert nodes == sorted(nodes), "ranks follow the nodes' order in the leaf"
    assert [w.verb for w in c.store.writes if w.writer == "op-1" and w.kind == "pods"].count("bind") == 8


def test_bad_gangs_each_say_why_and_the_rest_schedules():
    c = MemoryCluster(nodes=4)
    create(c, pod("lonely", gpus=8))  # no gang label: a gang of one
    create(c, pod("odd-0", "odd", 2), pod("odd-1", "odd", 4))  # disagree on the size
    create(c, pod("over-0", "over", 1), pod("over-1", "over", 1))  # more pods than the size
    create(c, pod("exotic", gpus=1, resource="example.com/fpga"))  # a resource no node has
    create(c, pod("nosize-0", "nosize"))
    create(c, pod("nolabel", size=2))  # a gang's size without its name
    c.settle(3)
    assert stored(c, "lonely")["spec"].get("nodeName")
    assert "its pods disagree: 2 (odd-0), 4 (odd-1)" in scheduled(c, "odd-0")[2]
    assert "says 1, but 2 of its pods exist" in scheduled(c, "over-1")[2]
    assert scheduled(c, "exotic")[2] == "requests example.com/fpga, which no node advertises"
    assert "superpod.dev/gang-size]: missing" in scheduled(c, "nosize-0")[2]
    assert "metadata.labels[superpod.dev/gang]: missing, though superpod.dev/gang-size says 2" in \
        scheduled(c, "nolabel")[2]
    for name in ("odd-0", "odd-1", "over-0", "over-1", "exotic", "nosize-0", "nolabel"):
        assert stored(c, name)["spec"].get("nodeName") is None, name


def test_two_gangs_compete_one_runs_the_other_waits_whole():
    c = MemoryCluster(nodes=4)
    create(c, *[pod(f"a-{i}", "a", 3, index=i) for i in range(3)])
    create(c, *[pod(f"b-{i}", "b", 3, index=i) for i in range(3)])
    c.settle(3)
    bound = {g: sum(bool(stored(c, f"{g}-{i}")["spec"].get("nodeName")) for i in range(3)) for g in "ab"}
    assert sorted(bound.values()) == [0, 3], bound
    waiting = next(g for g, n in bound.items() if n == 0)
    assert scheduled(c, f"{waiting}-0")[0] == "False"


def fail_binding_once(c: MemoryCluster, key: str) -> list[str]:
    """The binding of pod `key` fails once (a 500); the list says when it did."""
    failed: list[str] = []

    def fault(verb, kind, what, writer):
        if verb == "bind" and what == key and not failed:
            failed.append(what)
            raise ApiError(500, "InternalError", "etcd hiccup")
        return None
    c.store.fault = fault
    return failed


def test_a_failed_binding_leaves_the_rest_of_the_gang_to_be_bound_in_the_same_leaf():
    c = MemoryCluster(nodes=16, nodes_per_unit=4)
    failed = fail_binding_once(c, "team-a/g-3")
    create(c, *[pod(f"g-{i}", "g", 4, index=i, required="leaf") for i in range(4)])
    c.cycle()
    assert failed and stored(c, "g-3")["spec"].get("nodeName") is None, "the dangerous moment: a partial gang"
    bound = [stored(c, f"g-{i}")["spec"]["nodeName"] for i in range(3)]
    leaf = leaf_of(c, bound[0])
    free = next(n for n in sorted(c.store.objects[NODES]) if leaf_of(c, n) == leaf and n not in bound)
    blocker = pod("blocker", gpus=8)  # takes the leaf's last node first (another scheduler binds it)
    blocker["spec"].update(schedulerName="default-scheduler", nodeName=free)
    create(c, blocker)
    c.settle(3)
    assert stored(c, "blocker")["spec"]["nodeName"] == free
    assert stored(c, "g-3")["spec"].get("nodeName") is None, "not in another leaf"
    assert f"no node inside leaf {leaf} can take it" in scheduled(c, "g-3")[2], scheduled(c, "g-3")
    c.store.delete_now(PODS, "team-a/blocker")
    c.settle(3)
    assert stored(c, "g-3")["spec"]["nodeName"] == free


def test_a_lease_lost_mid_gang_is_finished_by_the_next_leader_in_the_same_leaf():
    c = MemoryCluster(nodes=16, nodes_per_unit=4)
    binds = []

    def fault(verb, kind, what, writer):
        if verb == "bind":
            binds.append(what)
            if len(binds) == 2:
                c.leading = False  # the Lease runs out between two bindings of one gang
        return None
    c.store.fault = fault
    create(c, *[pod(f"g-{i}", "g", 4, index=i, required="leaf") for i in range(4)])
    c.cycle()
    bound = [stored(c, f"g-{i}")["spec"].get("nodeName") for i in range(4)]
    assert 0 < sum(map(bool, bound)) < 4, f"the dangerous moment: a partial gang ({bound})"
    c.leading = True
    c.start("op-2")  # the next leader, with a cache of its own
    c.settle(3)
    nodes = [stored(c, f"g-{i}")["spec"]["nodeName"] for i in range(4)]
    assert all(nodes) and len(set(nodes)) == 4 and len({leaf_of(c, n) for n in nodes}) == 1
    assert [n for n in bound if n] == [n for n, was in zip(nodes, bound, strict=True) if was], "bindings kept"
    writers = {w.writer for w in c.store.writes if w.verb == "bind"}
    assert writers == {"op-1", "op-2"}


def test_gated_pods_and_inter_pod_rules_wait_with_a_reason():
    c = MemoryCluster(nodes=4)
    gated = [pod(f"gated-{i}", "gated", 2, index=i) for i in range(2)]
    gated[1]["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    spread = pod("spread")
    spread["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone", "labelSelector": {}}]
    create(c, *gated, spread)
    c.settle(2)
    assert scheduled(c, "gated-0")[2] == "waiting for 1 of the gang's pods to have their scheduling gates removed"
    assert scheduled(c, "gated-1") is None, "the gated pod itself is left to the API server's SchedulingGated"
    assert "DoNotSchedule spread constraints are not kept" in scheduled(c, "spread")[2]
    ungated = c.store.peek(PODS, "team-a/gated-1")
    ungated["spec"]["schedulingGates"] = []
    c.store._store(PODS, ungated, "update")
    c.settle(2)
    assert stored(c, "gated-0")["spec"].get("nodeName") and stored(c, "gated-1")["spec"].get("nodeName")


def test_a_queue_counts_its_bound_pod_gangs_against_its_limit():
    from superpod.k8s.api import GPUQUEUES
    from tests.unit.queues.test_controller_queues import gpu_queue, phase, submit

    c = MemoryCluster(nodes=8)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, limit=32)))
    for gang in ("g1", "g2"):
        members = [pod(f"{gang}-{i}", gang, 2, index=i) for i in range(2)]
        for member in members:
            member["metadata"]["namespace"] = "team-a"
        create(c, *members)
        c.settle(2)
    submit(c, "a", "after")  # a TrainingJob of the same queue: the gangs hold its 32 GPUs
    c.settle(2)
    assert all(stored(c, f"{g}-{i}")["spec"].get("nodeName") for g in ("g1", "g2") for i in range(2))
    assert phase(c, "a", "after") == "Queued"
    assert "queue a is at its limit of 32 GPUs (32 in use)" in c.status("after")["message"]


def test_a_higher_priority_training_job_preempts_a_bound_pod_gang_whole():
    c = MemoryCluster(nodes=4)
    members = [pod(f"low-{i}", "low", 4, index=i) for i in range(4)]
    create(c, *members)
    c.settle(2)
    assert all(stored(c, f"low-{i}")["spec"].get("nodeName") for i in range(4))
    c.tick(120)
    c.submit(training_job("urgent", 2, 8, priority=100))
    c.cycle()
    assert c.status("urgent").get("nomination", {}).get("victims") == ["team-a/low@pods"], c.status("urgent")
    for i in range(4):  # the whole gang, as kube-scheduler evicts: DisruptionTarget, then a graceful delete
        target = next(x for x in stored(c, f"low-{i}")["status"]["conditions"] if x["type"] == "DisruptionTarget")
        assert target["reason"] == "PreemptionByScheduler" and "team-a/urgent" in target["message"]
        assert stored(c, f"low-{i}")["metadata"].get("deletionTimestamp")
    c.settle(40)
    assert c.status("urgent")["phase"] == "Running"
    assert any(reason == "Preempted" for reason, _ in c.events("low-0"))


def two_running_gangs() -> MemoryCluster:
    """4 nodes, all held by two 2-pod gangs (low, other) that have run two minutes."""
    c = MemoryCluster(nodes=4)
    create(c, *[pod(f"low-{i}", "low", 2, index=i) for i in range(2)])
    create(c, *[pod(f"other-{i}", "other", 2, index=i) for i in range(2)])
    c.settle(2)
    c.tick(120)
    return c


def test_a_pod_gang_victim_whose_deletes_failed_is_stopped_again_and_no_second_set_is_chosen():
    c = two_running_gangs()
    failed = []

    def fault(verb, kind, what, writer):
        if verb == "delete" and kind is PODS and len(failed) < 2:
            failed.append(what)
            raise ApiError(500, "InternalError", "etcd hiccup")
        return None
    c.store.fault = fault
    c.submit(training_job("urgent", 2, 8, priority=100))
    c.cycle()
    victims = c.status("urgent")["nomination"]["victims"]
    assert len(failed) == 2 and len(victims) == 1, "the dangerous moment: nominated, its victim's deletes lost"
    gang = victims[0].split("/")[1].split("@")[0]
    assert not stored(c, f"{gang}-0")["metadata"].get("deletionTimestamp")
    c.settle(40)
    assert c.status("urgent")["phase"] == "Running"
    spared = "other" if gang == "low" else "low"
    assert all(not stored(c, f"{spared}-{i}")["metadata"].get("deletionTimestamp") for i in range(2)), \
        "no second set of victims"


def test_a_pod_gang_preempts_a_lower_priority_training_job_through_a_nomination_on_its_pod():
    from superpod.api.podgang import nomination_of

    c = MemoryCluster(nodes=4)
    c.submit(training_job("batch", 4, 8, priority=0))
    c.settle(3)
    assert c.status("batch")["phase"] == "Running"
    c.tick(120)
    members = [pod(f"hi-{i}", "hi", 2, index=i) for i in range(2)]
    for member in members:
        member["spec"]["priority"] = 100
    create(c, *members)
    c.cycle()
    nomination = json.loads(nomination_of(stored(c, "hi-0")))
    assert nomination["victims"] == ["team-a/batch"] and len(nomination["nodes"]) == 2
    assert c.status("batch")["phase"] == "Queued" and c.status("batch")["preemptions"] == 1
    c.start("op-2")  # a restart between the nomination and the gang's start: the same nomination holds
    c.settle(40)
    nodes = sorted(stored(c, f"hi-{i}")["spec"]["nodeName"] for i in range(2))
    assert nodes == nomination["nodes"], "bound where it was nominated"
    assert nomination_of(stored(c, "hi-0")) is None, "dropped once bound"
    assert c.status("batch").get("preemptions") == 1, "one preemption, no second set"
