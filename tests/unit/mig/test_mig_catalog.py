"""The MIG catalogue against the table in docs/MIG.md."""

import pytest

from superpod.core.mig_catalog import PRODUCTS, UnknownProductError, product, product_by_pci_id, resource_name

# MIG.md "Profiles": profile id -> name per product
TABLE = {
    "A100-40GB": ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"],
    "A100-80GB": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H100-80GB": ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"],
    "H200-141GB": ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"],
    "B200-180GB": ["1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"],
    "H20-96GB": ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"],
}
IDS = [19, 20, 15, 14, 9, 5, 0]
SHAPE = {  # id -> (compute, memory slices, starts, max per GPU)
    19: (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    20: (1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    15: (1, 2, (0, 2, 4, 6), 4),
    14: (2, 2, (0, 2, 4), 3),
    9: (3, 4, (0, 4), 2),
    5: (4, 4, (0,), 1),
    0: (7, 8, (0,), 1),
}


@pytest.mark.parametrize("key", sorted(TABLE))
def test_profiles_match_the_table(key):
    p = PRODUCTS[key]
    assert [(q.id, q.name) for q in p.profiles] == list(zip(IDS, TABLE[key], strict=True))
    for q in p.profiles:
        assert (q.compute, q.memory, q.starts, q.max_per_gpu) == SHAPE[q.id]
        assert all(s + q.memory <= 8 for s in q.starts)


def test_only_lgipp_confirmed_products_claim_confirmed_placements():
    assert {k for k, p in PRODUCTS.items() if p.placements_confirmed} == {"A100-40GB", "H100-80GB"}
    for p in PRODUCTS.values():
        assert p.placements_confirmed or "placements inferred" in p.inferred or "all inferred" in p.inferred
    assert "inferred" in PRODUCTS["H20-96GB"].inferred


def test_lookup_by_gfd_name_key_and_pci_id():
    assert product("NVIDIA-H100-80GB-HBM3").key == "H100-80GB"
    assert product("H200-141GB").key == "H200-141GB"
    assert product("NVIDIA-A100-SXM4-80GB").key == "A100-80GB"
    assert product_by_pci_id("0x233010DE").key == "H100-80GB"
    assert product_by_pci_id("0x20b010de").key == "A100-40GB"
    assert product_by_pci_id("0x290110DE").key == "B200-180GB"


@pytest.mark.parametrize("name", ["NVIDIA-L40S", "NVIDIA-H100-80GB-HBM3-MIG-INVALID", "h100", "", "NVIDIA-GB200"])
def test_unknown_products_are_refused_not_guessed(name):
    with pytest.raises(UnknownProductError, match="not in the MIG catalogue"):
        product(name)


def test_unknown_pci_id_refused():
    with pytest.raises(UnknownProductError):
        product_by_pci_id("0x12345678")


def test_profile_names_variants_by_shape_not_by_guess():
    h100 = product("H100-80GB")
    assert h100.profile("7g.79gb").name == "7g.80gb"  # MIG.md: names vary by driver
    assert h100.profile("3g.40gb").id == 9
    assert product("B200-180GB").profile("1g.24gb").name == "1g.23gb"  # GB200-style variant of the same shape
    for bad in ("3g.20gb", "5g.40gb", "7g.60gb", "1g.10gb+me+me", "mig-1g.10gb"):
        with pytest.raises(UnknownProductError):
            h100.profile(bad)
    assert not h100.has_profile("1g.5gb")


def test_a100_40_and_80_share_a_name_for_different_profiles():
    assert product("A100-40GB").profile("1g.10gb").id == 15
    assert product("A100-80GB").profile("1g.10gb").id == 19


def test_resource_name():
    assert resource_name("3g.40gb") == "nvidia.com/mig-3g.40gb"
