"""Random devices and claims: an allocation always satisfies every selector and constraint and never gives a device
twice, and one is found exactly when a brute-force search finds one."""

import itertools
import random

import pytest

from superpod.core.dra.allocate import Allocator, Shortfall, counts_exactly
from superpod.core.dra.model import ALL, MISSING, node_pools, read_claim_spec, read_classes, read_slices
from superpod.core.dra.selectors import Selectors

from .objects import device, device_class, resource_slice

# Each selector beside what it means, so the brute force does not go through CEL.
SELECTORS = {
    "device.attributes['gpu.nvidia.com'].productName == 'A'": lambda d: d.attribute("gpu.nvidia.com",
                                                                                    "productName") == "A",
    "device.attributes['gpu.nvidia.com'].?clique.orValue('') == 'x'": lambda d: d.attribute("gpu.nvidia.com",
                                                                                            "clique") == "x",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0":
        lambda d: d.capacity_of("gpu.nvidia.com", "memory") >= 80 * 2 ** 30,
}
CLASSES = {"any": "device.driver == 'gpu.nvidia.com'", "a": "device.attributes['gpu.nvidia.com'].productName == 'A'"}
CONSTRAINED = ("gpu.nvidia.com/clique", "gpu.nvidia.com/productName")


def random_devices(rng: random.Random) -> list[dict]:
    out = []
    for i in range(rng.randint(1, 6)):
        attributes = {"productName": rng.choice("AB")}
        if rng.random() < 0.8:
            attributes["clique"] = rng.choice("xy")
        out.append(device(f"d{i}", {"memory": rng.choice(["40Gi", "80Gi"])}, **attributes))
    return out


def random_request(rng: random.Random, name: str) -> dict:
    def one(sub: str | None) -> dict:
        body = {"deviceClassName": rng.choice(list(CLASSES)),
                "selectors": [{"cel": {"expression": e}} for e in rng.sample(list(SELECTORS), rng.randint(0, 1))]}
        if sub is None and rng.random() < 0.1:
            body["allocationMode"] = ALL
        else:
            body["count"] = rng.randint(1, 2)
        return {"name": sub, **body} if sub else body

    if rng.random() < 0.3:
        return {"name": name, "firstAvailable": [one("s0"), one("s1")]}
    return {"name": name, "exactly": one(None)}


def random_claim(rng: random.Random) -> dict:
    requests = [random_request(rng, f"r{i}") for i in range(rng.randint(1, 2))]
    devices = {"requests": requests}
    if rng.random() < 0.4:
        named = [r["name"] for r in requests if rng.random() < 0.5]
        devices["constraints"] = [{"requests": named, "matchAttribute": rng.choice(CONSTRAINED)}]
    return {"devices": devices}


def brute_force(pools, taken, claims) -> bool:
    """Every choice of alternatives and of device sets, then the constraints checked on the whole."""
    steps = [(i, request) for i, claim in enumerate(claims) for request in claim.requests]

    def matches(d, request):
        return CLASSES_PREDICATES[request.class_name](d) and all(SELECTORS[e](d) for e in request.selectors)

    def search(step, used, chosen):
        if step == len(steps):
            return all(constraints_hold(claim, chosen[i]) for i, claim in enumerate(claims))
        claim_index, device_request = steps[step]
        for request in device_request.alternatives:
            if request.mode == ALL:
                if not all(p.usable for p in pools):
                    continue
                group = [d for p in pools for d in p.devices if matches(d, request)]
                if group and not any(d.id in used for d in group) and search(
                        step + 1, used | {d.id for d in group}, extend(chosen, claim_index, request, group)):
                    return True
                continue
            free = [d for p in pools if p.usable for d in p.devices if d.id not in used and matches(d, request)]
            for group in itertools.combinations(free, request.count):
                if search(step + 1, used | {d.id for d in group}, extend(chosen, claim_index, request, group)):
                    return True
        return False

    return search(0, frozenset(taken), [[] for _ in claims])


CLASSES_PREDICATES = {"any": lambda d: d.driver == "gpu.nvidia.com", "a": SELECTORS[next(iter(SELECTORS))]}


def extend(chosen, claim_index, request, group):
    out = [list(c) for c in chosen]
    out[claim_index].extend((request, d) for d in group)
    return out


def constraints_hold(claim, chosen) -> bool:
    for constraint in claim.constraints:
        values = [d.qualified(constraint.attribute) for request, d in chosen if constraint.applies(request)]
        if any(v is MISSING for v in values) or len(set(values)) > 1:
            return False
    return True


def check_allocation(pools, taken, claims, allocations) -> None:
    by_id = {d.id: d for p in pools for d in p.devices}
    given = [device_id for allocation in allocations for device_id in allocation.devices]
    assert len(given) == len(set(given)), "a device went to two requests"
    assert not set(given) & taken, "a taken device was given"
    for claim, allocation in zip(claims, allocations, strict=True):
        requests = {r.name: r for device_request in claim.requests for r in device_request.alternatives}
        chosen = [(requests[name], by_id[device_id]) for name, device_id in allocation.results]
        for device_request in claim.requests:
            names = {r.name for r, _ in chosen if r.base == device_request.name}
            assert len(names) == 1, f"request {device_request.name} got {names}"
            request = requests[names.pop()]
            got = [d for r, d in chosen if r is request]
            if request.mode == ALL:
                assert len(got) == sum(CLASSES_PREDICATES[request.class_name](d) and
                                       all(SELECTORS[e](d) for e in request.selectors)
                                       for p in pools for d in p.devices)
            else:
                assert len(got) == request.count
            for d in got:
                assert CLASSES_PREDICATES[request.class_name](d) and all(SELECTORS[e](d) for e in request.selectors)
                assert next(p for p in pools if p.name == d.pool).usable
        assert constraints_hold(claim, chosen)


@pytest.fixture(scope="module")
def allocator():
    classes, _ = read_classes([device_class(name, expression) for name, expression in CLASSES.items()])
    return Allocator(classes, Selectors())


@pytest.mark.parametrize("seed", range(6))
def test_allocations_are_valid_and_found_whenever_one_exists(allocator, seed):
    rng = random.Random(seed)
    for _ in range(60):
        devices = random_devices(rng)
        split = rng.randint(0, len(devices))
        objs = [resource_slice("n1", devices[:split], pool="p1", name="a")] if split else []
        if split < len(devices):
            objs.append(resource_slice("n1", devices[split:], pool="p2", name="b", count=1 + (rng.random() < 0.2)))
        slices, errors = read_slices(objs)
        assert not errors
        pools = node_pools(slices, "n1")
        taken = {d.id for p in pools for d in p.devices if rng.random() < 0.2}
        claims = [read_claim_spec(random_claim(rng), "c") for _ in range(rng.randint(1, 2))]
        allocations = allocator.allocate("n1", pools, taken, claims)
        assert isinstance(allocations, Shortfall) != brute_force(pools, taken, claims), (claims, pools, taken)
        if not isinstance(allocations, Shortfall):
            check_allocation(pools, taken, claims, allocations)
        shape = tuple(claims[:1])
        fits = allocator.count("n1", pools, taken, shape)
        most = 0
        while not isinstance(allocator.allocate("n1", pools, taken, list(shape) * (most + 1)), Shortfall):
            most += 1
        if counts_exactly(shape):
            assert fits == most or (most == 0 and isinstance(fits, Shortfall))
        else:  # pods placed one at a time: never more than fit together
            assert (0 if isinstance(fits, Shortfall) else fits) <= most
