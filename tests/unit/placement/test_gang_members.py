"""A gang whose members differ (issue 35, L1): an MPIJob's launcher beside its workers is booked by its own request —
placed, counted in its queue and freed by preemption as what it asks, not as one more worker — and each pod is bound
to a node where its own request fits. A gang of identical members is placed as before (test_placement.py)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from superpod.api.podgang import GANG_LABEL, GANG_SIZE, gang_request, in_slot_order, rank_of
from superpod.core.cycle import schedule
from superpod.core.explain import explain
from superpod.core.gang_key import POD_GANG, GangKey
from superpod.core.model import Pod
from superpod.core.placement import Solver, place, solve, validate
from superpod.core.preempt import Victim, choose
from superpod.core.request import GPU, make_request
from superpod.k8s.api import GPUQUEUES, PODS
from tests.unit.builders import job, node, snapshot
from tests.unit.memory_cluster import MemoryCluster, run
from tests.unit.placement.test_placement import two_spines
from tests.unit.placement.test_placement_exhaustive import scenarios
from tests.unit.queues.test_controller_queues import gpu_queue, phase, submit
from tests.unit.queues.test_queues import policy, queue


def member(name: str, limits: dict[str, str], namespace: str = "team-a", gang: str = "mpi", size: int = 3) -> dict:
    """A pod of a gang (labels as an MPIJob's pods would carry for this scheduler)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {GANG_LABEL: gang},
                         "annotations": {GANG_SIZE: str(size)}},
            "spec": {"schedulerName": "superpod-scheduler", "containers": [
                {"name": "main", "image": "trainer", "resources": {"limits": limits, "requests": limits}}]}}


def mpi(workers: int = 2, gpus: int = 8, namespace: str = "team-a") -> list[dict]:
    """A launcher (1 cpu, no GPU) and its workers, in rank order: the launcher's name sorts first."""
    size = workers + 1
    pods = [member("mpi-launcher", {"cpu": "1"}, namespace, size=size)]
    pods += [member(f"mpi-worker-{i}", {GPU: str(gpus), "cpu": "4"}, namespace, size=size) for i in range(workers)]
    return sorted(pods, key=rank_of)


def kubelet_node(name: str, gpus: int = 8):
    """A node as a kubelet reports it: with room for 110 pods (each pod's request counts one)."""
    built = node(name).gpus(gpus).build()
    built.allocatable["pods"] = 110
    return built


def two_nodes():
    return snapshot([kubelet_node("n0"), kubelet_node("n1")])


# ---- the gang's request -------------------------------------------------------------------------------------------
def test_an_mpi_gang_is_booked_by_each_members_own_request():
    request = gang_request(GangKey("team-a", "mpi", POD_GANG), mpi())
    assert request.total_units == 16, "2 workers x 8 GPUs; the launcher holds none"
    assert request.total_requests[GPU] == 16 and request.total_requests["cpu"] == 9000
    assert (request.replicas, request.size) == (2, 3)
    assert [pod["metadata"]["name"] for pod in in_slot_order(mpi())] == ["mpi-worker-0", "mpi-worker-1",
                                                                         "mpi-launcher"]


def test_the_identical_members_are_the_most_common_request_a_tie_going_to_the_larger():
    one_each = [member("ps", {GPU: "4"}, size=2), member("worker", {GPU: "8"}, size=2)]
    request = gang_request(GangKey("team-a", "mpi", POD_GANG), one_each)
    assert dict(request.requests)[GPU] == 8 and request.replicas == 1
    assert [dict(other)[GPU] for other in request.others] == [4]
    many_loaders = [member(f"loader-{i}", {"cpu": "2"}, size=4) for i in range(3)] + [member("gpu", {GPU: "8"}, size=4)]
    request = gang_request(GangKey("team-a", "mpi", POD_GANG), many_loaders)
    assert request.replicas == 3 and dict(request.requests) == {"cpu": 2000, "pods": 1}
    assert request.total_units == 8


# ---- placement, queues, preemption --------------------------------------------------------------------------------
def test_an_mpi_gang_fits_two_8_gpu_nodes_and_books_only_what_each_member_asks():
    snap = two_nodes()
    request = gang_request(GangKey("team-a", "mpi", POD_GANG), mpi())
    p = place(snap, request)
    assert p is not None, "booked as 3 x 8 GPUs it would need a third node"
    assert sorted(r for ranks in p.assignments.values() for r in ranks) == [0, 1, 2]
    assert p.counts[-1] == 2, "the launcher shares a worker's node"
    snap.assume(request, p.assignments)
    assert all(free.get(GPU, 0) == 0 and free["cpu"] >= 0 for free in snap.free)
    assert snap.free[0]["cpu"] + snap.free[1]["cpu"] == 2 * 64000 - 9000, "the launcher books its 1 cpu only"


def test_a_queue_counts_an_mpi_gang_at_its_16_gpus():
    snap = two_nodes()
    request = gang_request(GangKey("team-a", "mpi", POD_GANG), mpi())
    decisions = schedule(snap, [request], policy(snap, [queue("team-a", 16, limit=16)]))
    assert decisions[0].placed, decisions[0].reason


def test_preemption_frees_16_gpus_for_an_mpi_gang_not_24():
    snap = snapshot([kubelet_node(f"n{i}") for i in range(3)])
    victims = []
    for i in range(3):
        snap.add_pod(Pod(f"ns/low{i}-0", f"n{i}", ((GPU, 8),)))
        victims.append(Victim(f"ns/low{i}", 0, 8.0, 100.0, (f"ns/low{i}-0",)))
    request = gang_request(GangKey("team-a", "mpi", POD_GANG), mpi())
    found = choose(snap, request, victims)
    assert found is not None
    assert sum(v.gpus for v in found.victims) == 16, found.victims
    assert len({n for n in found.placement.assignments}) == 2


def test_a_waiting_mpi_gang_says_what_each_member_needs():
    snap = two_nodes()
    snap.add_pod(Pod("ns/other", "n0", ((GPU, 8),)))
    request = gang_request(GangKey("team-a", "mpi", POD_GANG), mpi())
    assert place(snap, request) is None
    why = explain(snap, request).message
    assert why.startswith("needs 2 nodes with 8 free NVIDIA-H100-80GB-HBM3 GPUs and 1 pod of 1 cpu"), why


def test_the_others_find_no_room_beside_the_identical_members_said_so():
    snap = snapshot([node("n0").gpus(8).cpu(4000), node("n1").gpus(8).cpu(4000)])
    request = make_request("ns", "j", 2, {GPU: 8, "cpu": 4000}, others=((("cpu", 1000),),))
    assert place(snap, request) is None
    assert "the cluster has room for 2, but not for its 1 other member beside them" in explain(snap, request).message


# ---- differing members across the topology ------------------------------------------------------------------------
def ranks_on(p) -> dict[int, str]:
    return {rank: name for name, ranks in p.assignments.items() for rank in ranks}


def test_a_parameter_server_goes_beside_the_workers_in_their_leaf():
    snap = two_spines(used={"s0l0n3": 4})  # s0l0: three whole nodes and one with 4 free GPUs
    request = make_request("ns", "j", 3, {GPU: 8}, required="leaf", others=(((GPU, 4),),))
    p = place(snap, request)
    assert ranks_on(p) == {0: "s0l0n0", 1: "s0l0n1", 2: "s0l0n2", 3: "s0l0n3"}
    assert p.counts == (1, 1, 4)


def test_another_member_goes_to_the_tightest_domain_then_the_next_level_up():
    # s0l0 holds the two workers exactly (its other nodes are full); the 4-GPU member goes to spine s0's other leaf,
    # not to the equally tight node of spine s1
    snap = two_spines(used={"s0l0n2": 8, "s0l0n3": 8, "s0l1n0": 4, "s1l0n0": 4})
    request = make_request("ns", "j", 2, {GPU: 8}, others=(((GPU, 4),),))
    p = place(snap, request)
    assert ranks_on(p) == {0: "s0l0n0", 1: "s0l0n1", 2: "s0l1n0"}
    assert p.counts == (1, 2, 3)


def test_a_required_leaf_holds_the_other_members_too_or_the_next_leaf_is_taken():
    # s0l0 is the tightest leaf for 3 workers, but leaves its 4-GPU member no room: the gang goes to s0l1
    snap = two_spines(used={"s0l0n3": 8, "s0l1n3": 4})
    request = make_request("ns", "j", 3, {GPU: 8}, required="leaf", others=(((GPU, 4),),))
    p = place(snap, request)
    assert set(ranks_on(p).values()) == {"s0l1n0", "s0l1n1", "s0l1n2", "s0l1n3"}
    assert ranks_on(p)[3] == "s0l1n3"


def test_a_required_node_holds_every_member_or_another_node_is_taken():
    snap = snapshot([node("a").gpus(8), node("b").gpus(8)], used={"a": 2})
    request = make_request("ns", "j", 2, {GPU: 2}, required="node", others=(((GPU, 4),),))
    p = place(snap, request)
    assert p is not None and list(p.assignments) == ["b"], "a (6 free) is tighter but cannot hold the 4-GPU member"


def test_slices_count_the_identical_members_only():
    snap = two_spines()
    request = make_request("ns", "j", 4, {GPU: 8}, slice_size=2, slice_required="leaf", others=((("cpu", 1000),),))
    assert validate(snap, request) is None
    p = place(snap, request)
    assert p is not None and len({snap.nodes[snap.index[n]].labels["superpod.dev/leaf"] for n in p.assignments}) <= 2


def test_when_the_others_find_no_room_the_gang_is_placed_as_every_member_at_the_largest_request():
    # no required level: the workers' best spot (a, tightest) leaves the 6-GPU member no room anywhere; booked at the
    # largest, the gang takes b and c
    snap = snapshot([node("a").gpus(8), node("b").gpus(8), node("c").gpus(8)], used={"a": 0, "b": 2, "c": 2})
    request = make_request("ns", "j", 1, {GPU: 6}, others=(((GPU, 4),), ))
    p = place(snap, request)
    assert p is not None
    snap.assume(request, p.assignments)
    assert all(free[GPU] >= 0 for free in snap.free)


def test_a_uniform_gang_has_no_others():
    uniform = job("j").gpus(8).replicas(3).build()
    assert uniform.others == () and uniform.at_largest() is uniform
    assert uniform.total_units == 24 and uniform.size == 3


# ---- binding: each pod where its own request fits -----------------------------------------------------------------
def test_each_pod_of_an_mpi_gang_is_bound_to_a_node_where_its_own_request_fits():
    c = MemoryCluster(nodes=2)
    other = member("busy", {"cpu": "2"}, "team-b")  # a pod bound by another scheduler: n02 is the tighter fit
    other["spec"].update(schedulerName="default-scheduler", nodeName="dgx-su01-n02")
    run(c.admin.create(PODS, other))
    c.settle(1)
    for pod in mpi():  # the launcher ranks first, but its slot is the last: on n02, beside worker 1's

        run(c.admin.create(PODS, pod))
    c.settle(3)
    nodes = {}
    for pod in mpi():
        stored = c.store.peek(PODS, f"team-a/{pod['metadata']['name']}")
        assert stored["spec"].get("nodeName"), pod["metadata"]["name"]
        nodes[pod["metadata"]["name"]] = stored["spec"]["nodeName"]
    assert nodes == {"mpi-worker-0": "dgx-su01-n01", "mpi-worker-1": "dgx-su01-n02", "mpi-launcher": "dgx-su01-n02"}


def test_a_queue_counts_a_bound_mpi_gang_at_16_gpus():
    c = MemoryCluster(nodes=4)
    run(c.admin.create(GPUQUEUES, gpu_queue("a", 16, limit=24)))
    for pod in mpi():
        run(c.admin.create(PODS, pod))
    c.settle(2)
    submit(c, "a", "after")  # 8 GPUs more: 24, at the limit (booked at 3 x 8 the gang alone held 24)
    c.settle(2)
    assert phase(c, "a", "after") in ("Starting", "Running"), c.job("after", "team-a").get("status")


# ---- on random clusters: every member fits, inside the required domain, whenever today's booking would -------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.lists(st.sampled_from([(("cpu", 1000),), ((GPU, 4), ("cpu", 1000)), ((GPU, 2),), ((GPU, 8),)]),
                             min_size=1, max_size=2))
def test_differing_members_fit_where_placed_and_are_placed_when_booked_at_the_largest(scenario, others):
    snap, uniform, exclude, exclude_nodes = scenario
    request = replace(uniform, others=tuple(tuple(sorted(o)) for o in others))
    p = solve(Solver(snap, request, exclude, exclude_nodes=exclude_nodes))
    largest = request.at_largest()
    if validate(snap, largest) is None and solve(Solver(snap, largest, exclude, exclude_nodes=exclude_nodes)):
        assert p is not None, "placed whenever every member booked at the largest request is"
    if p is None:
        return
    assert sorted(r for ranks in p.assignments.values() for r in ranks) == list(range(request.size))
    used = [snap.index[name] for name in p.assignments]
    assert not set(used) & exclude_nodes
    assert not {d for i in used for d in snap.ancestors[i]} & exclude
    if request.required:
        level = snap.topology.index(request.required)
        deepest = [snap.ancestors[i][level] if level < len(snap.ancestors[i]) else i for i in used]
        assert len(set(deepest)) == 1, "every member inside the required domain"
    before = [dict(free) for free in snap.free]
    snap.assume(request, p.assignments)
    for i in used:
        assert all(amount >= 0 for resource, amount in snap.free[i].items() if before[i].get(resource, 0) >= 0), \
            "each member's own request fits its node"
