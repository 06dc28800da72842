"""A hostile tenant with `edit` in its own namespace, on the in-memory API: each finding of the tenancy review
(shared/docs/reviews/tenancy-review.md) as a test of the outcome the operator must keep. Each was seen to fail on
the code before its fix."""

from __future__ import annotations

import json

import pytest

from superpod.api.podgang import GANG_LABEL, NOMINATED, QUEUE_LABEL, nomination_of
from superpod.api.times import rfc3339
from superpod.controller import podgangs
from superpod.hardware.kubelet import TERMINATE_AFTER
from superpod.k8s.api import GPUQUEUES, GPUUSAGES, NODES, PODS, TRAININGJOBS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gangs import create, fail_binding_once, pod, pod_group, stored
from tests.unit.queues.test_controller_queues import gpu_queue, message, phase, queue_status, submit

FORGED = "superpod.dev/nomination"  # where a pod gang's nomination once was: a tenant may write it


def forged_nomination(c: MemoryCluster, nodes: list[str], victims: list[str], **attempts) -> str:
    return json.dumps({"nodes": nodes, "victims": victims, "attempts": attempts, "time": rfc3339(c.now)})


def squatter(c: MemoryCluster, nodes: list[str], victims: list[str], priority: int = 0, **attempts) -> dict:
    """A pod that never fits an 8-GPU node (so it waits, valid, forever) carrying a forged nomination, in its
    annotations and in the status it was created with (the API server drops the latter)."""
    forged = pod("squatter", gpus=16)
    forged["spec"]["priority"] = priority
    text = forged_nomination(c, nodes, victims, **attempts)
    forged["metadata"]["annotations"][FORGED] = text
    forged["status"] = {"conditions": [{"type": NOMINATED, "status": "True", "message": text}]}
    return forged


def test_a_forged_nomination_pins_no_node():
    """H1: one pod naming every node and no victims held the whole cluster."""
    c = MemoryCluster(nodes=4)
    create(c, squatter(c, sorted(c.store.objects[NODES]), []))
    c.settle(2)
    c.submit(training_job("victim-tenant", 1, 8))
    c.settle(5)
    assert c.decided("victim-tenant")["phase"] == "Running"


def test_a_tenant_cannot_write_a_nomination_into_a_pods_status():
    """Only the status subresource writes a pod's status, and a pod starts with none: as the API server."""
    c = MemoryCluster(nodes=2)
    create(c, squatter(c, sorted(c.store.objects[NODES]), []))
    c.settle(2)
    assert nomination_of(stored(c, "squatter")) is None, "the status a creator writes is not kept"
    text = forged_nomination(c, sorted(c.store.objects[NODES]), [])
    run(c.admin.patch(PODS, "squatter", {"status": {"conditions": [{"type": NOMINATED, "status": "True",
                                                                     "message": text}]}}, "team-a"))
    c.settle(2)
    assert nomination_of(stored(c, "squatter")) is None, "a patch of the pod does not write its status"


def test_a_forged_victim_list_costs_nothing_per_name():
    """H2: each forged victim name cost a pass over every gang, every cycle."""
    c = MemoryCluster(nodes=2)
    create(c, squatter(c, [], [f"team-x/fake-{i}@pods" for i in range(500)]))
    c.settle(2)
    calls, placed = [], podgangs.PodGangs.placed
    podgangs.PodGangs.placed = lambda self, state: calls.append(1) or placed(self, state)
    try:
        c.now += 1
        c.cycle()
    finally:
        podgangs.PodGangs.placed = placed
    assert len(calls) <= 2, f"{len(calls)} passes over the gangs in one cycle"


def test_a_forged_nomination_evicts_no_lower_priority_job():
    """M1: a priority-10 pod that never fits named a running job as its victim, and it was preempted."""
    c = MemoryCluster(nodes=4)
    body = training_job("batch", 1, 8, priority=0)
    body["metadata"]["namespace"] = "team-b"
    c.submit(body)
    c.settle(3)
    attempt = c.job("batch", "team-b")["status"]["attempt"]
    create(c, squatter(c, [], ["team-b/batch"], priority=10, **{"team-b/batch": attempt}))
    c.settle(3)
    assert not c.job("batch", "team-b")["status"].get("preemptions")


def test_a_forged_nomination_evicts_no_pod_gang_again_and_again():
    """M1: a pod gang named as a victim was evicted each time its owner made it again."""
    c = MemoryCluster(nodes=4)

    def web():
        p = pod("web-0", "web", 1, gpus=8)
        p["metadata"]["namespace"] = "team-b"
        return p

    create(c, web())
    c.settle(3)
    create(c, squatter(c, [], ["team-b/web@pods"], priority=10))
    for _ in range(4):
        c.settle(3)
        obj = c.store.peek(PODS, "team-b/web-0")
        assert obj is not None and not obj["metadata"].get("deletionTimestamp")
        c.tick(700)


def test_a_refused_nomination_write_evicts_no_victim():
    """M2: the nomination's write was answered 409 and its victims were evicted anyway; the next cycle chose a
    second set."""
    c = MemoryCluster(nodes=3, nodes_per_unit=3)
    for name in ("l1", "l2", "l3"):
        c.submit(training_job(name, 1, 8, annotations={TERMINATE_AFTER: "120s"}, preemptionGracePeriodSeconds=300))
    c.settle(4)
    refused = []

    def fault(verb, kind, what, writer):
        if kind is PODS and verb == "patch" and what == "team-a/hi" and not refused:
            refused.append(what)
            raise ApiError(409, "Conflict", "Precondition failed: UID in precondition does not match")
    c.store.fault = fault
    hi = pod("hi", gpus=8)
    hi["spec"]["priority"] = 100
    create(c, hi)
    c.cycle()
    assert refused, "the dangerous moment: the nomination's write was refused"
    assert not any(c.job(name)["status"].get("preemptions") for name in ("l1", "l2", "l3")), \
        "no victim is stopped without its nomination"
    for _ in range(3):
        c.tick(5)
        c.cycle()
    assert sum(bool(c.job(name)["status"].get("preemptions")) for name in ("l1", "l2", "l3")) == 1, "one victim"


def test_a_pod_gang_reclaiming_across_queues_takes_back_only_what_it_needs():
    """H3: a pod gang inside its guarantee evicted the whole borrowing queue, one gang a cycle, below its own
    guarantee."""
    c = MemoryCluster(nodes=3, nodes_per_unit=3)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8)))
    run(c.admin.create(GPUQUEUES, gpu_queue("b", 8)))
    c.settle(1)

    def borrower(name):
        p = pod(name, gpus=8)
        p["metadata"]["namespace"] = "team-b"
        p["metadata"]["annotations"][TERMINATE_AFTER] = "120s"
        p["spec"]["terminationGracePeriodSeconds"] = 300
        return p

    create(c, *[borrower(n) for n in ("b1", "b2", "b3")])
    c.settle(3)
    reclaimer = pod("reclaimer", gpus=8)
    reclaimer["metadata"]["namespace"] = "team-a"
    create(c, reclaimer)
    for _ in range(4):
        c.cycle()
        c.tick(5)
    evicted = [n for n in ("b1", "b2", "b3") if (o := c.store.peek(PODS, f"team-b/{n}")) is None
               or o["metadata"].get("deletionTimestamp")]
    assert len(evicted) == 1, evicted


def test_a_running_job_renamed_to_a_queue_that_does_not_exist_still_counts_in_its_own():
    """H5: `spec.queue: nowhere` on a running job took it out of its queue's limit (and billed it to no queue)."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8, limit=8)))
    c.settle(1)
    submit(c, "a", "first")
    c.settle(3)
    run(c.admin.patch(TRAININGJOBS, "first", {"spec": {"queue": "nowhere"}}, "team-a"))  # the API's CEL refuses it
    submit(c, "a", "second")
    c.settle(5)
    assert phase(c, "a", "first") == "Running" and phase(c, "a", "second") == "Queued"
    assert "limit of 8" in message(c, "a", "second")


def test_a_bound_pod_gang_relabelled_to_a_queue_that_does_not_exist_still_counts_in_its_own():
    """H5: the `superpod.dev/queue` label of a bound pod, edited, took its gang out of its queue's limit."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8, limit=8)))
    c.settle(1)
    create(c, pod("first", gpus=8))
    c.settle(3)
    run(c.admin.patch(PODS, "first", {"metadata": {"labels": {QUEUE_LABEL: "nowhere"}}}, "team-a"))
    create(c, pod("second", gpus=8))
    c.settle(4)
    assert stored(c, "first")["spec"].get("nodeName") and not stored(c, "second")["spec"].get("nodeName")
    assert [reason for reason, _ in c.events("first")].count("QueueRelabelled") == 1, "the relabel is told once"
    c.start("op-2")  # M1 of the DRA review: a new leader reads the labels; a queue not taking the namespace is not its
    c.settle(4)
    assert not stored(c, "second")["spec"].get("nodeName"), "8 + 8 GPUs > the limit of 8, after a leader change too"


@pytest.mark.parametrize("route", ["reserved", "min-runtime"])
def test_a_borrower_cannot_shield_borrowed_gpus(route):
    """H6: a borrower switched to `reserved` after admission, or asked for 30 days of minRuntimeSeconds, and the
    lender's guarantee was never given back."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)  # 16 GPUs
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8)))
    run(c.admin.create(GPUQUEUES, gpu_queue("b", 8)))
    c.settle(1)
    for name in ("b1", "b2"):
        body = training_job(name, 1, 8, **({"minRuntimeSeconds": 30 * 86400} if route == "min-runtime" else {}))
        body["metadata"]["namespace"] = "team-b"
        c.submit(body)
    c.settle(4)
    if route == "reserved":
        for name in ("b1", "b2"):
            run(c.admin.patch(TRAININGJOBS, name, {"spec": {"serviceClass": "reserved"}}, "team-b"))
    submit(c, "a", "a1")
    c.settle(30)
    assert phase(c, "a", "a1") == "Running"


def test_the_queue_policy_fails_closed():
    """H7: a GPUQueue the policy could not compute (a budget period of 0h divided by zero) dropped every queue's
    limit for that cycle, every cycle."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8, limit=8)))
    c.settle(1)
    broken = []

    def policy(*args, **kwargs):
        broken.append(1)
        raise ZeroDivisionError("float division by zero")

    c.controller.queues.policy = policy
    for name in ("a1", "a2", "a3"):
        submit(c, "a", name)
    c.settle(5)
    assert broken, "the dangerous moment: the policy failed"
    assert [phase(c, "a", n) for n in ("a1", "a2", "a3")] == ["Queued"] * 3, "nothing admitted without the policy"
    assert "admission is held" in message(c, "a", "a1")
    active = [x for x in queue_status(c, "a")["conditions"] if x["type"] == "Active"]
    assert active[0]["status"] == "False" and active[0]["reason"] == "QueuesHeld"
    del c.controller.queues.policy  # whole again: placement resumes
    c.settle(5)
    assert [phase(c, "a", n) for n in ("a1", "a2", "a3")] == ["Running", "Queued", "Queued"]


def test_a_partly_bound_pod_gang_is_evicted_whole_after_its_startup_timeout():
    """M3: a binding failed, the rest of the gang found no room, and its bound half held its GPUs forever."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    failed = fail_binding_once(c, "team-a/g-1")
    create(c, pod("g-0", "g", 2, index=0), pod("g-1", "g", 2, index=1))
    c.deliver()
    c.cycle()
    assert failed, "the dangerous moment: one binding of the gang failed"
    hi = pod("hi", gpus=8)  # takes the other node first (another scheduler binds it)
    other = next(n for n in sorted(c.store.objects[NODES]) if n != stored(c, "g-0")["spec"]["nodeName"])
    hi["spec"].update(schedulerName="default-scheduler", nodeName=other)
    create(c, hi)
    c.settle(2)
    assert stored(c, "g-0")["spec"].get("nodeName") and not stored(c, "g-1")["spec"].get("nodeName"), "partly bound"
    for _ in range(12):
        c.settle(1, seconds=60)
    g0 = stored(c, "g-0")
    assert g0 is None or g0["metadata"].get("deletionTimestamp"), "the bound half is evicted"
    assert "GangIncomplete" in [reason for reason, _ in c.events("g-0")]


def test_a_job_waiting_on_protected_borrowers_is_told_who_they_are():
    """H6: the waiting tenant's message said a node was reserved for it, never who held back what it may reclaim."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)  # 16 GPUs
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 8)))
    run(c.admin.create(GPUQUEUES, gpu_queue("b", 8, minRuntimeSeconds=3600)))
    c.settle(1)
    for name in ("b1", "b2"):
        body = training_job(name, 1, 8)
        body["metadata"]["namespace"] = "team-b"
        c.submit(body)
    c.settle(4)
    submit(c, "a", "a1")
    c.settle(3)
    assert phase(c, "a", "a1") == "Queued"
    assert "protected: team-b/b1 (it has run" in message(c, "a", "a1"), message(c, "a", "a1")
    c.settle(1, seconds=3600)
    c.settle(3)
    assert phase(c, "a", "a1") == "Running", "past the queue's minRuntimeSeconds the guarantee comes back"


def test_a_gang_whose_status_a_crash_left_unwritten_counts_against_its_queue():
    """Found by the two-tenant machine: a replica stopped between a gang's pods and its deferred status write; the
    next leader's first cycle counted nothing for that job and admitted another gang past the queue's limit."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, limit=16)))
    c.settle(1)
    submit(c, "a", "first")
    c.deliver()
    c.cycle()
    assert c.pods("first") and (c.job("first").get("status") or {}).get("phase") != "Starting", \
        "the dangerous moment: its pod exists, its placement is not written"
    c.start("op-2")  # a new leader
    create(c, *[pod(f"g-{i}", "g", 2, index=i) for i in range(2)])
    c.settle(4)
    assert phase(c, "a", "first") in ("Starting", "Running")
    assert not any(stored(c, f"g-{i}")["spec"].get("nodeName") for i in range(2)), "8 + 16 GPUs > the limit of 16"


def test_a_whole_pod_group_gang_with_an_extra_member_waiting_is_not_evicted():
    """Found by review: a running PodGroup gang (minMember 2) whose owner added a third, optional member was taken
    for a partly bound gang, and its two running pods were evicted after 600 s; whole again it never fit."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)  # 16 GPUs
    member = pod_group(c, "pg", 2)

    create(c, member("w-0"), member("w-1"))
    c.settle(4)
    assert stored(c, "w-0")["spec"].get("nodeName") and stored(c, "w-1")["spec"].get("nodeName")
    create(c, member("w-2"))  # an extra member: no room for it now
    for _ in range(12):
        c.settle(1, seconds=60)
    assert not stored(c, "w-0")["metadata"].get("deletionTimestamp"), "a whole gang is not incomplete"
    assert "GangIncomplete" not in [reason for reason, _ in c.events("w-0")]


def test_pods_whose_training_job_is_gone_count_against_the_queue_until_they_are():
    """Found by the two-tenant machine: pods a stale view placed for a job deleted meanwhile (or that the garbage
    collector has yet to delete) held GPUs no queue counted, and another gang was admitted past the limit."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, limit=16)))
    c.settle(1)
    submit(c, "a", "first")
    c.settle(3)
    c.store._owned.clear()  # the garbage collector has not come to its pods yet
    c.store.delete_now(TRAININGJOBS, "team-a/first")
    c.settle(2)
    [left] = c.pods("first")
    assert not left["metadata"].get("deletionTimestamp"), "the dangerous moment: its pod holds 8 GPUs, no job"
    create(c, *[pod(f"g-{i}", "g", 2, index=i) for i in range(2)])
    c.settle(4)
    assert not any(stored(c, f"g-{i}")["spec"].get("nodeName") for i in range(2)), "8 + 16 GPUs > the limit of 16"


@pytest.mark.parametrize("owned", [True, False], ids=["owner-reference", "labels-only"])
def test_a_pod_passing_for_a_training_jobs_replica_is_counted_and_billed_as_itself(owned):
    """Found by review: a tenant's GPU pod placed by spec.nodeName with its running job's replica labels (and owner
    reference) was taken for that replica: its 8 GPUs counted in no queue (a second job was let in past the limit)
    and billed to nobody. The chart's admission policy refuses such a pod; where it is not installed, the operator
    still takes only the pod named as the replica for it."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, limit=16)))
    c.settle(1)
    submit(c, "a", "j")
    c.settle(3)
    [replica] = c.pods("j")
    impostor = pod("sidecar", gpus=8)
    impostor["metadata"]["labels"] = dict(replica["metadata"]["labels"])
    if owned:
        impostor["metadata"]["ownerReferences"] = replica["metadata"]["ownerReferences"]
    free = sorted(set(c.store.objects[NODES]) - {replica["spec"]["nodeName"]})[0]
    impostor["spec"].update(schedulerName="default-scheduler", nodeName=free)
    create(c, impostor)
    c.settle(3)
    assert stored(c, "sidecar")["status"]["phase"] == "Running", "the dangerous moment: it holds 8 GPUs"
    assert queue_status(c, "a")["allocated"] == 16
    submit(c, "a", "k")
    c.settle(3)
    assert phase(c, "a", "k") == "Queued", "8 + 8 + 8 GPUs > the limit of 16"
    c.settle(1, seconds=100)
    c.kubelet.finish("team-a/sidecar", 0)
    c.settle(3)
    uid = stored(c, "sidecar")["metadata"]["uid"]
    [record] = [r["spec"] for r in c.store.objects.get(GPUUSAGES, {}).values() if r["metadata"]["name"] == f"{uid}-pod"]
    assert (record["queue"], record["job"]) == ("a", "sidecar") and record["gpuSeconds"] >= 8 * 100, record
    assert phase(c, "a", "j") == "Running" and phase(c, "a", "k") == "Running"


def test_a_replica_made_ahead_under_its_name_is_adopted_only_if_it_asks_for_what_the_replica_does():
    """Found by review: a pod made ahead of the operator under the replica's name, with its owner reference and labels,
    on the node the replica goes to, was adopted as the replica whatever it asked for: 4 GPUs held, counted and
    billed as the job's 1. Now the write fails and is rolled back (the pod under the replica's name goes), and the
    operator's own replica is made."""
    c = MemoryCluster(nodes=1)
    c.submit(training_job("j", 1, 1))
    made_ahead: list[str] = []

    def ahead_of_the_operator(verb, kind, what, writer):
        if verb == "create" and kind is PODS and what["metadata"]["name"] == "j-a1-0" and not made_ahead:
            ahead = json.loads(json.dumps(what))  # the replica's owner, labels and node, and 4 GPUs
            ahead["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
            ahead["metadata"].update(uid="made-ahead", creationTimestamp=rfc3339(c.now))
            ahead["status"] = {"phase": "Pending"}
            c.store._store(PODS, ahead, "create")
            made_ahead.append(ahead["metadata"]["uid"])
        return None
    c.store.fault = ahead_of_the_operator
    c.settle(4)
    assert made_ahead, "the dangerous moment: the operator's create met the pod made ahead"
    assert "pod team-a/j-a1-0 exists and is not this attempt's live pod" in message(c, "a", "j")
    c.settle(4, seconds=10)  # its retry, once the pod made ahead is gone
    assert phase(c, "a", "j") == "Running"
    [replica] = c.pods("j")
    assert replica["metadata"]["uid"] != "made-ahead", "the pod made ahead was taken for the replica"
    assert replica["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_a_pod_no_node_could_hold_takes_no_guarantee_from_its_queues_jobs():
    """Found by the machine's guarantee invariant: a waiting pod no node could ever hold (16 GPUs on 8-GPU nodes), at
    a high priority, claimed its queue's whole guarantee in the queue order; the queue's real job, inside the
    guarantee, lost its standing and never reclaimed what another queue borrowed."""
    c = MemoryCluster(nodes=4)  # 32 GPUs
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16)))
    run(c.admin.create(GPUQUEUES, gpu_queue("b", 16, limit=32)))
    c.settle(1)
    for i in range(4):
        submit(c, "b", f"b{i}")
    c.settle(3)
    assert all(phase(c, "b", f"b{i}") == "Running" for i in range(4)), "b borrows a's 16"
    never = pod("never", gpus=16)
    never["spec"]["priority"] = 1000
    create(c, never)
    c.settle(1, seconds=1)
    submit(c, "a", "j")
    for _ in range(4):
        c.settle(1, seconds=40)
    assert phase(c, "a", "j") == "Running", message(c, "a", "j")
    assert not stored(c, "never")["spec"].get("nodeName")


def test_a_bound_pod_gang_member_that_finished_no_longer_counts_in_its_queue():
    """Found by the two-tenant machine's guarantee invariant: a pod gang member bound and then finished stayed assumed
    bound (the assumption was dropped only when its gang was looked at again, or after 300 s), so its 8 GPUs counted
    against the queue's limit and a job inside the guarantee waited."""
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, limit=16)))
    c.settle(1)
    create(c, *[pod(f"g-{i}", "g", 2, gpus=8, index=i) for i in range(2)])
    c.deliver()
    run(c.controller.cycle(c.now))  # bound; the cache has not seen it yet
    c.tick()
    c.kubelet.finish("team-a/g-0", 1)
    assert all(stored(c, f"g-{i}")["spec"].get("nodeName") for i in range(2)), "the moment: bound, one finished"
    c.settle(2)
    assert queue_status(c, "a")["allocated"] == 8, queue_status(c, "a")
    create(c, pod("small", gpus=4))
    c.settle(2)
    assert stored(c, "small")["spec"].get("nodeName"), "8 + 4 GPUs are within the limit of 16"


def test_a_pod_relabelled_from_gang_to_gang_leaves_nothing_of_the_gangs_it_left():
    """Review of the pod gangs' key set: each relabel of one pod into another gang left the gang it left behind for
    good (listed and sorted every cycle, its bookkeeping never freed)."""
    c = MemoryCluster(nodes=1)
    create(c, pod("wanderer", gang="g0", gpus=16))  # asks more than a node has: it waits
    c.settle(1)
    for index in range(1, 40):
        run(c.admin.patch(PODS, "wanderer", {"metadata": {"labels": {GANG_LABEL: f"g{index}"}}}, "team-a"))
        c.settle(1)
    assert len(c.state.gang_keys) == 1 and set(c.state.by_job) == c.state.gang_keys, sorted(c.state.gang_keys)[:5]
