"""The Nodes, and what is kept as they are stored so that no cycle scans them all."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from superpod.api.convert import node_from_k8s
from superpod.api.resources import ConvertError
from superpod.controller.gpu_tally import GpuTally
from superpod.controller.state.base import Notes, slim
from superpod.core.gang_key import GangKey
from superpod.core.mig_render import STATE_LABEL
from superpod.core.model import Node
from superpod.core.request import GPU, MIG_CAPABLE_LABEL, PRODUCT_LABEL

# Dynamic MIG bookkeeping on the nodes themselves (see controller/mig.py), so it survives an operator restart.
MIG_EXPECT = "superpod.dev/mig-expect"  # resources the node must advertise once reconfigured (JSON)
MIG_LAYOUT = "superpod.dev/mig-layout"  # per-GPU geometry we configured (JSON)
MIG_REQUESTED_AT = "superpod.dev/mig-requested-at"  # epoch seconds
MIG_FOR = "superpod.dev/mig-for"  # the jobs the reconfiguration is for
MIG_PREVIOUS = "superpod.dev/mig-previous"  # the nvidia.com/mig.config value before we changed it
MIG_PREVIOUS_RESOURCES = "superpod.dev/mig-previous-resources"  # what the node advertised before (JSON)
MIG_FAILED = "superpod.dev/mig-failed"  # why the last reconfiguration failed; no more MIG plans here
MIG_KEYS = "superpod.dev/mig-"  # the prefix of that bookkeeping, and of the label that opts a node in to dynamic MIG
FAILING = "failing: condition "  # Node.held of a node with a condition that means it failed (`NodeStore.fail_on`)


@dataclass
class NodeEntry:
    uid: str
    obj: dict
    node: Node | None  # None when the object cannot be read: it is left out, with `problem` saying why
    problem: str | None = None
    not_ready_since: float | None = None  # on the local clock, when it was first seen not ready
    gpus_since: float = 0.0  # on the local clock, when its allocatable GPUs were first seen at their present count


class NodeStore:
    """The Nodes, with what is kept as they are stored (at fleet size every heartbeat stores a node; a scan of them
    all at each was most of the operator's CPU): which changed and when, which cannot be read, which carry MIG
    bookkeeping, what they offer, and the GPUs they offer (`gpus`, shared with the pods, which hold them)."""

    def __init__(self, notes: Notes, gpus: GpuTally) -> None:
        self.notes, self.gpus = notes, gpus
        self.nodes: dict[str, NodeEntry] = {}
        self.version = 0  # bumped on every change to nodes or the topology
        # bumped when the snapshot cannot follow in place (a node added, removed or unreadable, the topology changed)
        self.layout = 0
        self.node_stamps: dict[str, int] = {}  # node name -> the version of its last change (present nodes only)
        self.nodes_changed: set[str] = set()  # names of the nodes changed since the snapshot last took them
        self.unreadable: set[str] = set()  # names of the nodes whose object cannot be read (NodeEntry.problem)
        self.node_edits = 0  # bumped on every stored or deleted Node object (annotations included)
        self.mig_nodes: set[str] = set()  # nodes with a label or annotation under MIG_KEYS: what the MIG flow reads
        self.offers: dict[tuple[str, str], int] = {}  # offer_keys of the usable nodes -> how many nodes offer it
        self.failure_conditions: frozenset[tuple[str, str]] = frozenset()  # (type, status) that mean a node failed
        self.served: dict[str, int] = {}  # node -> nvidia.com/gpu its DRA devices serve (`serve`)

    def fail_on(self, conditions: frozenset[tuple[str, str]]) -> None:
        """Node conditions (type, status) that mean a node failed: it is held out of placement, and the placed gangs
        on it lose it (judge.py). The nodes stored are read again."""
        if conditions != self.failure_conditions:
            self.failure_conditions = conditions
            for name, entry in list(self.nodes.items()):
                self.store(name, entry.obj, 0.0 if entry.not_ready_since is None else entry.not_ready_since)

    def serve(self, served: dict[str, int], now: float) -> None:
        """The GPUs a DeviceClass serves as nvidia.com/gpu from each node's DRA devices (kube-scheduler's DRA
        extended resources): a node that advertises no nvidia.com/gpu offers those (Node.served). The nodes whose
        count moved are read again, at `now` (a count that fell starts the grace of the gangs placed there)."""
        moved = {name for name in self.served.keys() | served.keys() if self.served.get(name) != served.get(name)}
        self.served = served
        for name in sorted(moved):
            if (entry := self.nodes.get(name)) is not None:
                self.store(name, entry.obj, now)

    def job_of(self, key: str) -> GangKey | None:
        return None

    def store(self, name: str, obj: dict, now: float) -> None:
        obj = slim(obj)
        self.node_edits += 1
        old = self.nodes.get(name)
        problem = None
        try:
            node: Node | None = node_from_k8s(obj)
            if mig_held(obj):  # being repartitioned: no placement until the new resources are there
                node = replace(node, held="being repartitioned for MIG")
            elif self.failure_conditions and (failing := failed_condition(obj, self.failure_conditions)):
                node = replace(node, held=f"{FAILING}{failing}")
            if (served := self.served.get(name)) and not node.allocatable.get(GPU):
                node = replace(node, allocatable={**node.allocatable, GPU: served}, served=True)
        except ConvertError as e:
            node, problem = None, str(e)
        ready = node is not None and node.ready
        since = None if ready else (old.not_ready_since if old and old.not_ready_since is not None else now)
        gpus = old.gpus_since if old is not None and _gpus(old.node) == _gpus(node) else now
        self.nodes[name] = NodeEntry(obj["metadata"].get("uid") or "", obj, node, problem, since, gpus)
        if problem:
            self.unreadable.add(name)
        else:
            self.unreadable.discard(name)
        if old is None or old.node != node:
            self._offer(old.node if old else None, -1)
            self._offer(node, 1)
            self.gpus.node(name, old.node if old else None, node)
        meta = obj["metadata"]
        if any(k.startswith(MIG_KEYS) for k in (*(meta.get("annotations") or ()), *(meta.get("labels") or ()))):
            self.mig_nodes.add(name)
        else:
            self.mig_nodes.discard(name)
        if old is None or old.node != node:
            self.version += 1
            self.node_stamps[name] = self.version
            if self.notes.followed:
                self.nodes_changed.add(name)
            if old is None or old.node is None or node is None:
                self.layout += 1

    def forget(self, name: str, uid: str, obj: dict | None, now: float) -> None:
        gone = self.nodes.pop(name, None)
        self._offer(gone.node if gone else None, -1)
        self.gpus.node(name, gone.node if gone else None, None)
        self.mig_nodes.discard(name)
        self.unreadable.discard(name)
        self.node_edits += 1
        self.relayout()
        self.node_stamps.pop(name, None)  # the layout changed: the next snapshot is built anew
        self.notes.went(uid)

    def relayout(self) -> None:
        """The snapshot must be built anew (a node came or went, the topology changed)."""
        self.version += 1
        self.layout += 1

    def _offer(self, node: Node | None, sign: int) -> None:
        for key in offer_keys(node) if node is not None else ():
            count = self.offers.get(key, 0) + sign
            if count:
                self.offers[key] = count
            else:
                del self.offers[key]

    def usable_nodes(self) -> list[Node]:
        return [entry.node for entry in self.nodes.values() if entry.node is not None]


def _gpus(node: Node | None) -> int | None:
    return None if node is None else node.allocatable.get(GPU, 0)


def offer_keys(node: Node) -> set[tuple[str, str]]:
    """What one usable node adds to what the cluster offers at all (`decide.Offered`): ("product", its GPU product),
    ("resource", each resource it has some of), ("mig", its product when it is MIG-capable)."""
    keys = {("resource", resource) for resource, amount in node.allocatable.items() if amount > 0}
    product = node.labels.get(PRODUCT_LABEL)
    if product is not None:
        keys.add(("product", product))
        if node.labels.get(MIG_CAPABLE_LABEL) == "true":
            keys.add(("mig", product))
    return keys


def mig_expectation(obj: dict) -> dict[str, int] | None:
    """The resources a node must advertise once its requested MIG reconfiguration is done, or None. Raises
    ConvertError when our own annotation is damaged."""
    raw = (obj["metadata"].get("annotations") or {}).get(MIG_EXPECT)
    if not raw:
        return None
    try:
        expect = json.loads(raw)
        if not isinstance(expect, dict):
            raise ValueError("not a mapping")
        return {str(k): int(v) for k, v in expect.items()}
    except (ValueError, TypeError) as e:
        raise ConvertError(f"Node {obj['metadata']['name']}", f"metadata.annotations[{MIG_EXPECT}]",
                           f"not a JSON mapping of resource counts ({e})") from None


def mig_held(obj: dict) -> bool:
    """A node we asked to reconfigure, until the MIG manager says success and its allocatable shows the result."""
    expect = mig_expectation(obj)
    if expect is None:
        return False
    if (obj["metadata"].get("labels") or {}).get(STATE_LABEL) != "success":
        return True
    alloc = (obj.get("status") or {}).get("allocatable") or {}
    return any(str(alloc.get(r, "0")) != str(n) for r, n in expect.items())


def failed_condition(obj: dict, conditions: frozenset[tuple[str, str]]) -> str | None:
    """The first of the node's conditions that means it failed, as Type=Status (None: none does)."""
    for c in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and (str(c.get("type")), str(c.get("status"))) in conditions:
            return f"{c.get('type')}={c.get('status')}"
    return None
