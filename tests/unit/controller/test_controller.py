"""The controller end to end on the in-memory API: placement, lifecycle, gentle teardown, capacity truth, write
failures, accounting. Each test names the defect it guards against where there was one."""

from __future__ import annotations

import copy
import math

from superpod.core.gang_key import GangKey
from superpod.core.phases import Cause, Reason
from superpod.k8s.api import NODES, PODS, SERVICES, TRAININGJOBS, ApiError
from tests.unit.memory_cluster import MemoryCluster, run, training_job

RUN_5S = {"sim.superpod.dev/run-for": "5s"}


def test_gangs_place_run_and_succeed_with_exact_gpu_seconds():
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    c.submit(training_job("a", 4, 8, annotations=RUN_5S, topology={"required": "leaf"}))
    c.submit(training_job("b", 4, 8, topology={"required": "leaf"}))
    c.submit(training_job("c", 4, 8, topology={"required": "leaf"}))
    c.cycle()
    assert [c.decided(n)["phase"] for n in "abc"] == ["Starting", "Starting", "Queued"]
    assert c.status("c")["message"].endswith("leaf su-1 is reserved for it")
    c.settle(12)
    a = c.status("a")
    assert a["phase"] == "Succeeded" and a["accountedAttempts"] == 1
    assert a["finishedGpuSeconds"] == a["gpuSeconds"] == 4 * 8 * 5
    assert c.status("c")["phase"] == "Running" and c.status("c")["domain"] == "leaf su-1"
    assert [r for r, _ in c.events("a")] == ["Placed", "Completed"]  # starting and running: in the conditions


def test_a_failed_replica_restarts_the_gang_and_its_failure_is_kept():
    """Defect: failed pods were force-deleted, and why they failed vanished with them."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("f", 2, 8, maxRestarts=2))
    c.settle(2)
    failed = c.pods("f")[1]["metadata"]["name"]
    c.kubelet.finish(f"team-a/{failed}", 3, "CUDA error: out of memory")
    c.cycle()
    st = c.status("f")
    assert (st["phase"], st["reason"], st["restarts"], st["interruptions"]) == ("Queued", "PodFailed", 1, 0)
    record = st["failures"][-1]
    assert (record["attempt"], record["replica"], record["exitCode"]) == (1, 1, 3)
    assert record["message"] == "CUDA error: out of memory" and record["node"]
    assert "with exit code 3: CUDA error: out of memory" in st["message"]
    assert c.store.peek(PODS, f"team-a/{failed}")["status"]["phase"] == "Failed", "the failed pod is kept"


def test_pods_are_deleted_gracefully_and_the_next_attempt_waits_for_them():
    """Defects: pods were force-deleted (no SIGTERM, no checkpoint), and the next attempt could be bound while the
    old containers still held the GPUs."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    body = training_job("g", 2, 8, annotations={"sim.superpod.dev/terminate-after": "25s"}, maxRestarts=3)
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 45
    c.submit(body)
    c.settle(2)
    survivor, failed = (p["metadata"]["name"] for p in c.pods("g"))
    c.kubelet.finish(f"team-a/{failed}", 1)
    c.cycle()
    dying = c.store.peek(PODS, f"team-a/{survivor}")["metadata"]
    assert dying["deletionGracePeriodSeconds"] == 45, "deleted with the template's own grace period"
    c.now += 15  # past the restart backoff (10s), before the old pod has terminated (25s)
    c.kubelet.step()
    c.cycle()
    st = c.status("g")
    assert st["phase"] == "Queued" and "1 node still terminating its earlier pods" in st["message"]
    assert not [p for p in c.pods("g") if p["metadata"]["labels"]["superpod.dev/attempt"] == "2"]
    c.settle(15)
    assert c.status("g")["phase"] == "Running" and c.status("g")["attempt"] == 2


def test_a_not_ready_blip_keeps_the_gang_and_a_long_outage_restarts_it_as_an_interruption():
    """Defect: any NotReady blip restarted a gang at once."""
    c = MemoryCluster(nodes=3, nodes_per_unit=3)
    c.submit(training_job("n", 2, 8, maxRestarts=0))
    c.settle(2)
    node = c.pods("n")[0]["spec"]["nodeName"]
    c.kubelet.set_ready(node, False)
    c.settle(60, seconds=1)
    st = c.status("n")
    assert (st["phase"], st["attempt"], st["reason"]) == ("Running", 1, "NodeNotReady")
    c.kubelet.set_ready(node, True)
    c.settle(2)
    assert c.status("n")["reason"] == "Running"
    c.kubelet.set_ready(node, False)
    c.settle(32, seconds=10)
    st = c.status("n")
    assert st["attempt"] == 2 and st["phase"] == "Running", "maxRestarts 0, yet an interruption restarts it"
    assert (st["restarts"], st["interruptions"]) == (0, 1) and st["failures"][-1]["reason"] == "NodeLost"
    assert node not in st["placement"]


def test_an_image_error_fails_the_job_after_a_few_attempts():
    """Defect: an image typo looped through startup timeouts forever."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("typo", 1, 8, annotations={"sim.superpod.dev/image-error": ""}))
    c.settle(200, seconds=1)
    st = c.status("typo")
    assert (st["phase"], st["reason"], st["containerErrors"]) == ("Failed", "ContainerError", 3)
    assert "ErrImagePull: pull trainer: not found; gave up after 3 attempts" in st["message"]


def test_a_deleted_service_is_recreated():
    """Defect: a Service missing after a crash was never recreated."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("s", 2, 8))
    c.settle(2)
    c.store.delete_now(SERVICES, "team-a/s")
    c.cycle()
    assert c.store.peek(SERVICES, "team-a/s") is not None
    assert ("ServiceRecreated", "created the headless Service team-a/s") in c.events("s")


def test_a_single_replica_has_no_service_and_is_its_own_master():
    """Three writes fewer per single-replica job (its Service and two progress Events); a gang keeps its Service."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("one", 1, 8))
    c.submit(training_job("two", 2, 4))
    c.settle(3)
    assert c.status("one")["phase"] == c.status("two")["phase"] == "Running"
    assert c.store.peek(SERVICES, "team-a/one") is None and c.store.peek(SERVICES, "team-a/two") is not None
    env = {e["name"]: e["value"] for e in c.pods("one")[0]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "127.0.0.1" and "subdomain" not in c.pods("one")[0]["spec"]
    assert [reason for reason, _ in c.events("one")] == ["Placed"]


def test_a_failed_pod_write_rolls_the_whole_gang_back():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    creates = []

    def fault(verb, kind, obj, writer):
        if verb == "create" and kind is PODS:
            creates.append(obj["metadata"]["name"])
            if len(creates) == 3:
                raise ApiError(500, "InternalError", "etcd is having a bad day")
        return None

    c.store.fault = fault
    c.submit(training_job("w", 4, 8))
    c.cycle()
    st = c.status("w")
    assert (st["phase"], st["reason"], st["startupFailures"]) == ("Queued", "WriteFailed", 1)
    assert "etcd is having a bad day" in st["message"] and st["notBefore"] and "placement" not in st
    assert c.pods("w") == [], "nothing of the gang stays"
    c.store.fault = None
    c.settle(12)
    assert c.status("w")["phase"] == "Running" and c.status("w")["attempt"] == 2


def test_a_pod_the_api_server_refuses_makes_the_job_invalid_in_its_words_until_the_spec_changes():
    """Defect: an extended resource requested without a limit made every pod write fail with 422 and the job
    retried forever saying only "2 of 2 pod writes failed (Unprocessable Entity)"."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    for name in c.state.nodes:  # the network operator's device on every node
        c.update_node(name, lambda node: node["status"]["allocatable"].update({"rdma/ib": "4"}))
    body = training_job("r", 2, 8, containers=[{"name": "main", "image": "x",
                                                "resources": {"requests": {"rdma/ib": 1}}}])
    c.submit(body)
    c.settle(3)
    st = c.status("r")
    assert (st["phase"], st["reason"]) == ("Invalid", "PodRefused")
    assert "Limit must be set for non overcommitable resources" in st["message"]
    writes = len(c.store.writes)
    c.settle(20)
    assert len(c.store.writes) == writes, "no retries until the spec changes"
    job = copy.deepcopy(c.job("r"))
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"rdma/ib": 1}
    run(c.admin.replace(TRAININGJOBS, job))
    c.settle(3)
    assert c.status("r")["phase"] == "Running"


def test_the_core_books_what_the_pod_requests_of_every_resource():
    """Defects: a template asking 300 cpu was bound to a 224-cpu node; pods requesting rdma/ib were bound to nodes
    without it; sidecars and init containers were not counted."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    big = training_job("cpu", 1, 8, containers=[{"name": "main", "image": "x", "resources": {
        "requests": {"cpu": "300"}}}])
    rdma = training_job("rdma", 1, 8, containers=[{"name": "main", "image": "x", "resources": {
        "requests": {"rdma/ib": 1}, "limits": {"rdma/ib": 1}}}])
    sidecar = training_job("side", 2, 4, containers=[{"name": "main", "image": "x", "resources": {
        "requests": {"cpu": "100"}}}])
    sidecar["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "proxy", "image": "p", "restartPolicy": "Always", "resources": {"requests": {"cpu": "20"}}}]
    for body in (big, rdma, sidecar):
        c.submit(body)
    c.settle(3)
    assert c.pods("cpu") == [] and c.pods("rdma") == []
    assert c.status("cpu")["message"].endswith("2 nodes have too little cpu")
    assert (c.status("rdma")["phase"], c.status("rdma")["message"]) == (
        "Invalid", "requests rdma/ib, which no node advertises")
    placed = [p["spec"]["nodeName"] for p in c.pods("side")]
    assert len(set(placed)) == 2, "120 cpu each: two replicas cannot share a 224-cpu node though their GPUs fit"


def test_gpu_seconds_are_counted_once_even_when_the_closing_write_is_retried():
    """Defect: GPU-seconds were added before the status write succeeded, so a retried write counted them twice."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("once", 2, 8, annotations=RUN_5S))
    c.settle(3)
    refused = []

    def fault(verb, kind, obj, writer):
        if kind is TRAININGJOBS and verb == "update" and obj["status"].get("phase") == "Succeeded" and not refused:
            refused.append(1)
            raise ApiError(0, "Timeout", "no answer")
        return None

    c.store.fault = fault
    c.settle(5)
    assert refused and c.status("once")["phase"] == "Succeeded"
    assert c.status("once")["finishedGpuSeconds"] == 2 * 8 * 5


def test_a_job_deleted_while_running_is_still_metered():
    """Defect: GPU-seconds were counted only at attempt end and not for deleted jobs."""
    from prometheus_client import CollectorRegistry

    from superpod.controller.metrics import Metrics

    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.controller.meter.counter = Metrics(CollectorRegistry()).gpu_seconds
    c.submit(training_job("gone", 2, 8))
    c.settle(10)
    counted = c.controller.meter.counter.labels("", "team-a", "*", "spot")._value.get()
    assert 8 * 2 * 8 <= counted <= 8 * 2 * 10, "growing while it runs"
    c.store.delete_now(TRAININGJOBS, "team-a/gone")
    c.tick(5)
    c.cycle()
    assert c.controller.meter.counter.labels("", "team-a", "*", "spot")._value.get() >= counted + 16 * 5


def pods_billed(c: MemoryCluster) -> float:
    """What the pods billed on their own (a torn-down attempt's pods terminating after its close) used so far: their
    records, and the bills not recorded yet."""
    from superpod.api.convert import pod_usage_name

    ledger = c.state.ledger
    recorded = sum(r.gpu_seconds for records in ledger.by_queue.values() for r in records.values() if r.pod)
    return recorded + sum(amount[1] for uid, amount in c.controller.bills.every(c.now).items()
                          if pod_usage_name(uid) not in ledger.queue_of)


def test_the_gpu_seconds_counter_equals_every_jobs_usage_counted_from_scratch():
    """The counter adds a job's usage again only when the job or its pods changed (between changes, at its rate):
    at every cycle it must equal the usage of all jobs computed from their pods, through starts, ends and a
    failed replica's restart."""
    from prometheus_client import CollectorRegistry

    from superpod.controller.metering import usage
    from superpod.controller.metrics import Metrics

    c = MemoryCluster(nodes=6, nodes_per_unit=2)
    counter = c.controller.meter.counter = Metrics(CollectorRegistry()).gpu_seconds
    for name, replicas in (("short", 1), ("pair", 2), ("long", 3)):
        c.submit(training_job(name, replicas, 8, maxRestarts=2))
    checked = 0
    for step in range(24):
        c.cycle()
        if step == 6:
            pod = c.pods("short")[0]
            c.kubelet.finish(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", 0)
        if step == 9:
            pod = c.pods("pair")[0]
            c.kubelet.finish(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", 1)
        views = list(c.controller.reader.by_key.values())
        exact = sum(usage(c.state, view, c.now)[0] for view in views) + pods_billed(c)
        counted = counter.labels("", "team-a", "*", "spot")._value.get()
        if exact:
            assert math.isclose(counted, exact, rel_tol=1e-9), (step, counted, exact)
            checked += 1
        c.tick(1)
    assert checked > 15 and c.status("short")["phase"] == "Succeeded" and c.status("pair")["attempt"] >= 2


def test_the_gpu_seconds_counter_looks_only_at_touched_jobs_and_stays_exact_through_deletes_and_new_uids():
    """At fleet size a pass over every job each cycle (to find the changed ones) was an eighth of the operator's
    CPU: the meter now looks only at the jobs touched since its last observation. Through a job deleted while
    running, another made again under the same name (a new uid) and cycles where nothing changed, the counter must
    equal the usage of the jobs counted (the deleted up to their deletion), and a quiet cycle must not walk the
    jobs."""
    from prometheus_client import CollectorRegistry

    from superpod.controller.metering import usage
    from superpod.controller.metrics import Metrics

    class Counting(dict):
        walks = 0

        def keys(self):
            Counting.walks += 1
            return super().keys()

    c = MemoryCluster(nodes=6, nodes_per_unit=2)
    counter = c.controller.meter.counter = Metrics(CollectorRegistry()).gpu_seconds
    meter_observe, observed = c.controller.meter.observe, []

    def observe(state, views, now, touched=None):
        walks = Counting.walks
        meter_observe(state, Counting(views), now, touched)
        observed.append((bool(touched), Counting.walks - walks))

    c.controller.meter.observe = observe
    for name, replicas in (("kept", 2), ("gone", 1), ("again", 1)):
        c.submit(training_job(name, replicas, 8))
    deleted_usage, checked = 0.0, 0
    for step in range(20):
        c.cycle()
        if step > 9:
            exact = deleted_usage + sum(usage(c.state, view, c.now)[0] for view in c.controller.reader.by_key.values()
                                        ) + pods_billed(c)
            counted = counter.labels("", "team-a", "*", "spot")._value.get()
            assert math.isclose(counted, exact, rel_tol=1e-9), (step, counted, exact)
            checked += 1
        c.tick(1)  # a deletion below is seen by the next cycle, at this time: counted up to it
        if step == 5:
            view = c.controller.reader.by_key[GangKey("team-a", "gone")]
            deleted_usage += usage(c.state, view, c.now)[0]
            c.store.delete_now(TRAININGJOBS, "team-a/gone")
        if step == 8:
            view = c.controller.reader.by_key[GangKey("team-a", "again")]
            deleted_usage += usage(c.state, view, c.now)[0]
            c.store.delete_now(TRAININGJOBS, "team-a/again")
            c.submit(training_job("again", 1, 8))
    assert checked == 10 and c.status("again")["phase"] == "Running"
    quiet = [walks for touched, walks in observed[1:] if not touched]
    assert len(quiet) >= 3 and not any(quiet), f"cycles with nothing touched walked every job: {observed}"


def test_the_cluster_gauges_follow_jobs_pods_and_nodes_as_they_change():
    """The gauges are kept from counts (jobs by phase as read, GPUs summed again only when nodes or holdings
    change): after each change they must equal what the API shows."""
    from superpod.controller.metrics import Metrics

    c = MemoryCluster(nodes=4, nodes_per_unit=2)
    metrics = c.controller.metrics = Metrics()

    def gauges() -> tuple:
        phases = {phase: metrics.jobs.labels(phase)._value.get() for phase in ("Queued", "Running", "Succeeded")}
        product = next(iter(c.state.nodes.values())).node.labels["nvidia.com/gpu.product"]
        allocated, free = metrics.gpus_allocated.labels(product), metrics.gpus_free.labels(product)
        return phases, allocated._value.get(), free._value.get()

    c.submit(training_job("a", 2, 8))
    c.submit(training_job("b", 1, 4))
    c.submit(training_job("c", 4, 8))  # waits: 4 nodes, 3 of them free
    c.settle(3)
    assert gauges() == ({"Queued": 1, "Running": 2, "Succeeded": 0}, 20, 12)
    pod = c.pods("b")[0]
    c.kubelet.finish(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", 0)
    c.settle(2)
    assert gauges()[:2] == ({"Queued": 1, "Running": 1, "Succeeded": 1}, 16)
    c.update_node(c.pods("a")[0]["spec"]["nodeName"], lambda node: node["spec"].update(unschedulable=True))
    c.settle(1)
    assert gauges()[1:] == (16, 8), "a cordoned node's GPUs are not free"
    c.store.delete_now(TRAININGJOBS, "team-a/b")
    c.settle(1)
    assert gauges()[0] == {"Queued": 1, "Running": 1, "Succeeded": 0}


def test_specs_the_fuzzer_found_become_invalid_with_the_field_named_instead_of_looping():
    """Found by bench/fuzz_specs.py: a non-string annotation made the API server refuse the pod with 400, which was
    retried forever; a negative quantity and a MIG profile no GPU offers gave unhelpful or no verdicts."""
    c = MemoryCluster("rental-mixed", 6)
    c.submit(training_job("note", 1, 8, annotations={"a": 1}))
    c.submit(training_job("negative", 1, 8, containers=[container_with({"requests": {"cpu": -1}})]))
    c.submit(training_job("profile", 1, mig="9g.99gb"))
    c.cycle()
    assert c.status("note")["message"] == (
        "TrainingJob team-a/note: spec.template.metadata.annotations.a: expected a string, got 1")
    assert "spec.template.spec.containers[0].resources.cpu: must not be negative" in c.status("negative")["message"]
    assert c.status("profile")["message"].startswith("no GPU here offers the MIG profile 9g.99gb (MIG-capable "
                                                     "products here: A100-80GB, H100-80GB, H200-141GB")
    assert all(c.status(n)["phase"] == "Invalid" for n in ("note", "negative", "profile"))


def test_a_pod_the_api_server_cannot_decode_is_refused_like_an_invalid_one():
    c = MemoryCluster(nodes=1, nodes_per_unit=1)
    c.store.fault = lambda verb, kind, obj, writer: (_ for _ in ()).throw(ApiError(
        400, "BadRequest", 'Pod in version "v1" cannot be handled as a Pod')) if kind is PODS else None
    c.submit(training_job("garbled", 1, 8))
    c.cycle()
    st = c.status("garbled")
    assert (st["phase"], st["reason"]) == ("Invalid", "PodRefused") and "cannot be handled as a Pod" in st["message"]


def container_with(resources: dict) -> dict:
    return {"name": "main", "image": "x", "resources": resources}


def test_a_bug_that_meets_one_job_is_said_on_it_and_the_rest_schedules_on(monkeypatch):
    """Defect: one malformed object or one bug stopped every cycle."""
    from superpod.controller import controller as module

    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("cursed", 1, 8))
    c.submit(training_job("fine", 1, 8))
    c.settle(2)
    real = module.judge

    def judge(state, view, *args):
        if view.key == GangKey("team-a", "cursed"):
            raise KeyError("a bug")
        return real(state, view, *args)

    monkeypatch.setattr(module, "judge", judge)
    c.kubelet.finish(c.pods("fine")[0]["metadata"]["namespace"] + "/" + c.pods("fine")[0]["metadata"]["name"], 0)
    run(c.admin.patch(TRAININGJOBS, "cursed", {"metadata": {"labels": {"seen": "again"}}}, "team-a"))  # judged anew
    c.cycle()
    assert c.status("fine")["phase"] == "Succeeded"
    error = next(x for x in c.status("cursed")["conditions"] if x["type"] == "OperatorError")
    assert error["status"] == "True" and "KeyError('a bug')" in error["message"]
    assert ("InternalError", "the operator failed to judge this job: KeyError('a bug')") in c.events("cursed")
    monkeypatch.setattr(module, "judge", real)
    c.kubelet.finish(c.pods("cursed")[0]["metadata"]["namespace"] + "/" + c.pods("cursed")[0]["metadata"]["name"], 0)
    c.cycle()
    assert c.status("cursed")["phase"] == "Succeeded"
    assert not [x for x in c.status("cursed")["conditions"] if x["type"] == "OperatorError"], "cleared"


def queued_for_room(name: str, message: str):
    """A TrainingJob's view, Queued with reason NoRoom and `message`, written as the operator writes it."""
    from superpod.controller.jobs import _view

    obj = training_job(name, 1, 8)
    obj["metadata"].update(uid=f"uid-{name}", resourceVersion="1")
    obj["status"] = {"phase": "Queued", "reason": "NoRoom", "message": message}
    return _view(GangKey("team-a", name), obj)


def test_a_waiting_jobs_message_is_refreshed_at_most_every_half_minute_while_its_reason_stays():
    """Review finding: a message with counts in it was rewritten (a status write, an Event) every cycle the cluster
    changed; with a thousand waiting jobs that is a thousand writes a second."""
    from superpod.hardware.presets import preset_nodes

    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("holder", 2, 8))
    c.settle(1)
    c.submit(training_job("waiter", 2, 8))
    c.cycle()
    first = c.status("waiter")["message"]
    writes = len([w for w in c.store.writes if w.key == "team-a/waiter"])
    run(c.admin.create(NODES, preset_nodes("dgx-h100", 1, cluster="extra")[0]))  # room for 1 now, not 2
    for _ in range(10):
        c.tick(1)
        c.cycle()
    assert len([w for w in c.store.writes if w.key == "team-a/waiter"]) == writes and c.status("waiter")[
        "message"] == first
    c.settle(25)
    assert c.status("waiter")["message"] != first and "room for 1" in c.status("waiter")["message"]


def test_a_waiting_jobs_message_is_rewritten_at_once_when_its_cause_changes():
    """Found by CI: a job judged before the operator saw its nodes said "no node qualifies" for the next half
    minute although the real cause (too little cpu) was known a moment later."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("holder", 2, 8))
    c.settle(1)
    c.submit(training_job("waiter", 2, 8))
    c.cycle()
    assert "lack 8 free GPUs" in c.status("waiter")["message"]
    for name in [n["metadata"]["name"] for n in c.store.objects[NODES].values()]:
        c.update_node(name, lambda node: node.setdefault("spec", {}).update({"unschedulable": True}))
    c.tick(1)
    c.cycle()
    assert "cordoned" in c.status("waiter")["message"]


def test_a_long_queue_whose_cause_flips_is_rewritten_within_a_budget_oldest_first():
    """Found by bench/bench_cycle.py: with 1,000 jobs waiting, every gang that ended flipped their cause (no room /
    room only inside the head's reservation) and all of them were rewritten at once: 200 ms and hundreds of status
    writes per cycle. New jobs are always written; rewrites take from a budget, the longest unwritten first."""
    from superpod.controller.decide import wait_plans
    from superpod.controller.jobs import JobView, _view
    from superpod.core.cycle import Decision
    from superpod.core.request import make_request

    def view(name: str, phase: str | None) -> JobView:
        obj = training_job(name, 1, 8)
        obj["metadata"].update(uid=f"uid-{name}", resourceVersion="1")
        obj["status"] = {"phase": phase, "reason": "NoRoom", "message": "no room"} if phase else {}
        return _view(GangKey("team-a", name), obj)

    views = {GangKey("team-a", v): view(v, "Queued") for v in ("a", "b", "c", "d")} | {
        GangKey("team-a", "new"): view("new", None)}
    said = {f"uid-{name}": (when, "NoRoom", hash("no room")) for name, when in (("a", 30.0), ("b", 10.0), ("c", 20.0),
                                                                              ("d", 5.0))}
    inside = Cause(Reason.RESERVED_FOR_OTHERS, "fits only inside node n1, reserved for team-a/head (priority 0); it "
                   "runs after that job starts")
    decisions = [Decision(make_request("team-a", name, 1, {"nvidia.com/gpu": 8}), None, inside,
                          blocked_by=(GangKey("team-a", "head"),)) for name in ("a", "b", "c", "d", "new")]
    plans, written = wait_plans(decisions, views, {}, {}, 40.0, said, budget=2)
    assert [p.key for p in plans] == [GangKey("team-a", name) for name in ("new", "d", "b")] and written == 2
    assert said["uid-a"][0] == 30.0 and said["uid-d"][0] == 40.0, "the longest unwritten first; a waits its turn"
    status = plans[1].steps[0].status
    assert (status["reason"], status["blockedBy"]) == (
        "ReservedForOthers", [{"kind": "TrainingJob", "namespace": "team-a", "name": "head"}])


def test_a_rewrite_that_changes_nothing_takes_no_turn_from_the_budget():
    """Found by review: a job whose status already said its message (with a MIG note) stayed the longest unwritten
    and took the only rewrite of every cycle, so a job whose cause changed was never rewritten."""
    from superpod.controller.decide import wait_plans
    from superpod.core.cycle import Decision
    from superpod.core.request import make_request

    view = queued_for_room

    views = {GangKey("team-a", "noted"): view("noted", "no room; no node can be repartitioned"),
             GangKey("team-a", "moved"): view("moved", "no room")}
    said = {"uid-noted": (0.0, "NoRoom", 0), "uid-moved": (10.0, "NoRoom", 0)}
    decisions = [Decision(make_request("team-a", name, 1, {"nvidia.com/gpu": 8}), None, cause)
                 for name, cause in (("noted", Cause(Reason.NO_ROOM, "no room")),
                                     ("moved", Cause(Reason.NO_NODE_QUALIFIES, "all nodes are cordoned")))]
    notes = {GangKey("team-a", "noted"): "no node can be repartitioned"}
    plans, written = wait_plans(decisions, views, {}, notes, 100.0, said, budget=1)
    assert [p.key for p in plans] == [GangKey("team-a", "moved")] and written == 1
    assert said["uid-noted"][0] == 100.0, "it says its message already: not asked again for a while"


def test_the_longer_a_job_waited_the_less_often_its_moving_counts_are_rewritten():
    """Replaying Philly, the head of each shape's line was rewritten every 30 s while its counts moved, however long
    it had waited. Counts are refreshed every tenth of the wait (30 s to 5 minutes); a new code is written at once
    however long the job waited."""
    from superpod.controller.decide import wait_plans
    from superpod.core.cycle import Decision
    from superpod.core.request import make_request

    def view(name: str):
        return queued_for_room(name, "the cluster has room for 3")

    now = 10_000.0
    submitted = {"new": now - 100, "old": now - 3_600, "old-moved": now - 3_600}  # waited 100 s, and an hour
    views = {GangKey("team-a", name): view(name) for name in submitted}
    said = {f"uid-{name}": (now - 60, "NoRoom", 0) for name in submitted}  # its counts written a minute ago
    causes = {"new": Cause(Reason.NO_ROOM, "the cluster has room for 2"),
              "old": Cause(Reason.NO_ROOM, "the cluster has room for 2"),
              "old-moved": Cause(Reason.NO_NODE_QUALIFIES, "all nodes are cordoned")}
    decisions = [Decision(make_request("team-a", name, 1, {"nvidia.com/gpu": 8}, submitted=submitted[name]), None,
                          cause) for name, cause in causes.items()]
    plans, _ = wait_plans(decisions, views, {}, {}, now, said)
    assert sorted(p.key.name for p in plans) == ["new", "old-moved"], "an hour's wait: counts every 5 minutes"
    told = {at: {p.key.name for p in wait_plans(decisions, views, {}, {}, now + at, said)[0]} for at in (230, 240)}
    assert "old" not in told[230] and "old" in told[240], "rewritten 5 minutes after it was last written"


def test_a_flip_between_no_room_and_room_reserved_for_others_is_refreshed_like_counts():
    """Replaying Philly, 82,000 of 118,000 status writes in 16 days were waiting jobs whose cause flipped between
    NoRoom and ReservedForOthers as gangs ended and started under a head's reservation. Such a flip is refreshed
    as counts are: every tenth of the wait when the job is visited, not in turn when it is passed over (most
    turns caught the other code); any other change of code is written at once."""
    from superpod.controller.decide import wait_plans
    from superpod.core.cycle import Decision
    from superpod.core.request import make_request

    def view(name: str):
        return queued_for_room(name, "the cluster has room for 0")

    now = 10_000.0
    names = ("visited", "passed", "cordoned")
    views = {GangKey("team-a", name): view(name) for name in names}
    said = {f"uid-{name}": (now - 60, "NoRoom", 0) for name in names}  # written a minute ago, after an hour's wait
    inside = Cause(Reason.RESERVED_FOR_OTHERS, "fits only inside node n1, reserved for team-a/head (priority 0); it "
                   "runs after that job starts")
    cordoned = Cause(Reason.NO_NODE_QUALIFIES, "all nodes are cordoned")
    causes = {"visited": inside, "passed": inside, "cordoned": cordoned}
    decisions = [Decision(make_request("team-a", name, 1, {"nvidia.com/gpu": 8}, submitted=now - 3_600), None, cause,
                          blocked_by=(GangKey("team-a", "head"),) if cause is inside else ()) for name, cause in
                 causes.items()]
    passed = frozenset({GangKey("team-a", "passed")})
    plans, _ = wait_plans(decisions, views, {}, {}, now, said, passed=passed)
    assert [p.key.name for p in plans] == ["cordoned"], "a flip within the room codes waits its refresh"
    plans, _ = wait_plans(decisions, views, {}, {}, now + 240, said, passed=passed)
    assert [p.key.name for p in plans] == ["visited"], "5 minutes after the last write; not in turn"
    assert plans[0].steps[0].status["reason"] == "ReservedForOthers"


def test_an_admission_plugin_refusing_the_pod_is_invalid_but_a_full_quota_is_waited_out():
    """Found by bench/fuzz_specs.py: a template naming a PriorityClass that does not exist (or an overhead without a
    RuntimeClass) is refused by admission with 403 and was retried with backoff forever. Found by bench_operator: a
    namespace being deleted refuses new pods with 403 too, and its restarting gangs were marked Invalid (PodRefused)
    until they went."""
    for message, phase in (('pods "p" is forbidden: no PriorityClass with name missing was found', "Invalid"),
                           ('pods "p" is forbidden: exceeded quota: gpus, requested: nvidia.com/gpu=8', "Queued"),
                           ('pods "p" is forbidden: unable to create new content in namespace team-a because it is '
                            'being terminated', "Queued")):
        c = MemoryCluster(nodes=1, nodes_per_unit=1)
        c.store.fault = lambda verb, kind, obj, writer, m=message: (_ for _ in ()).throw(
            ApiError(403, "Forbidden", m)) if kind is PODS else None
        c.submit(training_job("admitted", 1, 8))
        c.cycle()
        assert c.status("admitted")["phase"] == phase and message in c.status("admitted")["message"]


def test_a_steady_gang_is_judged_again_only_when_it_or_its_pods_change(monkeypatch):
    """Found by the simulator: judging every running gang every cycle was 85 % of a replay. A gang whose job, pods,
    Service and nodes did not change gets the same verdict; one change and it is judged at once."""
    from superpod.controller import controller as module

    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("steady", 2, 8))
    c.settle(3)
    assert c.status("steady")["phase"] == "Running"
    judged = []
    real = module.judge
    monkeypatch.setattr(module, "judge", lambda state, view, *args: judged.append(view.key) or real(state, view, *args))
    for _ in range(5):
        c.tick(1)
        c.cycle()
    assert judged == [], "nothing changed: no judgement"
    pod = c.pods("steady")[0]
    run(c.admin.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"]))
    c.tick(1)
    c.cycle()
    assert judged == [GangKey("team-a", "steady")]
    assert c.status("steady")["phase"] != "Running" or c.status("steady")["reason"] != "Running", "the loss was seen"


def test_a_starting_gang_is_judged_again_only_when_it_changes_or_a_deadline_comes(monkeypatch):
    """Judging every starting gang every cycle was a fifth of the operator's CPU at 10,000 nodes (thousands of gangs
    waiting minutes for KWOK to run their pods). Unchanged, a gang's verdict moves only with time: its status delay,
    its startup timeout, a not-ready node's grace; each is acted on in the first cycle after it comes."""
    from superpod.controller import controller as module
    from superpod.hardware.kubelet import STAY_PENDING

    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("slow", 1, 8, annotations={STAY_PENDING: "true"}, startupTimeoutSeconds=30))
    c.submit(training_job("other", 1, 8, annotations={STAY_PENDING: "true"}))
    judged = []
    real = module.judge
    monkeypatch.setattr(module, "judge", lambda state, view, *args: judged.append(view.key) or real(state, view, *args))
    placed = c.now
    c.cycle()  # placed; the pods are written, the status waits (Settings.status_delay, 5 s)
    c.cycle()
    assert c.status("slow").get("phase") in (None, "Queued"), "not written yet"
    judged.clear()
    for _ in range(3):
        c.tick(1)
        c.cycle()
    assert judged == [], "nothing changed and no deadline came: no judgement"
    c.tick(2)  # 5 s after the placement
    c.cycle()
    assert c.status("slow")["phase"] == "Starting", "written in the first cycle after the status delay"
    judged.clear()
    for _ in range(20):
        c.tick(1)
        c.cycle()
    assert len(judged) <= 2, judged  # the write's own echo; then quiet until the deadline
    c.tick(placed + 31 - c.now)  # past the 30 s startup timeout
    c.cycle()
    assert c.status("slow")["reason"] == "StartupTimeout", "torn down in the first cycle after the deadline"
    assert c.status("other")["phase"] == "Starting"

    c.kubelet.set_ready(c.pods("other")[0]["spec"]["nodeName"], False)
    c.cycle()
    c.cycle()  # the NodeNotReady write's echo
    assert c.status("other")["reason"] == "NodeNotReady"
    judged.clear()
    c.tick(c.settings.not_ready_grace - 1)
    c.cycle()
    assert judged == [], "the grace has not run out"
    c.tick(2)
    c.cycle()
    assert c.status("other")["failures"][-1]["reason"] == "NodeLost", "restarted in the first cycle after the grace"


def test_jobs_passed_over_in_a_long_queue_are_told_at_once_and_then_in_turn():
    """The waiting room (controller/waiting.py) does not visit the jobs behind a shape that did not fit. A job
    that starts waiting there must still be told why at once, and a changed cause must reach every one of them
    within a few cycles (SWEEP per cycle), not only the job at the head of its shape."""
    from superpod.controller.waiting import SWEEP

    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    c.submit(training_job("holder", 2, 8))
    c.settle(1)
    queue = [f"w{index:03d}" for index in range(2 * SWEEP + 10)]
    for name in queue:
        c.submit(training_job(name, 1, 8))
    c.cycle()
    passed = sum(len(run.jobs) for run in c.controller.parked)
    assert passed == len(queue) - 2, "behind the head (it reserves) and the first searched under its reservation"
    assert all("lack 8 free GPUs" in c.status(name)["message"] for name in queue), "each told at once"
    for _ in range(2):  # the echoes of those writes come back; then nothing changes
        c.tick(1)
        c.cycle()
    assert not c.controller.room.fresh
    for name in [n["metadata"]["name"] for n in c.store.objects[NODES].values()]:
        c.update_node(name, lambda node: node.setdefault("spec", {}).update({"unschedulable": True}))
    told = []
    for _ in range(len(queue) // SWEEP + 2):
        c.tick(1)
        c.cycle()
        told.append(sum("cordoned" in c.status(name)["message"] for name in queue))
    assert told[0] <= SWEEP + 2 and told[-1] == len(queue), f"told in turn: {told}"


def test_only_a_changed_cause_rewrites_a_job_passed_over_not_its_counts():
    """Found replaying Philly: with 7,000 jobs waiting, every gang that ended moved the counts in their messages
    ("room for 3"), and each job told in turn was rewritten, its write came back as a change, and it was told
    again: 26 status writes a cycle. A job passed over is rewritten when the code of its cause changes."""
    from superpod.controller.decide import wait_plans
    from superpod.core.cycle import Decision
    from superpod.core.request import make_request

    def view(name: str):
        return queued_for_room(name, "the cluster has room for 3")

    views = {GangKey("team-a", name): view(name) for name in ("head", "passed", "moved")}
    said = {f"uid-{name}": (0.0, "NoRoom", 0) for name in ("head", "passed", "moved")}
    causes = {"head": Cause(Reason.NO_ROOM, "the cluster has room for 2"),
              "passed": Cause(Reason.NO_ROOM, "the cluster has room for 2"),
              "moved": Cause(Reason.NO_NODE_QUALIFIES, "all nodes are cordoned")}
    decisions = [Decision(make_request("team-a", name, 1, {"nvidia.com/gpu": 8}), None, cause)
                 for name, cause in causes.items()]
    passed = frozenset({GangKey("team-a", "passed"), GangKey("team-a", "moved")})
    plans, _ = wait_plans(decisions, views, {}, {}, 100.0, said, passed=passed)
    assert sorted(p.key for p in plans) == [GangKey("team-a", "head"), GangKey("team-a", "moved")]


def test_a_job_passed_over_whose_rewrite_failed_is_rewritten_on_its_next_turn():
    """Found by review: what a passed-over job was last told was remembered when its rewrite was planned; if the
    write failed (a conflict, the Lease lost), its status kept the old cause for good. Its status is compared."""
    from superpod.controller.decide import wait_plans
    from superpod.controller.jobs import _view
    from superpod.core.cycle import Decision
    from superpod.core.request import make_request

    obj = training_job("passed", 1, 8)
    obj["metadata"].update(uid="uid-passed", resourceVersion="1")
    obj["status"] = {"phase": "Queued", "reason": "NoRoom", "message": "no room"}
    views = {GangKey("team-a", "passed"): _view(GangKey("team-a", "passed"), obj)}
    said = {"uid-passed": (0.0, "NoNodeQualifies", hash("all nodes are cordoned"))}  # planned, never written
    decisions = [Decision(make_request("team-a", "passed", 1, {"nvidia.com/gpu": 8}), None,
                          Cause(Reason.NO_NODE_QUALIFIES, "all nodes are cordoned"))]
    plans, _ = wait_plans(decisions, views, {}, {}, 5.0, said, passed=frozenset({GangKey("team-a", "passed")}))
    assert [p.key for p in plans] == [GangKey("team-a", "passed")]


def test_an_invalid_job_whose_write_failed_is_said_invalid_on_a_later_cycle():
    """Found by review: a job found Invalid is kept out of the line; if writing Invalid failed, nothing changed
    for the cache and the job was not checked again until it or the nodes changed."""
    c = MemoryCluster(nodes=2, nodes_per_unit=2)
    failing = [True]

    def fault(verb, kind, obj, writer):
        if kind is TRAININGJOBS and failing[0] and (obj.get("status") or {}).get("phase") == "Invalid":
            raise ApiError(500, "InternalError", "etcd is having a bad day")
        return None

    c.store.fault = fault
    c.submit(training_job("huge", 1, None, mig="5g.999gb"))  # no GPU here offers it
    c.cycle()
    assert c.status("huge").get("phase") != "Invalid", "the write failed"
    failing[0] = False
    c.tick(1)
    c.cycle()
    assert c.status("huge")["phase"] == "Invalid"


def test_a_standby_promoted_after_churn_judges_and_schedules_on_everything_and_bills_deleted_pods():
    """A standby keeps none of the cache's changes (review M4: they grew with every pod that ever existed), so its
    first cycle as leader starts from scratch — here a replica that led, stood by while the cluster changed, and
    leads again (its controller's views of the last term are all stale): a job deleted and one submitted meanwhile,
    a pod deleted by hand, a node NotReady past its grace, and more pods made and deleted than a standby keeps runs
    of. Every job is read and judged again, the snapshot holds only what exists, and the deleted pod's run is billed."""
    from superpod.api.times import timestamp
    from superpod.controller.state import ENDED_KEPT
    from superpod.k8s.api import WATCHED

    c = MemoryCluster(nodes=6, nodes_per_unit=6)
    for name, replicas in (("stays", 1), ("leaves", 2), ("flaky", 1)):
        c.submit(training_job(name, replicas, 8))
    c.settle(3)
    assert {c.status(n)["phase"] for n in ("stays", "leaves", "flaky")} == {"Running"}
    c.leading = False
    c.state.unfollow()  # as Operator.schedule_loop does while the replica does not lead

    c.store.delete_now(TRAININGJOBS, "team-a/leaves")
    c.submit(training_job("new", 3, 8))
    flaky = c.pods("flaky")[0]
    c.tick(7)
    c.store.delete_now(PODS, f"team-a/{flaky['metadata']['name']}")
    billed = 8 * (c.now - timestamp(flaky["status"]["startTime"]))
    lost = c.pods("stays")[0]["spec"]["nodeName"]
    c.kubelet.set_ready(lost, False)
    for i in range(ENDED_KEPT + 100):  # pods other controllers made for this scheduler, come and gone
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"churn-{i}", "namespace": "team-b"},
                "spec": {"schedulerName": "superpod-scheduler", "nodeName": lost,
                         "containers": [{"name": "main", "image": "tool"}]}}
        run(c.admin.create(PODS, body))
        c.store.delete_now(PODS, f"team-b/churn-{i}")
    for _ in range(40):
        c.tick(10)
        c.deliver()
    s = c.state
    assert not (s.touched or s.edited_jobs or s.holding_changed or s.nodes_changed or s.gone)
    assert len(s.ended) <= ENDED_KEPT

    c.leading = True  # a new term: the statuses not sent are dropped, everything relisted, then cycles
    s.forget_unsent()
    for kind in WATCHED:
        items, version = run(c.api.list(kind))
        s.resync(kind, items, version, c.now)
    c.settle(15)  # (the two interrupted gangs restart after a backoff of 10 s)
    stays, flaky_status, new = c.status("stays"), c.status("flaky"), c.status("new")
    assert (stays["phase"], stays["attempt"], stays["interruptions"]) == ("Running", 2, 1)
    assert lost not in stays["placement"]
    assert (flaky_status["phase"], flaky_status["attempt"]) == ("Running", 2)
    assert math.isclose(flaky_status["finishedGpuSeconds"], billed, abs_tol=0.01), "the deleted pod's run is billed"
    assert new["phase"] == "Running", "a job submitted while it stood by is read and placed on the nodes freed"
    nodes = [node for st in (stays, flaky_status, new) for node in st["placement"]]
    assert len(nodes) == len(set(nodes)) == 5 and lost not in nodes
