"""How many GPUs a DRA device is, for queues and bills: read from the device its driver published (a whole GPU, or a
MIG instance's share of one), never from a name a tenant chooses (the class its claim names). A claim's GPUs are then
what the most GPU-like device each request may be given is worth, times the count it asks for."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from superpod.core.dra.model import ALL, ClaimSpec, Device, DeviceClass, Request
from superpod.core.dra.selectors import SelectorError, Selectors, references

GPU_DRIVER_PREFIX = "gpu."  # a GPU driver names itself gpu.<vendor domain> (gpu.nvidia.com, gpu.example.com)
COMPUTE_SLICES = 7  # a MIG instance <n>g.* holds n of a GPU's 7 compute slices (core/request.gpu_units)
UNIQUE = ("uuid", "pcibusid", "index", "minor")  # attribute names that tell one device of a kind from the next
Shape = tuple


def device_units(device: Device) -> float:
    """GPUs `device` is: 1 for a GPU (or a GPU passed through whole), a MIG instance its share, 0 for other devices."""
    if not device.driver.startswith(GPU_DRIVER_PREFIX):
        return 0.0
    if device.attribute(device.driver, "type") != "mig":
        return 1.0
    profile = device.attribute(device.driver, "profile")
    slices = profile.split("g", 1)[0] if isinstance(profile, str) else ""
    return int(slices) / COMPUTE_SLICES if slices.isdigit() and 0 < int(slices) <= COMPUTE_SLICES else 1.0


def sees_only_shape(expression: str) -> bool:
    """Whether a selector reads nothing a device's shape leaves out (so one device of each shape answers for all)."""
    found = references(expression)
    return found.complete and not any(name.lower().endswith(UNIQUE) for _, _, name in found.lookups)


def shape(device: Device) -> Shape:
    """What a device class can tell of a device: its driver, attributes (but those unique to the device) and
    capacities. Devices of one shape are worth the same and match the same classes."""
    attributes = tuple(sorted((name, repr(value)) for name, value in device.attributes.items()
                              if not name.lower().endswith(UNIQUE)))
    return device.driver, attributes, tuple(sorted((name, str(value)) for name, value in device.capacity.items()))


def request_units(request: Request, classes: Mapping[str, DeviceClass], devices: Iterable[Device],
                  selectors: Selectors) -> float:
    """The most GPUs one device `request` may be given is, over `devices` (one of each shape will do): the devices
    its class and its own selectors both select. A selector that may read what tells one device of a shape from the
    next (a uuid, an index) is left out: the claim is then counted at the most any device the rest selects is."""
    device_class = classes.get(request.class_name)
    if device_class is None:
        return 0.0  # nothing can be allocated for it
    expressions = tuple(e for e in (*device_class.selectors, *request.selectors) if sees_only_shape(e))
    return max((units for device in devices if (units := device_units(device)) and selects(
        selectors, expressions, device)), default=0.0)


Worth = Callable[[Request], float]  # what one device given to a request is worth in GPUs (request_units)


def claimed_gpus(claims: tuple[ClaimSpec, ...], worth: Worth) -> float:
    """GPUs one pod's claims may take, as queues and bills count nvidia.com/gpu: of each request, the most any of
    its alternatives may take (its count times what a device it may be given is worth; a claim for all devices of
    GPUs is refused where it is read)."""
    return sum(max((alternative.count * worth(alternative) for alternative in request.alternatives), default=0.0)
               for claim in claims for request in claim.requests)


def gpu_classes(claims: tuple[ClaimSpec, ...], worth: Worth) -> tuple[str, ...]:
    """The DeviceClasses of the alternatives that may give these claims GPUs, in order (a queue's flavor may be
    one)."""
    return tuple(dict.fromkeys(alternative.class_name for claim in claims for request in claim.requests
                               for alternative in request.alternatives if worth(alternative)))


def uncounted(claims: tuple[ClaimSpec, ...], worth: Worth) -> str:
    """Why these claims cannot be counted in GPUs ("" when they can): all of the devices a request selects, GPUs."""
    for claim in claims:
        for request in claim.requests:
            for alternative in request.alternatives:
                if alternative.mode == ALL and worth(alternative):
                    return (f"request {alternative.name} asks for all devices of class {alternative.class_name} it "
                            "selects, and they are GPUs: ask for an exact count, so queues and bills can count them")
    return ""


def selects(selectors: Selectors, expressions: tuple[str, ...], device: Device) -> bool:
    """Whether every expression selects `device` (one that fails to evaluate does not)."""
    try:
        return selectors.all_match(expressions, device)
    except SelectorError:
        return False
