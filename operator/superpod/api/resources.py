"""What a pod requests of its node, computed as kube-scheduler and the kubelet compute it. One function serves the
pods observed in the cluster and the replica pods the operator renders, so what the core books for a replica is
exactly what its pod will ask the kubelet for."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kubernetes.utils import parse_quantity

from superpod.core.request import GPU, MIG_PREFIX, PODS

# Resources the API server lets a container request without an equal limit; any other (extended) resource needs one.
STANDARD = ("cpu", "memory", "ephemeral-storage")


class ConvertError(ValueError):
    """Malformed object: names the object and the field."""

    def __init__(self, obj: str, field: str, problem: str):
        super().__init__(f"{obj}: {field}: {problem}")
        self.obj, self.field, self.problem = obj, field, problem


QUANTITIES_KEPT = 4096
_read: dict[tuple[int | float | str, bool], int] = {}  # (quantity as written, counted in millicores) -> canonical


def quantity(value: Any, resource: str, obj: str = "object", field: str = "quantity") -> int:
    """Canonical integer: millicores for cpu, bytes for memory, a count otherwise (rounded up). The quantities read
    are kept (a few thousand: a cluster's pods ask for a few dozen distinct ones), each pod's are read at each of
    its versions."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConvertError(obj, field, f"expected a quantity, got {value!r}")
    key = (value, resource == "cpu")
    if (known := _read.get(key)) is not None:
        return known
    amount = _quantity(value, resource, obj, field)
    if len(_read) < QUANTITIES_KEPT:
        _read[key] = amount
    return amount


def _quantity(value: int | float | str, resource: str, obj: str, field: str) -> int:
    try:
        amount = parse_quantity(value)
    except ValueError:
        raise ConvertError(obj, field, f"not a Kubernetes quantity: {value!r}") from None
    if not amount.is_finite():
        raise ConvertError(obj, field, f"not a Kubernetes quantity: {value!r}")
    if amount < 0:
        raise ConvertError(obj, field, f"must not be negative, got {value!r}")
    if resource == "cpu":
        amount *= 1000
    return int(math.ceil(amount))


def is_gpu_resource(resource: str) -> bool:
    """The resources only the scheduler may put on a replica: whole GPUs and MIG slices."""
    return resource == GPU or resource.startswith(MIG_PREFIX)


def pod_requests(spec: dict, parse: Callable[[str, dict], dict[str, int]]) -> dict[str, int]:
    """A pod's effective request, as kube-scheduler's NodeResourcesFit counts it: the sum over containers plus
    restartable init containers (sidecars), or the largest init container's need if that is more (each init container
    runs beside the sidecars started before it); pod-level resources where set; plus overhead; plus one pod slot.
    `parse(field, quantities)` turns a quantity map into canonical integers (and names the field when it cannot)."""

    def of(container: dict, field: str) -> dict[str, int]:
        resources = container.get("resources") or {}
        # The API server defaults a missing request to the limit.
        return parse(field, {**(resources.get("limits") or {}), **(resources.get("requests") or {})})

    total: dict[str, int] = {}
    for i, container in enumerate(spec.get("containers") or []):
        _add(total, of(container, f"spec.containers[{i}].resources"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        need = of(container, f"spec.initContainers[{i}].resources")
        if container.get("restartPolicy") == "Always":  # a sidecar: runs on beside everything after it
            _add(total, need)
            _add(sidecars, need)
            need = dict(sidecars)
        else:
            need = _add(dict(need), sidecars)
        for resource, amount in need.items():
            init_peak[resource] = max(init_peak.get(resource, 0), amount)
    for resource, amount in init_peak.items():
        total[resource] = max(total.get(resource, 0), amount)
    pod_level = spec.get("resources") or {}
    if pod_level:
        total.update(parse("spec.resources", {**(pod_level.get("limits") or {}), **(pod_level.get("requests") or {})}))
    _add(total, parse("spec.overhead", spec.get("overhead") or {}))
    total[PODS] = total.get(PODS, 0) + 1
    return {resource: amount for resource, amount in total.items() if amount}


def _add(into: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    for resource, amount in more.items():
        into[resource] = into.get(resource, 0) + amount
    return into
