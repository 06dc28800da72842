"""Pod gangs under faults and bad actors (each case failed before its fix, found by an independent review): an
assumption outlives neither a binding never sent nor the pod it was for, a lost answer keeps it, the rest of a
sliced gang can still be placed, queues count bindings not yet observed and pods that came to disagree, victims are
evicted only after the nomination is written, and a nomination annotation nobody's policy would make is ignored."""

from __future__ import annotations

import copy
import json

from superpod.api.podgang import TOPOLOGY
from superpod.k8s.api import GPUQUEUES, PODS, TRAININGJOBS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run, training_job
from tests.unit.podgangs.test_pod_gangs import create, fail_binding_once, pod, scheduled, stored, two_running_gangs
from tests.unit.queues.test_controller_queues import gpu_queue, phase, submit


def bound(c: MemoryCluster, *names: str) -> list[str | None]:
    return [stored(c, name)["spec"].get("nodeName") for name in names]


def test_a_binding_decided_but_never_sent_is_not_assumed_after_the_cycle():
    c = MemoryCluster(nodes=4)
    create(c, *[pod(f"g-{i}", "g", 2, index=i) for i in range(2)])
    c.deliver()
    plans = c.controller.plan(c.now)
    assert any(type(step).__name__ == "BindPods" for plan in plans for step in plan.steps)
    c.leading = False  # the Lease is lost between deciding and writing
    assert run(c.controller.applier.apply(plans)).stopped, "the dangerous moment: nothing was sent"
    c.leading = True  # the same replica leads again
    c.settle(3)
    assert all(bound(c, "g-0", "g-1"))


def test_a_pod_made_again_under_the_same_name_is_not_taken_for_the_assumed_one():
    c = MemoryCluster(nodes=4)
    create(c, pod("web-0", "web", 1))
    c.deliver()
    run(c.controller.cycle(c.now))  # bound; the watch has not shown it yet
    c.store.delete_now(PODS, "team-a/web-0")  # its owner replaces it (a StatefulSet: same name, a new uid)
    create(c, pod("web-0", "web", 1))
    c.settle(3)
    assert bound(c, "web-0")[0]


def test_a_binding_whose_answer_was_lost_stays_assumed_so_its_node_is_not_booked_twice():
    c = MemoryCluster(nodes=1)
    c.store.fault = lambda verb, kind, what, writer: "lose-answer" if verb == "bind" and what == "team-a/x" else None
    create(c, pod("x", gpus=8))
    c.deliver()
    run(c.controller.cycle(c.now))  # x's binding lands, its answer is lost
    assert c.controller.applier.bindings["team-a/x"][1] == "unknown", "the dangerous moment: a lost answer"
    urgent = pod("y", gpus=8)
    urgent["spec"]["priority"] = 10
    create(c, urgent)
    created = c.store.events[-1]  # only y's creation reaches the cache, not x's binding
    c.state.apply(created.kind, created.type, copy.deepcopy(created.obj), c.now)
    c.now += 1
    run(c.controller.cycle(c.now))
    c.deliver()
    assert bound(c, "x", "y") == ["dgx-su01-n01", None]


def test_the_rest_of_a_sliced_gang_is_placed_without_the_whole_gangs_slices():
    c = MemoryCluster(nodes=16, nodes_per_unit=4)
    failed = fail_binding_once(c, "team-a/g-3")
    members = [pod(f"g-{i}", "g", 4, index=i, required="leaf") for i in range(4)]
    for member in members:
        member["metadata"]["annotations"].update({TOPOLOGY["slice_size"]: "2", TOPOLOGY["slice_required"]: "leaf"})
    create(c, *members)
    c.cycle()
    assert failed and not bound(c, "g-3")[0]
    c.settle(3)
    assert bound(c, "g-3")[0], scheduled(c, "g-3")


def test_queues_count_bindings_not_yet_observed_and_pods_that_came_to_disagree():
    c = MemoryCluster(nodes=8)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, limit=16)))
    c.settle(1)
    create(c, *[pod(f"a-{i}", "a", 2, index=i) for i in range(2)])
    create(c, *[pod(f"b-{i}", "b", 2, index=i) for i in range(2)])
    c.deliver()
    run(c.controller.cycle(c.now))  # one gang's bindings sent, not yet observed
    c.now += 1
    run(c.controller.cycle(c.now))
    c.settle(2)
    assert sum(map(bool, bound(c, "a-0", "a-1", "b-0", "b-1"))) == 2, "16 GPUs under a 16-GPU limit"
    gang = "a" if bound(c, "a-0")[0] else "b"
    edited = c.store.peek(PODS, f"team-a/{gang}-1")
    edited["metadata"]["annotations"][TOPOLOGY["preferred"]] = "leaf"  # one bound pod now disagrees
    c.store._store(PODS, edited, "update")
    submit(c, "a", "after")
    c.settle(3)
    assert phase(c, "a", "after") == "Queued", "the gang still counts against the limit"


def test_pod_gang_victims_are_not_evicted_when_the_nomination_was_not_written():
    c = two_running_gangs()
    c.submit(training_job("urgent", 2, 8, priority=100))
    c.deliver()
    failed = []

    def fault(verb, kind, what, writer):
        if kind is TRAININGJOBS and verb == "update" and what["metadata"]["name"] == "urgent" and not failed:
            failed.append(verb)
            raise ApiError(409, "Conflict", "the object has been modified")
        return None
    c.store.fault = fault
    run(c.controller.cycle(c.now))
    c.deliver()
    assert failed, "the dangerous moment: the nomination write failed"
    assert not any(stored(c, name)["metadata"].get("deletionTimestamp")
                   for name in ("low-0", "low-1", "other-0", "other-1"))
    c.settle(40)
    assert c.status("urgent")["phase"] == "Running"
    assert sum(bool(stored(c, name) is None or stored(c, name)["metadata"].get("deletionTimestamp"))
               for name in ("low-0", "other-0")) == 1, "one set of victims"


def test_a_forged_nomination_annotation_is_ignored():
    c = MemoryCluster(nodes=4)
    body = training_job("batch", 2, 8, priority=1000)
    body["metadata"]["namespace"] = "team-b"
    c.submit(body)
    c.settle(3)
    status = c.job("batch", "team-b")["status"]
    forged = pod("forged", gpus=8)
    forged["spec"]["nodeSelector"] = {"no": "such-node"}
    forged["metadata"]["annotations"]["superpod.dev/nomination"] = json.dumps({  # where nominations once were
        "nodes": ["dgx-su01-n03", "dgx-su01-n04"], "victims": ["team-b/batch"],
        "attempts": {"team-b/batch": status["attempt"]}, "time": "2099-01-01T00:00:00Z"})
    create(c, forged)
    c.settle(3)
    assert not c.job("batch", "team-b")["status"].get("preemptions")
