"""The MIG planner: table cases for each rule, and property tests on random instances."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superpod.core.mig_catalog import product
from superpod.core.mig_geometry import fits
from superpod.core.mig_planner import MigDemand, MigNode, plan
from tests.unit.mig_cases import check_plan, random_instance

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"
H200 = "NVIDIA-H200"
OFF = (None,) * 8


def node(name, gpus=OFF, product=H100, busy=False, dynamic=True, in_use=None):
    return MigNode(name, product, tuple(gpus), busy=busy, dynamic=dynamic, in_use=in_use or {})


def job(name, profile, replicas, priority=0, product=None):
    return MigDemand(name, profile, replicas, priority, product)


def run(nodes, demands):
    p = plan(nodes, demands)
    check_plan(nodes, demands, p)
    return p


def test_free_instances_are_used_before_any_reconfiguration():
    nodes = [node("a", [("3g.40gb", "3g.40gb")] * 2 + [None] * 6)]
    p = run(nodes, [job("j", "3g.40gb", 4)])
    assert p.satisfied == ("j",) and p.layouts == {} and p.assignment == {"j": {"a": 4}}


def test_mig_disabled_gpus_are_partitioned_and_whole_gpus_kept_where_possible():
    nodes = [node("a", [("1g.10gb",) * 7] + [None] * 7)]
    p = run(nodes, [job("j", "3g.40gb", 2)])
    assert p.satisfied == ("j",)
    assert p.gpus_reconfigured == 1 and p.changed["a"] == (0,)  # the MIG GPU changes; whole GPUs stay whole
    assert sorted(p.layouts["a"][0]) == ["3g.40gb", "3g.40gb"]


def test_busy_node_is_never_reconfigured_but_its_free_instances_count():
    busy = node("busy", [("3g.40gb", "3g.40gb")] + [None] * 7, busy=True, in_use={"3g.40gb": 1})
    p = run([busy], [job("j", "3g.40gb", 1), job("k", "3g.40gb", 1)])
    assert p.layouts == {} and len(p.satisfied) == 1


def test_node_not_opted_in_is_never_reconfigured():
    p = run([node("static", dynamic=False)], [job("j", "1g.10gb", 1)])
    assert p.layouts == {} and p.unsatisfied == ("j",)


def test_gangs_are_all_or_none():
    p = run([node("a", [None])], [job("big", "3g.40gb", 3), job("small", "3g.40gb", 2)])
    assert p.satisfied == ("small",) and p.unsatisfied == ("big",)


def test_higher_priority_wins_even_when_it_satisfies_fewer_replicas():
    nodes = [node("a", [None, None])]
    p = run(nodes, [job("many", "1g.10gb", 14, priority=0), job("vip", "7g.80gb", 1, priority=9)])
    assert p.satisfied == ("vip",)
    assert "many" in p.unsatisfied


def test_most_replicas_within_a_priority_level():
    # one GPU: either 2 x 3g (2 replicas) or 7 x 1g (7 replicas)
    p = run([node("a", [None])], [job("pair", "3g.40gb", 2), job("seven", "1g.10gb", 7)])
    assert p.satisfied == ("seven",)


def test_product_selector_and_mixed_products():
    nodes = [node("h", [None] * 2), node("a", [None] * 2, product=A100)]
    p = run(nodes, [job("onA", "3g.20gb", 2, product="A100-40GB"), job("onH", "3g.40gb", 2, product=H100)])
    assert p.assignment == {"onA": {"a": 2}, "onH": {"h": 2}}
    p = run(nodes, [job("wrong", "3g.40gb", 1, product=A100)])  # A100-40GB has no 3g.40gb
    assert p.unsatisfied == ("wrong",) and "wrong" in p.refused


def test_a_profile_name_served_by_two_products():
    # 1g.10gb is profile 15 on A100-40GB and profile 19 on H100: both advertise nvidia.com/mig-1g.10gb
    nodes = [node("a", [("1g.10gb",) * 4], product=A100, dynamic=False), node("h", [None])]
    p = run(nodes, [job("j", "1g.10gb", 6)])
    assert p.assignment == {"j": {"a": 4, "h": 2}}


def test_unknown_product_node_is_refused_not_guessed():
    p = run([node("x", product="NVIDIA-L40S"), node("h", [None])], [job("j", "7g.80gb", 1)])
    assert "x" in p.refused and "not in the MIG catalogue" in p.refused["x"]
    assert p.assignment == {"j": {"h": 1}}


def test_fewest_gpus_then_nodes():
    nodes = [node("a", [None] * 4), node("b", [None] * 4)]
    p = run(nodes, [job("j", "2g.20gb", 3), job("k", "1g.10gb", 1)])
    assert p.gpus_reconfigured == 1 and p.nodes_reconfigured == 1


def test_leftover_kept_in_the_largest_shapes():
    p = run([node("a", [None])], [job("j", "1g.10gb", 1)])
    assert sorted(p.layouts["a"][0]) == sorted(["4g.40gb", "2g.20gb", "1g.10gb"])


def test_reuses_a_gpu_partly_pinned_rather_than_wasting_free_instances():
    # MIG.md example: 3g + 4 x 1g fits only with the 3g at start 4
    nodes = [node("a", [("3g.40gb", "3g.40gb")] + [None] * 7)]
    p = run(nodes, [job("j", "3g.40gb", 1), job("k", "1g.10gb", 4)])
    assert p.gpus_reconfigured == 1 and sorted(p.layouts["a"][0]) == sorted(["3g.40gb"] + ["1g.10gb"] * 4)


def test_one_demand_per_job():
    with pytest.raises(ValueError):
        plan([node("a")], [job("j", "1g.10gb", 1), job("j", "1g.10gb", 1)])


def test_h200_names():
    p = run([node("a", [None], product=H200)], [job("j", "3g.71gb", 2)])
    assert sorted(p.layouts["a"][0]) == ["3g.71gb", "3g.71gb"]


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32))
def test_random_plans_keep_the_rules_and_never_over_promise(seed):
    nodes, demands = random_instance(random.Random(seed))
    p = plan(nodes, demands)
    check_plan(nodes, demands, p)  # busy / not-opted-in untouched, geometries valid, promises backed
    for name, layout in p.layouts.items():
        prod = product(next(x for x in nodes if x.name == name).product)
        assert all(g is None or fits(prod, g) for g in layout)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32))
def test_larger_random_plans_keep_the_rules(seed):
    nodes, demands = random_instance(random.Random(seed), max_nodes=12, max_gpus=8)
    check_plan(nodes, demands, plan(nodes, demands))
