"""Geometry rules: fits/place, and the enumeration of valid and maximal geometries, against brute force."""

import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superpod.core.mig_catalog import PRODUCTS, product
from superpod.core.mig_geometry import fits, maximal_geometries, place, valid_geometries

H100 = product("H100-80GB")


def brute_fits(prod, names) -> bool:
    """Independent rule: try every combination of starts; no overlap, compute <= 7, per-GPU maxima."""
    profs = [prod.profile(n) for n in names]
    if sum(p.compute for p in profs) > 7 or any(Counter(names)[p.name] > p.max_per_gpu for p in profs):
        return False
    if sum(p.memory for p in profs) > 8:  # no overlap within 8 memory slices
        return False

    def assign(i: int, used: set[int]) -> bool:  # every start of every instance, in order, no symmetry pruning
        if i == len(profs):
            return True
        p = profs[i]
        for s in p.starts:
            cells = set(range(s, s + p.memory))
            if not cells & used and assign(i + 1, used | cells):
                return True
        return False

    return assign(0, set())


def test_mig_md_examples():
    assert fits(H100, ["1g.10gb"] * 7)
    assert not fits(H100, ["1g.10gb"] * 8)
    assert fits(H100, ["3g.40gb"] + ["1g.10gb"] * 4)
    assert dict(place(H100, ["3g.40gb"] + ["1g.10gb"] * 4))["3g.40gb"] == 4  # only with the 3g at start 4
    assert fits(H100, ["4g.40gb", "3g.40gb"])
    assert not fits(H100, ["4g.40gb", "4g.40gb"])
    assert not fits(H100, ["3g.40gb", "3g.40gb", "1g.10gb"])
    assert not fits(H100, ["1g.10gb+me", "1g.10gb+me"])
    assert not fits(H100, ["7g.80gb", "1g.10gb"])
    assert fits(H100, ["2g.20gb"] * 3 + ["1g.10gb"])
    assert not fits(H100, ["2g.20gb"] * 3 + ["1g.20gb", "1g.10gb"])


def test_place_gives_disjoint_allowed_placements():
    placed = place(H100, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    cells = []
    for name, start in placed:
        p = H100.profile(name)
        assert start in p.starts
        cells += range(start, start + p.memory)
    assert len(cells) == len(set(cells))


@pytest.mark.parametrize("key", sorted(PRODUCTS))
def test_enumeration_equals_brute_force(key):
    prod = PRODUCTS[key]
    names = [p.name for p in prod.profiles]
    brute = set()
    for k in range(1, 8):
        for combo in itertools.combinations_with_replacement(names, k):
            if brute_fits(prod, combo):
                brute.add(tuple(sorted(combo)))
    valid = valid_geometries(prod)
    assert len(valid) == len(set(valid))
    assert brute == {tuple(sorted(g)) for g in valid}
    maximal = maximal_geometries(prod)
    for g in maximal:
        assert all(not brute_fits(prod, (*g, n)) for n in names)
    for g in valid:
        c = Counter(g)
        assert any(not (c - Counter(m)) for m in maximal), g


def test_h100_maximal_geometries_include_the_usual_ones():
    maximal = {tuple(sorted(g)) for g in maximal_geometries(H100)}
    for g in [("7g.80gb",), ("3g.40gb", "4g.40gb"), ("3g.40gb", "3g.40gb"), ("1g.10gb",) * 7]:
        assert tuple(sorted(g)) in maximal
    assert tuple(sorted(("1g.10gb",) * 6)) not in maximal


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(PRODUCTS)), st.lists(st.integers(0, 6), min_size=0, max_size=8))
def test_fits_agrees_with_brute_force(key, picks):
    prod = PRODUCTS[key]
    names = [prod.profiles[i].name for i in picks]
    assert fits(prod, names) == brute_fits(prod, names)
    if names and fits(prod, names):
        assert sorted(n for n, _ in place(prod, names)) == sorted(names)
