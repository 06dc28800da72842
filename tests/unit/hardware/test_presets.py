from collections import Counter

import pytest

from superpod.hardware.presets import PRESETS, SIM_LABEL, preset_nodes


def labels(objs, key):
    return Counter(o["metadata"]["labels"].get(key) for o in objs)


def test_dgx_h100_superpod_is_four_units_of_32_nodes_under_one_spine():
    objs = preset_nodes("dgx-h100")
    assert len(objs) == 128
    assert labels(objs, "superpod.dev/leaf") == {f"su-{u}": 32 for u in range(1, 5)}
    assert labels(objs, "superpod.dev/spine") == {"dgx-spine-1": 128}
    assert sum(int(o["status"]["allocatable"]["nvidia.com/gpu"]) for o in objs) == 1024
    assert labels(objs, "nvidia.com/gpu.product") == {"NVIDIA-H100-80GB-HBM3": 128}
    assert "nvidia.com/gpu.clique" not in objs[0]["metadata"]["labels"], "HGX has no multi-node NVLink"


def test_gb200_racks_are_one_nvlink_clique_of_18_trays_with_4_gpus():
    objs = preset_nodes("gb200-nvl72")
    cliques = labels(objs, "nvidia.com/gpu.clique")
    assert len(cliques) == 8 and set(cliques.values()) == {18}
    assert all(o["status"]["capacity"]["nvidia.com/gpu"] == "4" for o in objs)
    uuid, clique_id = next(iter(cliques)).split(".")
    assert len(uuid) == 36 and clique_id.isdigit()


def test_h20_cluster_has_140_servers_of_96gb_gpus():
    objs = preset_nodes("hgx-h20")
    assert len(objs) == 140
    assert labels(objs, "nvidia.com/gpu.memory") == {"97871": 140}


def test_rental_pool_mixes_products_and_opts_half_in_to_dynamic_mig():
    objs = preset_nodes("rental-mixed")
    assert set(labels(objs, "nvidia.com/gpu.product")) == {"NVIDIA-H100-80GB-HBM3", "NVIDIA-H200",
                                                           "NVIDIA-A100-SXM4-80GB"}
    assert labels(objs, "superpod.dev/mig-dynamic")["true"] == 6
    opted = [o for o in objs if o["metadata"]["labels"].get("superpod.dev/mig-dynamic") == "true"]
    assert {o["metadata"]["labels"]["nvidia.com/gpu.product"] for o in opted} == {
        "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200", "NVIDIA-A100-SXM4-80GB"}


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_node_is_kwok_managed_named_uniquely_and_carries_gfd_labels(preset):
    objs = preset_nodes(preset, nodes=300, cluster="c1")
    names = [o["metadata"]["name"] for o in objs]
    assert len(set(names)) == 300
    for o in objs:
        lab = o["metadata"]["labels"]
        assert lab["type"] == "kwok" and lab[SIM_LABEL] == "c1"
        assert lab["kubernetes.io/hostname"] == o["metadata"]["name"]
        for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory",
                    "nvidia.com/mig.capable", "nvidia.com/mig.strategy", "superpod.dev/leaf", "superpod.dev/spine"):
            assert lab[key], key
        assert lab["nvidia.com/gpu.count"] == o["status"]["capacity"]["nvidia.com/gpu"]


def test_scale_preset_sizes_by_parameter():
    objs = preset_nodes("dgx-h100", nodes=12_500)
    assert len(objs) == 12_500
    assert len(labels(objs, "superpod.dev/leaf")) == 391  # ceil(12500 / 32) scalable units
    assert len(labels(objs, "superpod.dev/spine")) == 98  # 4 units per spine


def test_unknown_preset_is_refused_with_the_list():
    with pytest.raises(ValueError, match="dgx-h100"):
        preset_nodes("dgx-a42")
