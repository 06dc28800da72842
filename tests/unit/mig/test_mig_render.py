"""Rendering plans as mig-parted configs, config labels and advertised resources."""

from superpod.core.mig_catalog import product
from superpod.core.mig_planner import MigDemand, MigNode, plan
from superpod.core.mig_render import advertised, config_name, entries, render

H100 = product("H100-80GB")


def test_entries_group_devices_and_use_all_when_uniform():
    assert entries(H100, (("3g.40gb", "3g.40gb"),) * 8) == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    ]
    layout = (("3g.40gb", "4g.40gb"), None, ("4g.40gb", "3g.40gb"), None)
    assert entries(H100, layout) == [
        {"devices": [0, 2], "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "3g.40gb": 1}},
        {"devices": [1, 3], "mig-enabled": False},
    ]


def test_advertised_resources_under_mixed_strategy():
    layout = (("3g.40gb", "3g.40gb"), ("1g.10gb",) * 7, None, None)
    assert advertised(H100, layout) == {
        "nvidia.com/gpu": 2,
        "nvidia.com/mig-1g.10gb": 7,
        "nvidia.com/mig-3g.40gb": 2,
    }


def test_config_names_are_stable_valid_label_values_and_product_specific():
    e = entries(H100, (("7g.80gb",),) * 8)
    name = config_name(H100, e)
    assert name == config_name(H100, [dict(x) for x in e])
    assert name != config_name(product("A100-80GB"), e)
    assert len(name) <= 63 and name.replace("-", "").replace(".", "").isalnum()


def test_render_a_plan():
    nodes = [
        MigNode("a", "NVIDIA-H100-80GB-HBM3", (None,) * 8, dynamic=True),
        MigNode("b", "NVIDIA-H100-80GB-HBM3", (None,) * 8, dynamic=True),
    ]
    p = plan(nodes, [MigDemand("j", "3g.40gb", 4)])
    r = render(nodes, p)
    assert r.config["version"] == "v1"
    assert set(r.labels) == set(p.layouts) == {"a"}
    cfg = r.config["mig-configs"][r.labels["a"]]
    assert cfg == [
        {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False},
    ]
    assert r.config["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert r.resources == {"a": {"nvidia.com/gpu": 6, "nvidia.com/mig-3g.40gb": 4}}


def test_render_keeps_existing_configs():
    nodes = [MigNode("a", "NVIDIA-H100-80GB-HBM3", (None,), dynamic=True)]
    old = {"custom": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]}
    r = render(nodes, plan(nodes, []), existing=old)
    assert r.config["mig-configs"]["custom"] == old["custom"] and r.labels == {}
