"""MIG geometry rules: which sets of GPU instances fit on one GPU, derived from the catalogue's placements.

A geometry is the multiset of profiles configured on one GPU, written as a sorted tuple of profile names
(largest first). It is valid when every instance gets a placement (start, size) from its profile, no two placements
overlap in memory slices, compute slices sum to at most 7 and no profile exceeds its per-GPU maximum.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from superpod.core.mig_catalog import Product, Profile

Geometry = tuple[str, ...]

COMPUTE_SLICES = 7
MEMORY_SLICES = 8


def _order(p: Profile) -> tuple[int, int, int]:
    return (-p.memory, -p.compute, p.id)


def canonical(product: Product, names: Iterable[str]) -> Geometry:
    """Catalogue names, largest instance first; raises UnknownProductError for a name the product lacks."""
    profiles = [product.profile(n) for n in names]
    return tuple(p.name for p in sorted(profiles, key=_order))


@lru_cache(maxsize=65536)
def _place(product: Product, geometry: Geometry) -> tuple[tuple[str, int], ...] | None:
    profiles = [product.profile(n) for n in geometry]
    if sum(p.compute for p in profiles) > COMPUTE_SLICES:
        return None
    if sum(p.memory for p in profiles) > MEMORY_SLICES:
        return None
    counts = Counter(p.name for p in profiles)
    if any(counts[p.name] > p.max_per_gpu for p in profiles):
        return None
    chosen: list[tuple[str, int]] = []

    def search(i: int, used: int, prev_start: int) -> bool:
        if i == len(profiles):
            return True
        p = profiles[i]
        # identical instances take increasing starts, which prunes symmetric orders
        low = prev_start if i and profiles[i - 1] == p else -1
        for start in p.starts:
            mask = ((1 << p.memory) - 1) << start
            if start > low and not used & mask:
                chosen.append((p.name, start))
                if search(i + 1, used | mask, start):
                    return True
                chosen.pop()
        return False

    return tuple(chosen) if search(0, 0, -1) else None


def place(product: Product, names: Iterable[str]) -> tuple[tuple[str, int], ...] | None:
    """A placement (profile name, start) for each instance, or None when the instances do not fit on one GPU."""
    return _place(product, canonical(product, names))


def fits(product: Product, names: Iterable[str]) -> bool:
    """Whether the instances fit together on one GPU of this product."""
    return _place(product, canonical(product, names)) is not None


def fits_canonical(product: Product, geometry: Geometry) -> bool:
    """`fits` for a geometry already in canonical form (the planner's hot path)."""
    return _place(product, geometry) is not None


@lru_cache(maxsize=64)
def valid_geometries(product: Product) -> tuple[Geometry, ...]:
    """Every non-empty valid geometry, found by walking non-overlapping placements."""
    placements = sorted(((p, s) for p in product.profiles for s in p.starts), key=lambda ps: (ps[1], _order(ps[0])))
    found: set[Geometry] = set()

    def walk(i: int, used: int, compute: int, picked: list[Profile]) -> None:
        if picked:
            found.add(tuple(p.name for p in sorted(picked, key=_order)))
        for j in range(i, len(placements)):
            p, s = placements[j]
            mask = ((1 << p.memory) - 1) << s
            if used & mask or compute + p.compute > COMPUTE_SLICES:
                continue
            if sum(1 for q in picked if q == p) >= p.max_per_gpu:
                continue
            picked.append(p)
            walk(j + 1, used | mask, compute + p.compute, picked)
            picked.pop()

    walk(0, 0, 0, [])
    return tuple(sorted(found, key=lambda g: _geometry_key(product, g)))


@lru_cache(maxsize=64)
def maximal_geometries(product: Product) -> tuple[Geometry, ...]:
    """Valid geometries to which no further instance can be added."""
    out = []
    for g in valid_geometries(product):
        if not any(fits_canonical(product, canonical(product, (*g, p.name))) for p in product.profiles):
            out.append(g)
    return tuple(out)


def _geometry_key(product: Product, g: Geometry) -> tuple:
    return tuple(_order(product.profile(n)) for n in g)


def contains(big: Geometry, small: Iterable[str]) -> bool:
    """Multiset inclusion: every instance of `small` is in `big`."""
    have = Counter(big)
    have.subtract(Counter(small))
    return all(v >= 0 for v in have.values())


def minus(big: Geometry, small: Iterable[str]) -> Geometry:
    """Multiset difference big - small, order of `big` kept."""
    left = Counter(small)
    out = []
    for n in big:
        if left[n] > 0:
            left[n] -= 1
        else:
            out.append(n)
    return tuple(out)
