import json

import pytest

from superpod.controller.state import MIG_EXPECT, mig_held
from superpod.hardware.mig_manager import GeometryError, resources_for

H100 = "NVIDIA-H100-80GB-HBM3"


def test_mixed_strategy_resources_after_a_config():
    config = [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
              {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False}]
    assert resources_for(config, H100, 8) == {"nvidia.com/mig-3g.40gb": 4, "nvidia.com/gpu": 6}
    assert resources_for([{"devices": "all", "mig-enabled": False}], H100, 8) == {"nvidia.com/gpu": 8}


@pytest.mark.parametrize("config", [
    [{"devices": "all", "mig-enabled": True, "mig-devices": {"4g.40gb": 2}}],  # 8 compute slices > 7
    [{"devices": [9], "mig-enabled": False}],
])
def test_invalid_geometry_is_refused(config):
    with pytest.raises(GeometryError):
        resources_for(config, H100, 8)


def node(state: str | None, alloc: dict, expect: dict | None) -> dict:
    labels = {"nvidia.com/mig.config.state": state} if state else {}
    notes = {MIG_EXPECT: json.dumps(expect)} if expect else {}
    return {"metadata": {"name": "n", "labels": labels, "annotations": notes}, "status": {"allocatable": alloc}}


def test_a_node_is_held_until_success_and_the_new_resources_show():
    expect = {"nvidia.com/mig-3g.40gb": 2, "nvidia.com/gpu": 7}
    assert mig_held(node("pending", {"nvidia.com/gpu": "8"}, expect))
    assert mig_held(node("success", {"nvidia.com/gpu": "8"}, expect)), "state first, device plugin later"
    assert not mig_held(node("success", {"nvidia.com/gpu": "7", "nvidia.com/mig-3g.40gb": "2"}, expect))
    assert not mig_held(node(None, {"nvidia.com/gpu": "8"}, None))
