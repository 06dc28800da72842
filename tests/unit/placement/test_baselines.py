"""The baseline policies place as the schedulers they stand for: here, first fit that honours a required level."""

from __future__ import annotations

from superpod.core.baselines import POLICIES
from superpod.core.cycle import schedule
from tests.unit.builders import TOPO, job, node, snapshot


def three_leaves(used: dict[str, int]):
    nodes = [node(f"l{leaf}-n{i}").gpus(8).spine("spine-1").leaf(f"l{leaf}") for leaf in range(3) for i in range(4)]
    return snapshot(nodes, TOPO, used)


def test_required_first_fit_takes_the_first_leaf_that_holds_the_gang_and_first_fit_the_first_nodes():
    used = {"l0-n0": 6, "l0-n1": 6, "l0-n2": 6}  # leaf l0 has room for two of the four replicas
    gang = job("gang").gpus(4).replicas(4).required("leaf").build()
    too_big = job("too-big").gpus(8).replicas(5).required("leaf").build()  # 40 GPUs: no leaf holds it
    policy = POLICIES["gang-firstfit-required"](0)
    required = {d.job.key: d for d in schedule(three_leaves(used), [gang, too_big], policy)}
    assert required[gang.key].placement.assignments == {"l1-n0": [0, 1], "l1-n1": [2, 3]}
    assert required[gang.key].placement.domains == ("leaf l1",)
    assert required[too_big.key].placement is None
    loose = {d.job.key: d for d in schedule(three_leaves(used), [gang, too_big], POLICIES["gang-firstfit"](0))}
    assert loose[gang.key].placement.assignments == {"l0-n3": [0, 1], "l1-n0": [2, 3]}  # across leaves
    assert loose[too_big.key].placement is not None
