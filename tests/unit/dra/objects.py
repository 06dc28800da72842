"""DRA objects as the API serves them (resource.k8s.io/v1 dicts), small enough to read in a test."""

from __future__ import annotations

GPU_CLASS_EXPRESSION = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_CLASS_EXPRESSION = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"


def attribute(value) -> dict:
    if isinstance(value, dict):  # typed already: {"version": "1.0.0"}
        return value
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def device(name: str, capacity: dict[str, str] | None = None, **attributes) -> dict:
    out = {"name": name, "attributes": {key.replace("__", "/"): attribute(v) for key, v in attributes.items()}}
    if capacity:
        out["capacity"] = {key: {"value": value} for key, value in capacity.items()}
    return out


def gpu(index: int, node: str = "n1", product: str = "NVIDIA H200", **extra) -> dict:
    return device(f"gpu-{index}", {"memory": "141Gi"}, type="gpu", uuid=f"GPU-{node}-{index}", productName=product,
                  **extra)


def resource_slice(node: str, devices: list[dict], driver: str = "gpu.nvidia.com", pool: str | None = None,
                   generation: int = 1, count: int = 1, name: str | None = None, **placement) -> dict:
    spec = {"driver": driver, "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
            "devices": devices}
    spec.update(placement or {"nodeName": node})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{node}-{driver}-{generation}"}, "spec": spec}


def device_class(name: str, *expressions: str, config: list | None = None) -> dict:
    spec: dict = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = config
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def exactly(name: str, class_name: str = "gpu.nvidia.com", count: int = 1, *expressions: str,
            mode: str = "ExactCount") -> dict:
    body: dict = {"deviceClassName": class_name, "allocationMode": mode}
    if mode == "ExactCount":
        body["count"] = count
    if expressions:
        body["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    return {"name": name, "exactly": body}


def first_available(name: str, *alternatives: tuple[str, str, int, tuple[str, ...]]) -> dict:
    return {"name": name, "firstAvailable": [
        {"name": sub, "deviceClassName": class_name, "count": count,
         "selectors": [{"cel": {"expression": e}} for e in expressions]}
        for sub, class_name, count, expressions in alternatives]}


def claim_spec(*requests: dict, constraints: list | None = None, config: list | None = None) -> dict:
    devices: dict = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {"devices": devices}
