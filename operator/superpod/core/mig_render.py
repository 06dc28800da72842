"""Render MIG layouts for NVIDIA's MIG manager (mig-parted config format) and the device plugin's resources.

Plain dicts only; the caller serialises them (the k8s layer writes the ConfigMap and the node labels).
Format (docs/MIG.md, NVIDIA/mig-parted api/spec/v1): `version: v1`, `mig-configs: {name: [entries]}`, each entry
`devices` (`all` or GPU indices), `mig-enabled`, and `mig-devices` ({profile: count}) when enabled.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from superpod.core.mig_catalog import Product, product, resource_name
from superpod.core.mig_geometry import canonical
from superpod.core.mig_planner import Layout, MigNode, MigPlan

CONFIG_LABEL = "nvidia.com/mig.config"
CONFIG_PREFIX = "superpod-"  # the configs this project writes
STATE_LABEL = "nvidia.com/mig.config.state"
WHOLE_GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class MigRender:
    config: dict  # the mig-parted document: {"version": "v1", "mig-configs": {...}}
    labels: dict[str, str]  # node -> value for nvidia.com/mig.config
    resources: dict[str, dict[str, int]]  # node -> resources advertised afterwards (mixed strategy)


def entries(prod: Product, layout: Layout) -> list[dict]:
    """mig-parted entries for one node: GPUs with the same geometry grouped, in GPU order."""
    groups: dict[tuple | None, list[int]] = {}
    for i, g in enumerate(layout):
        key = None if g is None else canonical(prod, g)
        groups.setdefault(key, []).append(i)
    out = []
    for geometry, devices in groups.items():
        entry: dict = {"devices": "all" if len(groups) == 1 else devices, "mig-enabled": geometry is not None}
        if geometry is not None:
            entry["mig-devices"] = dict(Counter(geometry))
        out.append(entry)
    return out


def config_name(prod: Product, node_entries: list[dict]) -> str:
    """A stable name from the product and the content, so identical nodes share one config (a valid label value)."""
    digest = hashlib.sha256(json.dumps(node_entries, sort_keys=True).encode()).hexdigest()[:12]
    return f"{CONFIG_PREFIX}{prod.key.lower()}-{digest}"


def advertised(prod: Product, layout: Layout) -> dict[str, int]:
    """Resources a node advertises with this layout under the mixed strategy: MIG-disabled GPUs stay whole."""
    out: Counter = Counter()
    for g in layout:
        if g is None:
            out[WHOLE_GPU] += 1
        else:
            for name in canonical(prod, g):
                out[resource_name(name)] += 1
    return dict(sorted(out.items()))


def render(nodes: Sequence[MigNode], plan: MigPlan, existing: Mapping[str, list] | None = None) -> MigRender:
    """The mig-parted document holding every config the plan needs (plus `existing` configs kept as they are),
    the config label per reconfigured node, and what each of those nodes will advertise."""
    by_name = {n.name: n for n in nodes}
    configs: dict[str, list] = {"all-disabled": [{"devices": "all", "mig-enabled": False}], **(existing or {})}
    labels, resources = {}, {}
    for node_name, layout in sorted(plan.layouts.items()):
        prod = product(by_name[node_name].product)
        node_entries = entries(prod, layout)
        name = config_name(prod, node_entries)
        configs[name] = node_entries
        labels[node_name] = name
        resources[node_name] = advertised(prod, layout)
    return MigRender({"version": "v1", "mig-configs": configs}, labels, resources)
