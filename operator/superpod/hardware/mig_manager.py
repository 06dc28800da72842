"""A simulated NVIDIA MIG manager (with the device plugin's part) for simulated GPU nodes. A stand-in for hardware.

What it plays, as the real components do: a node labelled `nvidia.com/mig.config=<name>` gets
`nvidia.com/mig.config.state=pending`; the config `<name>` is read from the mig-parted document in a ConfigMap; after
a short delay (the real manager stops GPU clients and reconfigures), the node's allocatable shows the new resources
(mixed strategy: `nvidia.com/gpu` for MIG-disabled GPUs, `nvidia.com/mig-<profile>` per instance) and the state is
`success` — or `failed` when the geometry is not valid on that GPU (checked against the MIG catalogue), the config
is missing, or a pod is using a GPU of the node (the real one would break it). For tests, a node annotation
`sim.superpod.dev/mig-fail` makes it fail and `sim.superpod.dev/mig-stuck` leaves it pending."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import yaml
from kubernetes import client

from superpod.core.mig_catalog import UnknownProductError, product, resource_name
from superpod.core.mig_geometry import fits, place
from superpod.hardware import dra_slices
from superpod.hardware.stepping import keep_stepping

log = logging.getLogger(__name__)
CONFIG, STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"
APPLIED = "sim.superpod.dev/mig-applied"  # the config this simulated node now runs
FAIL, STUCK = "sim.superpod.dev/mig-fail", "sim.superpod.dev/mig-stuck"


class GeometryError(ValueError):
    pass


def layout_for(config: list[dict], product_name: str, gpus: int) -> dict[int, list[str] | None]:
    """Each GPU's MIG instances (profile names) after applying one mig-parted config (a list of entries); None for
    a GPU with MIG disabled."""
    prod = product(product_name)
    layout: dict[int, list[str] | None] = {i: None for i in range(gpus)}
    for entry in config:
        devices = range(gpus) if entry.get("devices") == "all" else entry.get("devices") or []
        for d in devices:
            if not 0 <= int(d) < gpus:
                raise GeometryError(f"device {d} does not exist on a {gpus}-GPU node")
            if entry.get("mig-enabled"):
                names = [p for p, n in (entry.get("mig-devices") or {}).items() for _ in range(int(n))]
                if not fits(prod, names):
                    raise GeometryError(f"{names} do not fit on one {prod.key} GPU")
                layout[int(d)] = names
            else:
                layout[int(d)] = None
    return layout


def resources_of(layout: dict[int, list[str] | None]) -> dict[str, int]:
    """What a node advertises with this layout (mixed strategy)."""
    out: Counter = Counter()
    for names in layout.values():
        if names is None:
            out["nvidia.com/gpu"] += 1
        else:
            out.update(resource_name(n) for n in names)
    return dict(out)


def resources_for(config: list[dict], product_name: str, gpus: int) -> dict[str, int]:
    """What a node advertises after applying one mig-parted config (a list of entries)."""
    return resources_of(layout_for(config, product_name, gpus))


class SimMigManager:
    def __init__(self, api: client.ApiClient, namespace: str, configmap: str, delay: float = 2.0) -> None:
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace, self.configmap, self.delay = namespace, configmap, delay
        self.pending_since: dict[tuple[str, str], float] = {}

    def step(self) -> None:
        for node in self.core.list_node(label_selector=CONFIG, _preload_content=False).json()["items"]:
            try:
                self._node(node)
            except client.ApiException as e:
                log.warning("node %s: %s", node["metadata"]["name"], e.reason)

    def _node(self, node: dict) -> None:
        meta = node["metadata"]
        name, labels, notes = meta["name"], meta.get("labels") or {}, meta.get("annotations") or {}
        wanted = labels[CONFIG]
        if notes.get(APPLIED) == wanted and labels.get(STATE) in ("success", "failed"):
            return
        key = (name, wanted)
        if labels.get(STATE) != "pending" or key not in self.pending_since:
            self.pending_since.setdefault(key, time.monotonic())
            self._label(name, {STATE: "pending"})
            return
        if STUCK in notes or time.monotonic() - self.pending_since[key] < self.delay:
            return
        try:
            if FAIL in notes:
                raise GeometryError("failure injected by annotation")
            layout = self._apply(node, wanted)
        except (GeometryError, UnknownProductError, KeyError) as e:
            log.warning("node %s: MIG config %s failed: %s", name, wanted, e)
            self._annotate(name, {APPLIED: wanted})
            self._label(name, {STATE: "failed"})
            return
        resources = resources_of(layout)
        old = {k: None for k in (node.get("status") or {}).get("allocatable", {})
               if k.startswith("nvidia.com/mig-") or k == "nvidia.com/gpu"}
        new = {**old, **{k: str(v) for k, v in resources.items()}}
        self.core.patch_node_status(name, {"status": {"allocatable": new, "capacity": new}})
        self._publish(node, layout)
        self._annotate(name, {APPLIED: wanted})
        self._label(name, {STATE: "success"})
        self.pending_since.pop(key, None)
        log.info("node %s: MIG config %s applied: %s", name, wanted, resources)

    def _publish(self, node: dict, layout: dict[int, list[str] | None]) -> None:
        """On a node that publishes its devices (DRA), its GPU slice anew: MIG devices where MIG is on, the pool's
        generation one up, as NVIDIA's DRA driver republishes after a reconfiguration."""
        name, product_name = node["metadata"]["name"], node["metadata"]["labels"].get("nvidia.com/gpu.product", "")
        slice_name = f"{name}-{dra_slices.GPU_DRIVER}"
        try:
            served = self.custom.get_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", slice_name)
        except client.ApiException as e:
            if e.status == 404:
                return  # its GPUs are not published through DRA
            raise
        prod = product(product_name)
        mig = {minor: list(place(prod, names) or ()) for minor, names in layout.items() if names}
        generation = served["spec"]["pool"]["generation"] + 1
        [body] = [b for b in dra_slices.published_slices(node, node["metadata"]["uid"], mig, generation)
                  if b["metadata"]["name"] == slice_name]
        body["metadata"]["resourceVersion"] = served["metadata"]["resourceVersion"]
        self.custom.replace_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", slice_name, body)

    def _apply(self, node: dict, wanted: str) -> dict[int, list[str] | None]:
        name, labels = node["metadata"]["name"], node["metadata"].get("labels") or {}
        busy = [p for p in self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={name}", _preload_content=False).json()["items"]
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and _uses_gpu(p)]
        if busy:
            raise GeometryError(f"{len(busy)} pods use GPUs of this node")
        if wanted == "all-disabled":
            return {minor: None for minor in range(int(labels.get("nvidia.com/gpu.count", 0)))}
        cm = self.core.read_namespaced_config_map(self.configmap, self.namespace)
        doc = yaml.safe_load((cm.data or {}).get("config.yaml") or "{}") or {}
        config = (doc.get("mig-configs") or {}).get(wanted)
        if config is None:
            raise GeometryError(f"no config {wanted!r} in {self.namespace}/{self.configmap}")
        return layout_for(config, labels.get("nvidia.com/gpu.product", ""), int(labels["nvidia.com/gpu.count"]))

    def _label(self, name: str, labels: dict) -> None:
        self.core.patch_node(name, {"metadata": {"labels": labels}}, _preload_content=False)

    def _annotate(self, name: str, notes: dict) -> None:
        self.core.patch_node(name, {"metadata": {"annotations": notes}}, _preload_content=False)

    def run(self, stop: threading.Event, interval: float = 0.5) -> None:
        keep_stepping(self.step, stop, "simulated MIG manager", interval)


def _uses_gpu(pod: dict) -> bool:
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        if any(k.startswith("nvidia.com/") for k in {**(res.get("limits") or {}), **(res.get("requests") or {})}):
            return True
    return False
