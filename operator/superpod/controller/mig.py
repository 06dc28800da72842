"""Dynamic MIG: when MIG jobs wait because no node offers their slice, the core planner picks idle opted-in nodes
and new geometries; the operator writes the mig-parted config to a ConfigMap and sets `nvidia.com/mig.config` on
those nodes, for NVIDIA's MIG manager to apply. Such nodes are held from every placement (ClusterState.held) until
the manager reports `success` and the node's allocatable shows the expected resources; `failed`, or no success
within the timeout, marks the node and the job is planned again elsewhere.

Everything the flow needs after a restart is on the nodes, as annotations: what was asked, when, for which jobs."""

from __future__ import annotations

import json
import logging

import yaml

from superpod.controller.state import (
    MIG_EXPECT,
    MIG_FAILED,
    MIG_FOR,
    MIG_LAYOUT,
    MIG_REQUESTED_AT,
    ClusterState,
    mig_held,
)
from superpod.core.mig_catalog import UnknownProductError, product
from superpod.core.mig_planner import MigDemand, MigNode, plan
from superpod.core.mig_render import CONFIG_LABEL, STATE_LABEL, render
from superpod.core.model import filter_reason
from superpod.core.request import MIG_PREFIX, PRODUCT_LABEL, JobRequest
from superpod.k8s.writer import Writer

log = logging.getLogger(__name__)
DYNAMIC = "superpod.dev/mig-dynamic"


def _layout(node_obj: dict, gpus: int) -> tuple | None:
    """Per-GPU geometry: what we configured (annotation), or all MIG-disabled when the node advertises no MIG
    resources; None when unknown (partitioned by someone else), and then the planner leaves the node alone."""
    notes = node_obj["metadata"].get("annotations") or {}
    if MIG_LAYOUT in notes:
        return tuple(tuple(g) if g is not None else None for g in json.loads(notes[MIG_LAYOUT]))
    alloc = (node_obj.get("status") or {}).get("allocatable") or {}
    if any(k.startswith(MIG_PREFIX) and str(v) != "0" for k, v in alloc.items()):
        return None
    return (None,) * gpus


def _profile(job: JobRequest) -> str | None:
    return next((r[len(MIG_PREFIX):] for r, q in job.requests if r.startswith(MIG_PREFIX) and q), None)


class MigFlow:
    def __init__(self, state: ClusterState, writer: Writer, namespace: str, configmap: str,
                 timeout: float = 300, metrics=None) -> None:
        self.state, self.writer, self.metrics = state, writer, metrics
        self.namespace, self.configmap, self.timeout = namespace, configmap, timeout

    async def check(self, now: float) -> None:
        """Release nodes whose reconfiguration finished; mark those that failed or timed out."""
        for name, obj in list(self.state.node_objs.items()):
            notes, labels = obj["metadata"].get("annotations") or {}, obj["metadata"].get("labels") or {}
            if MIG_EXPECT not in notes:
                continue
            state = labels.get(STATE_LABEL)
            if not mig_held(obj):
                await self.writer.annotate_node(name, {MIG_EXPECT: None, MIG_REQUESTED_AT: None, MIG_FOR: None})
                log.info("node %s: MIG config %s in place", name, labels.get(CONFIG_LABEL))
                continue
            late = now - float(notes.get(MIG_REQUESTED_AT) or now) > self.timeout
            if state == "failed" or late:
                why = ("the MIG manager reported failed" if state == "failed"
                       else f"the MIG manager did not report success within {self.timeout:.0f}s")
                await self.writer.annotate_node(name, {MIG_FAILED: why, MIG_EXPECT: None, MIG_FOR: None,
                                                       MIG_REQUESTED_AT: None})
                for job in filter(None, (self.state.jobs.get(k) for k in (notes.get(MIG_FOR) or "").split(","))):
                    await self.writer.event(job, "Warning", "MigFailed",
                                            f"node {name}: {why} for config {labels.get(CONFIG_LABEL)}; replanning")

    async def plan(self, waiting: list[JobRequest], now: float) -> dict[str, str]:
        """Reconfigure nodes for MIG jobs that wait for slices; returns job key -> a status message for those served."""
        served = {k for obj in self.state.node_objs.values()
                  for k in ((obj["metadata"].get("annotations") or {}).get(MIG_FOR) or "").split(",") if k}
        messages = {k: "waiting for the MIG reconfiguration of its nodes" for k in served}
        groups: dict[tuple, list[JobRequest]] = {}
        for job in waiting:
            if job.key not in served and _profile(job):
                groups.setdefault(job.filter_signature(), []).append(job)
        if not groups:
            return messages
        nodes, taken = self._nodes(), set()
        existing = None  # the ConfigMap's configs, read only once a plan needs writing
        # Jobs with different node filters see different nodes: plan group by group, highest priority first.
        for jobs in sorted(groups.values(), key=lambda js: -max(j.priority for j in js)):
            eligible = [n for n in nodes if n.name not in taken
                        and filter_reason(self.state.nodes[n.name], jobs[0]) is None]
            demands = [MigDemand(j.key, _profile(j), j.replicas, j.priority, j.gpu_product) for j in jobs]
            result = plan(eligible, demands) if eligible else None
            if not result or not result.layouts:
                continue
            if existing is None:
                existing = await self._existing()
            rendered = render(eligible, result, existing)
            existing = dict(rendered.config["mig-configs"])
            taken |= set(rendered.labels)
            await self._write(rendered, result, now)
            messages.update(await self._announce(rendered, result))
        return messages

    async def _write(self, rendered, result, now: float) -> None:
        await self.writer.apply_config_map(self.namespace, self.configmap,
                                           {"config.yaml": yaml.safe_dump(rendered.config, sort_keys=False)})
        for name, config in rendered.labels.items():
            jobs = sorted(j for j, where in result.assignment.items() if name in where)
            await self.writer.annotate_node(name, {
                MIG_EXPECT: json.dumps(rendered.resources[name], sort_keys=True),
                MIG_LAYOUT: json.dumps([list(g) if g is not None else None for g in result.layouts[name]]),
                MIG_REQUESTED_AT: f"{now:.0f}", MIG_FOR: ",".join(jobs)})
            await self.writer.label_node(name, {CONFIG_LABEL: config})
        if self.metrics:
            self.metrics.mig_reconfigurations.inc(len(rendered.labels))

    async def _announce(self, rendered, result) -> dict[str, str]:
        messages = {}
        for key in result.satisfied:
            where = sorted(n for n in result.assignment.get(key, {}) if n in rendered.labels)
            if not where:
                continue
            msg = (f"repartitioning {len(where)} node(s) for its MIG slices: {', '.join(where[:5])}"
                   f"{' ...' if len(where) > 5 else ''}")
            messages[key] = msg
            if job := self.state.jobs.get(key):
                await self.writer.event(job, "Normal", "MigReconfiguring", msg)
        return messages

    def _nodes(self) -> list[MigNode]:
        busy_nodes: set[str] = set()
        in_use: dict[str, dict[str, int]] = {}
        for p in self.state.pods.values():
            for r, q in p.holds.requests if p.holds is not None else ():
                if r.startswith("nvidia.com/"):
                    busy_nodes.add(p.node)
                if r.startswith(MIG_PREFIX):
                    use = in_use.setdefault(p.node, {})
                    use[r[len(MIG_PREFIX):]] = use.get(r[len(MIG_PREFIX):], 0) + q
        out = []
        for name, obj in self.state.node_objs.items():
            labels = obj["metadata"].get("labels") or {}
            notes = obj["metadata"].get("annotations") or {}
            node = self.state.nodes.get(name)
            if node is None or labels.get("nvidia.com/mig.capable") != "true" or MIG_FAILED in notes:
                continue
            try:
                product(labels.get(PRODUCT_LABEL, ""))
            except UnknownProductError:
                continue
            layout = _layout(obj, int(labels.get("nvidia.com/gpu.count") or 0))
            if layout is None or not node.ready or node.unschedulable:
                continue
            out.append(MigNode(name, labels[PRODUCT_LABEL], layout, busy=name in busy_nodes or mig_held(obj),
                               dynamic=labels.get(DYNAMIC) == "true", in_use=in_use.get(name, {})))
        return out

    async def _existing(self) -> dict:
        data = await self.writer.read_config_map(self.namespace, self.configmap)
        doc = yaml.safe_load((data or {}).get("config.yaml") or "{}") or {}
        return dict(doc.get("mig-configs") or {})
