"""Reservations that know when their holder is predicted to start, and the jobs bound (by their limit, or by their
estimate) to end before then that run inside them (EASY backfilling); which blocked jobs reserve (ReservationRule)."""

from __future__ import annotations

from dataclasses import replace

from superpod.api.convert import estimate_key
from superpod.api.times import timestamp
from superpod.controller.judge import Settings
from superpod.core.cycle import ESTIMATE, PriorityFifo, ReservationRule, schedule
from superpod.core.estimates import SERVICE, Ordering, counted, estimate, predicted_end, rounded, turn
from superpod.core.gang_key import GangKey
from superpod.core.horizon import Horizon
from superpod.core.request import GPU
from superpod.k8s.api import GPUUSAGES, PODS
from tests.unit.builders import job, node, snapshot
from tests.unit.memory_cluster import MemoryCluster, training_job

EIGHT = ((GPU, 8),)


def cluster(now: float = 0.0, ends: bool = True):
    """Two leaves of two 8-GPU nodes; only su2-n0 is free. `long` holds leaf su-1 until 10,000 s, `short` holds
    su2-n1 until 1,000 s (when `ends`: else nothing says when they end)."""
    nodes = [node(f"su{leaf}-n{i}").gpus(8).spine("spine-1").leaf(f"su-{leaf}") for leaf in (1, 2) for i in (0, 1)]
    snap = snapshot(nodes, used={"su1-n0": 8, "su1-n1": 8, "su2-n1": 8})
    snap.horizon = Horizon(now)
    if ends:
        snap.horizon.put(GangKey("default", "long"), 0.0, 10_000.0, None, [("su1-n0", EIGHT), ("su1-n1", EIGHT)])
        snap.horizon.put(GangKey("default", "short"), 0.0, 1_000.0, None, [("su2-n1", EIGHT)])
    return snap


def big():
    return job("big").gpus(8).replicas(2).required("leaf").priority(0, 0.0).build()


def one(name: str, submitted: float, runtime: float | None, estimate: float | None = None):
    """A one-node job whose limit is `runtime` (and estimate `estimate`, else the same)."""
    return replace(job(name).gpus(8).priority(0, submitted).build(), limit=runtime,
                   estimate=runtime if estimate is None else estimate)


def test_the_head_reserves_the_leaf_predicted_to_free_first_and_says_when_it_starts():
    decisions = schedule(cluster(), [big()])
    assert decisions[0].reserved == "leaf su-2"
    assert decisions[0].reason.endswith(
        "expected to start in about 17 min, when default/short ends; leaf su-2 is reserved for it")


def test_a_job_predicted_to_end_before_the_reserved_start_runs_inside_the_reservation():
    decisions = schedule(cluster(), [big(), one("quick", 1.0, 500.0)])
    assert decisions[1].placed and decisions[1].placement.assignments == {"su2-n0": [0]}


def test_by_limit_a_job_whose_estimate_ends_before_but_limit_after_keeps_off_and_by_estimate_runs_inside():
    jobs = [big(), one("guess", 1.0, 5_000.0, estimate=500.0)]
    assert not schedule(cluster(), jobs)[1].placed
    assert schedule(cluster(), jobs, PriorityFifo(ReservationRule(backfill_by=ESTIMATE)))[1].placed


def test_a_job_predicted_to_end_after_it_or_with_no_estimate_keeps_off():
    for runtime in (5_000.0, None):
        decisions = schedule(cluster(), [big(), one("slow", 1.0, runtime)])
        assert not decisions[1].placed
        assert "fits only inside leaf su-2, reserved for default/big" in decisions[1].reason


def test_without_predicted_ends_the_reservation_has_no_start_and_everyone_keeps_off():
    decisions = schedule(cluster(ends=False), [big(), one("quick", 1.0, 500.0)])
    assert decisions[0].reserved and "expected to start" not in decisions[0].reason
    assert not decisions[1].placed


def test_a_backfilled_job_is_predicted_to_end_an_estimate_after_it_starts():
    snap = cluster(now=100.0)
    schedule(snap, [big(), one("quick", 1.0, 500.0)])
    assert [(end, r.holder) for end, r in snap.horizon.releases("su2-n0")] == [(600.0, GangKey("default", "quick"))]


def test_a_young_small_head_holds_no_reservation_under_an_age_rule():
    policy = PriorityFifo(ReservationRule(after=3_600.0, from_units=32))
    young = schedule(cluster(now=600.0), [big(), one("slow", 1.0, None)], policy)
    assert young[0].reserved is None and young[1].placed
    old = schedule(cluster(now=4_000.0), [big(), one("slow", 1.0, None)], policy)
    assert old[0].reserved == "leaf su-2" and not old[1].placed


def test_only_a_small_job_blocked_for_room_uses_its_group_s_turn_to_reserve():
    """A job ahead of `big` that is not worth a reservation uses the group's turn only when it waits for room. Placed,
    or one no node can take (its nodeSelector matches none: a job its nodes were deleted under), it leaves big the
    reservation that keeps the hour-long `slow` off the node big needs."""
    policy = PriorityFifo(ReservationRule(after=3_600.0, from_units=16))
    small = [one(f"small-{i}", -2.0 + i, 100.0) for i in range(2)]
    lost = replace(job("lost").gpus(8).priority(0, -1.0).build(), node_selector=(("pool", "gone"),))
    placed = schedule(cluster(now=600.0), [small[0], big(), one("slow", 1.0, 3_600.0)], policy)
    assert placed[0].placed and placed[1].reserved == "leaf su-2"
    unservable = schedule(cluster(now=600.0), [lost, big(), one("slow", 1.0, 3_600.0)], policy)
    assert unservable[0].cause.code == "NoNodeQualifies" and unservable[1].reserved == "leaf su-2"
    assert not unservable[2].placed, "slow would hold su2-n0 past big's predicted start"
    blocked = schedule(cluster(now=600.0), [*small, big(), one("slow", 1.0, 3_600.0)], policy)
    assert blocked[0].placed and blocked[1].cause.code == "NoRoom" and blocked[2].reserved is None, "its turn"


def test_at_most_the_rule_s_number_of_reservations_per_group():
    jobs = [big(), replace(big(), name="big2", submitted=1.0), one("slow", 2.0, None)]
    one_only = schedule(cluster(), jobs)
    assert one_only[0].reserved and one_only[1].reserved is None
    two = schedule(cluster(), jobs, PriorityFifo(ReservationRule(per_group=2)))
    assert two[0].reserved == "leaf su-2" and two[1].reserved == "leaf su-1"


def test_estimates_from_history_and_limits():
    assert estimate([], None) is None
    assert estimate([], 3_600.0) == 3_600.0
    assert estimate([(100.0, None), (1_000.0, None), (3_000.0, None)], None) == rounded(2_000.0)  # the last two
    assert estimate([(1_000.0, None), (3_000.0, None)], 1_500.0) == 1_500.0  # capped by the limit
    # runs that used a half and a quarter of their limits: this one is predicted to use 3/8 of its own
    assert estimate([(1_800.0, 3_600.0), (900.0, 3_600.0)], 7_200.0) == rounded(2_700.0)
    assert estimate([(1_800.0, 3_600.0), (900.0, None)], 7_200.0) == rounded(1_350.0)  # one without: their mean
    assert estimate([(1_800.0, 3_600.0)], None) == rounded(1_800.0)  # no limit of its own: their mean
    assert 2_000.0 <= rounded(2_000.0) < 2_000.0 * 1.19
    assert predicted_end(0.0, 100.0, None, 50.0) == 100.0
    assert predicted_end(0.0, 100.0, None, 400.0) == 600.0  # outlived: half as long again as it ran
    assert predicted_end(0.0, 100.0, 500.0, 400.0) == 500.0  # never past its limit


def test_order_by_service_lets_short_small_jobs_pass_but_only_those_submitted_soon_enough():
    small = turn(100.0, 3_600.0, 1, 600.0)
    huge = turn(0.0, 86_400.0, 1_024, 600.0)
    assert small < huge  # a one-GPU hour, submitted later, goes first
    assert huge < turn(huge + 1.0, 60.0, 1, 600.0) + 1.0  # the huge one is passed only for a while


def test_the_turn_counts_a_job_as_running_what_binds_it_and_its_estimate_only_where_longer():
    assert counted(None, None, 14_400.0) == counted(2.0, None, 14_400.0) == 14_400.0, "a history cannot shorten it"
    assert counted(2.0, 600.0, 14_400.0) == counted(None, 600.0, 14_400.0) == 600.0, "a limit binds the job"
    assert counted(36_000.0, None, 14_400.0) == 36_000.0, "a history may lengthen it"


def test_the_operator_predicts_a_start_from_a_limit_and_forgets_the_gangs_that_ended():
    c = MemoryCluster(nodes=4, nodes_per_unit=4)  # one leaf
    c.submit(training_job("running", 4, maxRuntimeSeconds=600))
    c.settle(3)
    c.submit(training_job("next", 4, topology={"required": "leaf"}))
    c.settle(3)
    assert "expected to start in about 10 min, when team-a/running ends" in c.status("next")["message"]
    for key in [key for key in c.store.objects[PODS] if "/running-" in key]:
        c.kubelet.finish(key, 0)
    c.settle(5)
    assert c.status("next")["phase"] == "Running"
    assert set(c.controller.estimator.horizon.nodes_of) == {GangKey("team-a", "next")}
    assert {holder for releases in c.controller.estimator.horizon.on.values() for holder in releases} == {
        GangKey("team-a", "next")}


def test_a_gang_stopped_at_its_limit_still_frees_its_nodes_for_the_reservation_while_its_pods_terminate():
    """`soon` is stopped at its limit; for the 20 s its pods take to exit they still hold three of leaf su-2's nodes,
    where `big` is reserved to start as they go. `slow` (an hour) must not take the fourth node meanwhile: were the
    stopped gang forgotten with its pods still there, big's reservation would move to the leaf `hold` keeps for an
    hour, and slow would take big's place."""
    run, linger = "sim.superpod.dev/run-for", "sim.superpod.dev/terminate-after"
    leaf = {"topology": {"required": "leaf"}}
    c = MemoryCluster(nodes=8, nodes_per_unit=4)  # two leaves of four nodes
    c.submit(training_job("hold", 4, maxRuntimeSeconds=3600, annotations={run: "600s"}, **leaf))
    c.settle(2)
    c.submit(training_job("soon", 3, maxRuntimeSeconds=100, annotations={run: "300s", linger: "20s"}, **leaf))
    c.settle(2)
    c.submit(training_job("big", 4, **leaf))
    c.settle(2)
    c.submit(training_job("slow", 1, maxRuntimeSeconds=3600, annotations={run: "600s"}))
    c.settle(2)
    assert "reserved for team-a/big" in c.status("slow")["message"]
    stopped = timestamp(c.status("soon")["attemptStartTime"]) + 100
    while c.now < stopped + 30:
        c.tick(1)
        c.cycle()
        assert c.status("slow")["phase"] == "Queued", f"slow took a node {c.now - stopped:.0f} s after soon stopped"
    assert c.status("soon")["reason"] == "MaxRuntimeExceeded"
    assert c.status("big")["phase"] == "Running"
    assert c.status("big")["domains"]["leaf"] == c.status("soon")["domains"]["leaf"] == ["su-2"]
    assert GangKey("team-a", "soon") not in c.controller.estimator.horizon.nodes_of, "forgotten once its pods are gone"


def test_runs_of_one_job_share_an_estimate_key_and_names_that_merely_end_alike_do_not():
    def key(name: str, generated: str = "", label: str = "") -> str:
        labels = {"superpod.dev/estimate-key": label} if label else {}
        meta = {"name": name, "generateName": generated, "labels": labels}
        return estimate_key({"metadata": meta})

    assert key("train-llama-17") == key("train-llama-18") == key("train-llama-x7k2q", "train-llama-") == "train-llama"
    assert key("train-small") != key("train-large")
    assert key("sweep-3", label="pretrain") == "pretrain"
    assert key("42") == "42" and key("llama3-7") != key("llama2-7")


def test_limits_a_few_seconds_apart_make_one_shape_in_the_waiting_line():
    """A tenant's jobs whose limits differ by seconds must not each become a shape of their own (each shape waiting
    is searched when capacity frees)."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    c.submit(training_job("running", 4, maxRuntimeSeconds=600))
    c.settle(3)
    for k in range(8):
        c.submit(training_job(f"wait-{k}", 1, maxRuntimeSeconds=3600 + k))
    c.settle(3)
    line = c.controller.room.line
    assert len(line.jobs) == 8 and len(line.lines) == 1
    assert {job.limit for job in line.jobs.values()} == {rounded(3607)} and rounded(3607) >= 3607


def run_to_success(c: MemoryCluster, job: dict, seconds: float) -> None:
    """`job` placed, run for `seconds` and ended by its pods exiting 0: a run its estimate key learns from."""
    name = job["metadata"]["name"]
    c.submit(job)
    c.settle(3)
    c.tick(seconds)
    for key in [key for key in c.store.objects[PODS] if f"/{name}-" in key]:
        c.kubelet.finish(key, 0)
    c.settle(5)
    assert c.status(name)["phase"] == "Succeeded"


def test_the_runs_of_one_size_teach_only_jobs_of_that_size():
    """A tenant must not lend a big job the runtime of cheap, short small runs under the same estimate key."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    run_to_success(c, training_job("probe-1", 1), 120)
    c.submit(training_job("probe-2", 1))
    c.submit(training_job("probe-3", 4))
    c.cycle()
    views, estimator = c.controller.reader.by_key, c.controller.estimator
    assert estimator.runtime(views[GangKey("team-a", "probe-2")]) == rounded(120), "a run of its size teaches it"
    assert estimator.runtime(views[GangKey("team-a", "probe-3")]) is None, "a run of another size does not"


def test_a_run_teaches_the_share_of_its_limit_it_used_and_that_survives_in_its_usage_record():
    """A job that ran 20 min of its 1 h limit predicts that the next run under a 4 h limit takes 80 min."""
    c = MemoryCluster(nodes=4, nodes_per_unit=4)
    run_to_success(c, training_job("tune-1", 1, maxRuntimeSeconds=3600), 1200)
    [usage] = [obj for obj in c.store.objects[GPUUSAGES].values() if obj["spec"]["job"] == "tune-1"]
    assert usage["spec"]["maxRuntimeSeconds"] == 3600
    c.submit(training_job("tune-2", 1, maxRuntimeSeconds=4 * 3600))
    c.cycle()
    view = c.controller.reader.by_key[GangKey("team-a", "tune-2")]
    assert c.controller.estimator.runtime(view) == rounded(4 * 1200)


def test_by_service_two_runs_that_exit_at_once_do_not_let_a_long_job_pass_one_submitted_before_it():
    """A tenant must not buy a long job the turn of a short one: two 8-GPU runs that succeed at once teach its key an
    estimate of seconds, but its next job, bound by no limit, may run for as long as it likes. A job whose limit is
    short still passes."""
    c = MemoryCluster(nodes=1, nodes_per_unit=1, settings=Settings(not_ready_grace=300, ordering=Ordering(SERVICE)))
    for i in (1, 2):
        run_to_success(c, training_job(f"big-{i}", 1, 8), 1)
    c.submit(training_job("blocker", 1, 8))
    c.settle(3)
    honest = training_job("honest", 1, 8)
    honest["metadata"]["namespace"] = "team-b"
    c.submit(honest)
    c.settle(1, seconds=2400)
    c.submit(training_job("big-3", 1, 8))
    c.submit(training_job("quick", 1, 8, maxRuntimeSeconds=600))
    c.settle(3)
    assert c.controller.estimator.runtime(c.controller.reader.by_key[GangKey("team-a", "big-3")]) < 10
    for ended, started in (("blocker", "quick"), ("quick", "honest")):
        for key in [key for key in c.store.objects[PODS] if f"/{ended}-" in key]:
            c.kubelet.finish(key, 0)
        c.settle(4)
        running = {name for name in ("honest", "big-3", "quick") if c.decided(
            name, "team-b" if name == "honest" else "team-a").get("phase") in ("Starting", "Running")}
        assert running == {started}, (ended, running)
