"""Dynamic MIG, as plans. When MIG jobs wait because no node offers their slice, the core planner picks idle,
opted-in nodes on the `mixed` strategy and new geometries; the plan adds the mig-parted configs to a ConfigMap and
then sets `nvidia.com/mig.config` on those nodes (with our bookkeeping annotations, in one patch) for NVIDIA's MIG
manager. Such nodes are held from every placement until the manager reports `success` and the node's allocatable
shows the expected resources; `failed`, or no success within the timeout, marks the node, puts its previous config
back and the jobs are planned again elsewhere. When whole-GPU jobs wait and no MIG job wants a product's slices,
idle repartitioned nodes of that product go back to whole GPUs.

Never repartitioned: a node a pod uses a GPU of, a node of a placed or just-placed gang, a node reserved for a
blocked job, a node not on the mixed strategy. Everything the flow needs after a restart is on the nodes."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from superpod.api.resources import ConvertError
from superpod.controller.actions import Emit, MergeMigConfigs, PatchNode, Plan, job_ref, node_ref
from superpod.controller.state import (
    MIG_EXPECT,
    MIG_FAILED,
    MIG_FOR,
    MIG_KEYS,
    MIG_LAYOUT,
    MIG_PREVIOUS,
    MIG_PREVIOUS_RESOURCES,
    MIG_REQUESTED_AT,
    ClusterState,
    NodeEntry,
    mig_held,
)
from superpod.core.gang_key import GangKey
from superpod.core.mig_catalog import UnknownProductError, product
from superpod.core.mig_planner import MigDemand, MigNode, MigPlan, plan
from superpod.core.mig_render import CONFIG_LABEL, STATE_LABEL, render
from superpod.core.model import filter_reason
from superpod.core.phases import Reason
from superpod.core.request import GPU, MIG_CAPABLE_LABEL, MIG_PREFIX, PRODUCT_LABEL, JobRequest

log = logging.getLogger(__name__)
DYNAMIC = f"{MIG_KEYS}dynamic"  # superpod.dev/mig-dynamic
STRATEGY = "nvidia.com/mig.strategy"
OURS = (MIG_EXPECT, MIG_REQUESTED_AT, MIG_FOR, MIG_PREVIOUS, MIG_PREVIOUS_RESOURCES)


class MigFlow:
    def __init__(self, state: ClusterState, namespace: str, configmap: str, timeout: float, metrics=None) -> None:
        self.state, self.metrics = state, metrics
        self.namespace, self.configmap, self.timeout = namespace, configmap, timeout
        self._expecting: tuple[int, list[str]] | None = None  # (node edits, nodes a reconfiguration is awaited on)
        self._serving: tuple[int, set[str]] | None = None  # (node edits, jobs whose nodes are repartitioned)
        self._dynamic: tuple[int, bool] | None = None  # (nodes version, some node opted in to dynamic MIG)

    # ---- reconfigurations in flight -------------------------------------------------------------------------------
    def check(self, now: float) -> list[Plan]:
        """Release nodes whose reconfiguration finished; fail, revert and mark those that failed or timed out."""
        out = []
        if self._expecting is None or self._expecting[0] != self.state.node_edits:
            nodes = self.state.nodes
            self._expecting = (self.state.node_edits, [name for name in sorted(self.state.mig_nodes)
                                                       if MIG_EXPECT in (nodes[name].obj["metadata"].get("annotations")
                                                                         or {})])
        for name in self._expecting[1]:
            entry = self.state.nodes[name]
            notes = entry.obj["metadata"]["annotations"]
            labels = entry.obj["metadata"].get("labels") or {}
            try:
                held = mig_held(entry.obj)
                requested = float(notes.get(MIG_REQUESTED_AT) or now)
            except (ConvertError, ValueError):
                out.append(self._fail(name, entry, "our bookkeeping annotations on the node are damaged", now))
                continue
            if not held:
                out.append(Plan(f"node:{name}", [PatchNode(name, annotations=dict.fromkeys(OURS))]))
                log.info("node %s: MIG config %s in place", name, labels.get(CONFIG_LABEL))
            elif MIG_FAILED in notes and (labels.get(STATE_LABEL) == "failed" or now - requested > self.timeout):
                why = "putting the previous MIG config back did not finish either; the node is left as it is"
                out.append(Plan(f"node:{name}", [PatchNode(name, annotations=dict.fromkeys(OURS)),
                                                  Emit(node_ref(entry.obj), "Warning", Reason.MIG_FAILED, why)]))
            elif labels.get(STATE_LABEL) == "failed":
                out.append(self._fail(name, entry, "the MIG manager reported failed", now))
            elif now - requested > self.timeout:
                out.append(self._fail(name, entry, f"the MIG manager did not report success within "
                                                   f"{self.timeout:.0f}s", now))
        return out

    def _fail(self, name: str, entry: NodeEntry, why: str, now: float) -> Plan:
        """Mark the node, put its previous config back and hold the node until the manager has (it may be half
        way through the failed change), tell the jobs."""
        notes = entry.obj["metadata"].get("annotations") or {}
        labels = entry.obj["metadata"].get("labels") or {}
        wanted = labels.get(CONFIG_LABEL)
        revert = {CONFIG_LABEL: notes.get(MIG_PREVIOUS) or None}
        before = notes.get(MIG_PREVIOUS_RESOURCES)  # held until it advertises this again (not known: not held)
        plan = Plan(f"node:{name}", [PatchNode(name, labels=revert, annotations={
            **dict.fromkeys(OURS), MIG_LAYOUT: None, MIG_FAILED: f"{why} (config {wanted})", MIG_EXPECT: before,
            MIG_REQUESTED_AT: f"{now:.0f}" if before else None})])
        message = f"node {name}: {why} for config {wanted}; reverted, replanning elsewhere"
        plan.then(Emit(node_ref(entry.obj), "Warning", Reason.MIG_FAILED, message))
        for key in _jobs_for(notes):
            if job := self.state.jobs.get(key):
                plan.then(Emit(job_ref(job), "Warning", Reason.MIG_FAILED, message))
        return plan

    # ---- new reconfigurations -------------------------------------------------------------------------------------
    def plan(self, waiting: list[JobRequest], busy: Callable[[], set[str]], now: float) -> tuple[
            list[Plan], dict[str, str], dict[str, str]]:
        """Plans for MIG jobs that wait for slices (and whole-GPU jobs that wait while slices idle); job key -> a
        status message for the jobs whose nodes are being repartitioned; job key -> a note on why no node could be
        repartitioned for it, when there is one to add to its explanation. `busy`: the nodes that must not be
        repartitioned (asked for only when some job wants slices or some node may give them back)."""
        served = self._served()
        messages = {k: "waiting for the MIG reconfiguration of its nodes" for k in served}
        if not (waiting and self._any_dynamic()) and not any(job.mig_profile for job in waiting):
            return [], messages, {}  # no job wants slices, and no node has slices to give back
        nodes, refused = self._nodes(busy())
        notes: dict[str, str] = {}
        groups: dict[tuple, list[JobRequest]] = {}
        for job in waiting:
            if job.key not in served and job.mig_profile:
                groups.setdefault(job.filter_signature(), []).append(job)
        layouts, configs, assignment, taken = {}, {}, {}, set()
        # Jobs with different node filters see different nodes: plan group by group, highest priority first.
        for jobs in sorted(groups.values(), key=lambda js: -max(j.priority for j in js)):
            eligible = [n for n in nodes if n.name not in taken and self.state.nodes[n.name].node is not None
                        and filter_reason(self.state.nodes[n.name].node, jobs[0]) is None]
            demands = [MigDemand(j.key, j.mig_profile, j.replicas, j.priority, j.gpu_product) for j in jobs]
            result = plan(eligible, demands) if eligible else None
            if not result or not result.layouts:
                notes.update({j.key: refused for j in jobs if refused and j.key not in messages})
                continue
            rendered = render(eligible, result)
            configs.update(rendered.config["mig-configs"])
            for name in rendered.labels:
                taken.add(name)
                layouts[name] = (result.layouts[name], rendered.labels[name], rendered.resources[name])
            for key in result.satisfied:
                where = sorted(n for n in result.assignment.get(key, {}) if n in rendered.labels)
                if where:
                    assignment[key] = where
        self._reclaim(waiting, nodes, taken, layouts, configs)
        if not layouts:
            return [], messages, notes
        return [self._write(layouts, configs, assignment, now)], {**messages, **{
            key: f"repartitioning {len(where)} node(s) for its MIG slices: {', '.join(where[:5])}"
                 f"{' ...' if len(where) > 5 else ''}" for key, where in assignment.items()}}, notes

    def _served(self) -> set[str]:
        """The jobs whose nodes are being repartitioned (recomputed when a node object changes)."""
        if self._serving is None or self._serving[0] != self.state.node_edits:
            nodes = self.state.nodes
            self._serving = (self.state.node_edits, {
                key for name in self.state.mig_nodes for key in _jobs_for(nodes[name].obj["metadata"].get(
                    "annotations") or {})})
        return self._serving[1]

    def reclaims(self) -> bool:
        """Whether `plan` reads every waiting job: some node may give slices back to whole-GPU jobs."""
        return self._any_dynamic()

    def _any_dynamic(self) -> bool:
        """Some node opted in to dynamic MIG (recomputed when nodes change)."""
        if self._dynamic is None or self._dynamic[0] != self.state.version:
            nodes = self.state.nodes
            self._dynamic = (self.state.version, any(
                (nodes[name].obj["metadata"].get("labels") or {}).get(DYNAMIC) == "true"
                for name in self.state.mig_nodes))
        return self._dynamic[1]

    def _reclaim(self, waiting: list[JobRequest], nodes: list[MigNode], taken: set[str], layouts: dict,
                 configs: dict) -> None:
        """Idle slices back to whole GPUs, for whole-GPU jobs that wait, where no waiting MIG job wants them."""
        mig_products = {j.gpu_product for j in waiting if j.mig_profile}
        need: dict[str | None, int] = {}
        for j in waiting:
            if j.total_requests.get(GPU) and not j.mig_profile:
                need[j.gpu_product] = need.get(j.gpu_product, 0) + j.total_requests[GPU]
        for wanted, gpus in need.items():
            if None in mig_products or wanted in mig_products:
                continue
            for node in nodes:
                if gpus <= 0:
                    break
                if node.name in taken or node.busy or not node.dynamic or node.in_use or all(
                        g is None for g in node.gpus):
                    continue
                if wanted is not None and self.state.nodes[node.name].node.labels.get(PRODUCT_LABEL) != wanted:
                    continue
                whole = (None,) * len(node.gpus)
                rendered = render([node], MigPlan({node.name: whole}, {node.name: tuple(range(len(whole)))}, (),
                                                  (), {}))
                configs.update(rendered.config["mig-configs"])
                layouts[node.name] = (whole, rendered.labels[node.name], rendered.resources[node.name])
                taken.add(node.name)
                gpus -= len(whole)

    def _write(self, layouts: dict, configs: dict, assignment: dict[str, list[str]], now: float) -> Plan:
        in_use = {(e.obj["metadata"].get("labels") or {}).get(CONFIG_LABEL) for name, e in self.state.nodes.items()
                  if name not in layouts} | {config for _, config, _ in layouts.values()}
        out = Plan("mig-config", [MergeMigConfigs(self.namespace, self.configmap, configs,
                                                  frozenset(in_use - {None}))])
        for name, (layout, config, resources) in sorted(layouts.items()):
            entry = self.state.nodes[name]
            previous = (entry.obj["metadata"].get("labels") or {}).get(CONFIG_LABEL)
            advertised = {r: int(str(v)) for r, v in ((entry.obj.get("status") or {}).get("allocatable") or {}).items()
                          if r == GPU or r.startswith(MIG_PREFIX)}
            jobs = sorted(k for k, where in assignment.items() if name in where)
            out.then(PatchNode(name, labels={CONFIG_LABEL: config}, annotations={
                MIG_EXPECT: json.dumps(resources, sort_keys=True),
                MIG_LAYOUT: json.dumps([list(g) if g is not None else None for g in layout]),
                MIG_REQUESTED_AT: f"{now:.0f}", MIG_FOR: ",".join(job.text for job in jobs) or None,
                MIG_PREVIOUS: previous,
                MIG_PREVIOUS_RESOURCES: json.dumps(advertised, sort_keys=True)}))
        for key, where in assignment.items():
            if job := self.state.jobs.get(key):
                out.then(Emit(job_ref(job), "Normal", Reason.MIG_RECONFIGURING,
                              f"repartitioning {len(where)} node(s) for its MIG slices: {', '.join(where[:5])}"))
        if self.metrics:
            self.metrics.mig_reconfigurations.inc(len(layouts))
        return out

    def _nodes(self, busy: set[str]) -> tuple[list[MigNode], str]:
        """The nodes the planner may consider, and a sentence on opted-in nodes left out for their MIG strategy."""
        in_use: dict[str, dict[str, int]] = {}
        gpu_busy = set()
        for p in self.state.pods.values():
            for r, q in p.holds.requests if p.holds is not None else ():
                if r == GPU or r.startswith(MIG_PREFIX):
                    gpu_busy.add(p.node)
                if r.startswith(MIG_PREFIX):
                    use = in_use.setdefault(p.node, {})
                    use[r[len(MIG_PREFIX):]] = use.get(r[len(MIG_PREFIX):], 0) + q
        out, single = [], 0
        for name, entry in self.state.nodes.items():
            labels = entry.obj["metadata"].get("labels") or {}
            notes = entry.obj["metadata"].get("annotations") or {}
            node = entry.node
            if node is None or labels.get(MIG_CAPABLE_LABEL) != "true" or MIG_FAILED in notes:
                continue
            if labels.get(DYNAMIC) == "true" and labels.get(STRATEGY, "mixed") != "mixed":
                single += 1
                continue
            try:
                product(labels.get(PRODUCT_LABEL, ""))
            except UnknownProductError:
                continue
            layout = _layout(entry.obj, int(labels.get("nvidia.com/gpu.count") or 0)
                             if str(labels.get("nvidia.com/gpu.count") or "0").isdigit() else 0)
            if layout is None or not layout or not node.ready or node.unschedulable or node.held:
                continue
            out.append(MigNode(name, labels[PRODUCT_LABEL], layout,
                               busy=name in gpu_busy or name in busy or mig_held(entry.obj),
                               dynamic=labels.get(DYNAMIC) == "true", in_use=in_use.get(name, {})))
        why = (f"{single} opted-in node(s) use a MIG strategy other than mixed and are not repartitioned"
               if single else "")
        return out, why


def _layout(node_obj: dict, gpus: int) -> tuple | None:
    """Per-GPU geometry: what we configured (annotation), or all MIG-disabled when the node advertises no MIG
    resources; None when unknown (partitioned by someone else, or our annotation is damaged): left alone."""
    notes = node_obj["metadata"].get("annotations") or {}
    if MIG_LAYOUT in notes:
        try:
            layout = json.loads(notes[MIG_LAYOUT])
            return tuple(tuple(g) if g is not None else None for g in layout)
        except (ValueError, TypeError):
            return None
    alloc = (node_obj.get("status") or {}).get("allocatable") or {}
    if any(k.startswith(MIG_PREFIX) and str(v) != "0" for k, v in alloc.items()):
        return None
    return (None,) * gpus


def _jobs_for(annotations: dict) -> list[GangKey]:
    """The jobs a node's reconfiguration is for (MIG_FOR; one the operator did not write names none)."""
    out = []
    for text in filter(None, str(annotations.get(MIG_FOR) or "").split(",")):
        try:
            out.append(GangKey.parse(text))
        except ValueError:
            continue
    return out
