"""The DRA allocator (core/dra) against kube-scheduler's, on a real control plane: random ResourceSlices,
DeviceClasses and ResourceClaims, a node at a time.

Each case is a pair of KWOK nodes with the same random devices, some of them held first by another claim. On the
first, a pod pinned to it claims random claims; kube-scheduler binds it (claims allocated) or leaves it
unschedulable, and the allocator, given the same objects read back from the API server, must agree on whether the
claims fit. Where the allocator finds an allocation, the second node checks it is one kube-scheduler accepts: the
same claims, each exact request narrowed to the devices the allocator chose (a selector on a unique attribute),
must be allocated exactly so there."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field

from kubernetes import client

from superpod.core.dra.allocate import Allocation, Allocator, Shortfall
from superpod.core.dra.model import allocated_devices, node_pools, read_claim, read_classes, read_slices

GROUP, VERSION = "resource.k8s.io", "v1"
DRIVERS = ("gpu.nvidia.com", "nic.example.com")
ID_DOMAIN = "agree.superpod.dev"  # every device's unique id: what narrows a claim to the allocator's devices
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"  # a standard attribute, shared by both drivers' devices
LABEL = "agree.superpod.dev/batch"
ROLE = "agree.superpod.dev/role"  # of a pod: case, blocker (holds devices before the cases), probe
NODE_PREFIX = "dra-agree"
PROBE_NODE = f"{NODE_PREFIX}-probe"

# --- random objects ------------------------------------------------------------------------------------------------

TAINT = "agree.superpod.dev/taint"
TAINT_EFFECTS = ("NoSchedule",)  # NoExecute would have the eviction controller delete pods
TOLERATIONS = ({"key": TAINT, "operator": "Exists"}, {"key": TAINT, "operator": "Equal", "value": "v"},
               {"operator": "Exists", "effect": "NoSchedule"})
VERSIONS = ("1.0.0", "1.0.0+build.7", "1.2.0", "2.0.0-rc.1", "2.0.0", "10.1.3")
MEMORY = ("40Gi", "80Gi", "81920Mi", "96G", "141Gi")


def _selector(rng: random.Random, d: str) -> str:
    """A CEL selector over a device of driver domain `d`; now and then one that fails on devices without an
    optional attribute (a runtime error stops kube-scheduler only if its search comes to such a device)."""
    a = f"device.attributes['{d}']"
    if rng.random() < 0.06:
        return rng.choice([f"{a}.numa == {rng.randint(0, 1)}", f"{a}.rack != 'r0'"])
    return rng.choice([
        f"{a}.model == '{rng.choice('ABC')}'",
        f"{a}.model in ['A', '{rng.choice('BC')}']",
        f"{a}.index >= {rng.randint(1, 5)}",
        f"{a}.index % 2 == {rng.randint(0, 1)}",
        f"{a}.fast",
        f"!{a}.fast",
        f"device.capacity['{d}'].memory.compareTo(quantity('{rng.choice(MEMORY)}')) >= 0",
        f"device.capacity['{d}'].memory.isLessThan(quantity('{rng.choice(MEMORY)}'))",
        f"{a}.driverVersion.isGreaterThan(semver('{rng.choice(VERSIONS)}'))",
        f"{a}.driverVersion == semver('{rng.choice(VERSIONS)}')",
        f"'numa' in {a} && {a}.numa == {rng.randint(0, 1)}",
        f"!('rack' in {a})",
        f"{a}.?rack.orValue('none') != 'r{rng.randint(0, 2)}'",
        f"cel.bind(m, {a}.model, m == 'B' || m == 'C')",
        f"{a}.model.lowerAscii() == '{rng.choice('abc')}' || {a}.index == 0",
        f"device.driver == '{d}'",
        f"{a}.driverVersion.major() == {rng.randint(1, 2)}",
        f"{a}.driverVersion.compareTo(semver('{rng.choice(VERSIONS)}')) == 0",
        f"semver('2.0.0-rc.1').isLessThan({a}.driverVersion)",
        f"has({a}.numa) && {a}.numa == 0",
        f"{a}.?numa.hasValue()",
        f"{a}.exists(k, k == 'rack')",
        f"size({a}) > {rng.randint(5, 7)}",
        f"string({a}.slot) == '1'",
        f"{a}.model.matches('^[AB]$')",
        f"device.capacity['{d}'].memory.asApproximateFloat() > {rng.choice(['5e10', '9e10'])}",
        f"device.capacity['{d}'].memory.isGreaterThan(quantity('80Gi').add(quantity('1Mi')))",
    ])


def _attribute(value) -> dict:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, tuple):  # ("version", text)
        return {"version": value[1]}
    return {"string": value}


def random_devices(rng: random.Random) -> list[dict]:
    """A node's pools: [{driver, count (resourceSliceCount), slices: [[device, ...], ...], placement, stale,
    duplicate, split, obsolete}], devices without names. Now and then a pool is being updated (a slice missing), has
    an older generation's slice beside (to be ignored), names a device twice (invalid), selects its node by a node
    selector rather than by name, has its second slice on another node (complete all the same), or has a newer
    generation on another node (the node's slices are obsolete)."""
    pools = []
    for driver in rng.sample(DRIVERS, rng.choice([1, 2, 2, 2])):
        slices = [[_device(rng, driver) for _ in range(rng.randint(3, 7))] for _ in range(rng.choice([1, 1, 2]))]
        pools.append({"driver": driver, "slices": slices, "count": len(slices) + (rng.random() < 0.08),
                      "placement": rng.choice(["name", "name", "name", "expression", "field"]),
                      "stale": rng.random() < 0.1, "duplicate": len(slices) > 1 and rng.random() < 0.1,
                      "split": len(slices) > 1 and rng.random() < 0.15, "obsolete": rng.random() < 0.05})
    return pools


def _placement(node: str, kind: str) -> dict:
    if kind == "name":
        return {"nodeName": node}
    requirement = {"key": "kubernetes.io/hostname" if kind == "expression" else "metadata.name", "operator": "In",
                   "values": [node]}
    return {"nodeSelector": {"nodeSelectorTerms": [
        {"matchExpressions" if kind == "expression" else "matchFields": [requirement]}]}}


def _device(rng: random.Random, driver: str) -> dict:
    attributes = {"model": rng.choice("AABC"), "index": rng.randint(0, 7), "fast": rng.random() < 0.5,
                  "driverVersion": ("version", rng.choice(VERSIONS)),
                  "slot": rng.choice([1, 2, "1", "2"])}  # an int on some devices, a string on others
    if rng.random() < 0.7:
        attributes["numa"] = rng.randint(0, 1)
    if rng.random() < 0.5:
        attributes["rack"] = f"r{rng.randint(0, 2)}"
    if rng.random() < 0.7:
        attributes[PCIE_ROOT] = f"pci000{rng.randint(0, 1)}"
    device = {"attributes": attributes, "capacity": {"memory": rng.choice(MEMORY)}}
    if rng.random() < 0.12:
        device["taints"] = [{"key": TAINT, "value": rng.choice("vw"), "effect": rng.choice(TAINT_EFFECTS)}]
    return device


def random_classes(rng: random.Random, prefix: str, count: int = 4) -> list[dict]:
    out = []
    for i in range(count):
        driver = DRIVERS[i % 2] if i < 2 else rng.choice(DRIVERS)
        expressions = [f"device.driver == '{driver}'"] + [_selector(rng, driver) for _ in range(rng.choice([0, 0, 1]))]
        out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "DeviceClass",
                    "metadata": {"name": f"{prefix}-k{i}", "labels": {LABEL: prefix}},
                    "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
                    "driver": driver})  # not an API field: removed before creating
    return out


MATCH_ATTRIBUTES = ("gpu.nvidia.com/model", "gpu.nvidia.com/numa", "gpu.nvidia.com/driverVersion",
                    "gpu.nvidia.com/slot", "gpu.nvidia.com/fast", "nic.example.com/model", PCIE_ROOT)


def random_claim_spec(rng: random.Random, classes: list[dict]) -> dict:
    requests, names = [], []
    for r in range(rng.choice([1, 1, 1, 2, 2, 3])):
        name = f"r{r}"
        if rng.random() < 0.2:
            subs = [{"name": f"s{s}", **_exactly(rng, classes)} for s in range(rng.randint(2, 3))]
            requests.append({"name": name, "firstAvailable": subs})
            names += [name] + [f"{name}/{s['name']}" for s in subs]
        else:
            requests.append({"name": name, "exactly": _exactly(rng, classes)})
            names.append(name)
    devices: dict = {"requests": requests}
    constraints = []
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
        constraint: dict = {"matchAttribute": rng.choice(MATCH_ATTRIBUTES)}
        if rng.random() < 0.5:
            constraint["requests"] = sorted(rng.sample(names, rng.randint(1, min(2, len(names)))))
        constraints.append(constraint)
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def _exactly(rng: random.Random, classes: list[dict]) -> dict:
    device_class = rng.choice(classes)
    body: dict = {"deviceClassName": device_class["metadata"]["name"]}
    if rng.random() < 0.12:
        body["allocationMode"] = "All"
    else:
        body["allocationMode"] = "ExactCount"
        body["count"] = rng.choice([1, 1, 1, 1, 2, 2, 3])
    selectors = [_selector(rng, device_class["driver"]) for _ in range(rng.choice([0, 0, 0, 1, 1, 2]))]
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if rng.random() < 0.3:
        body["tolerations"] = [dict(rng.choice(TOLERATIONS))]
    return body


# --- objects on the API server -------------------------------------------------------------------------------------


def random_blocked(rng: random.Random, pools: list[dict]) -> list[tuple[str, str]]:
    """Devices another claim holds before the case's pod comes: none in half the cases, else one to three of the
    complete pools' devices (a pool being updated serves no exact request)."""
    devices = [(pool["driver"], f"p{k}-d{i}") for k, pool in enumerate(pools)
               if pool["count"] == len(pool["slices"]) and not (pool["duplicate"] or pool["split"] or pool["obsolete"])
               for i in range(sum(len(s) for s in pool["slices"]))]
    if not devices or rng.random() < 0.5:
        return []
    return rng.sample(devices, min(len(devices), rng.randint(1, 3)))


def blocker_class(batch: str) -> dict:
    expression = f"device.driver in {list(DRIVERS)}"
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DeviceClass",
            "metadata": {"name": f"{batch}-blocker", "labels": {LABEL: batch}},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def blocker_spec(batch: str, blocked: list[tuple[str, str]]) -> dict:
    ids = ", ".join(f"'{device_id}'" for _, device_id in blocked)
    return {"devices": {"requests": [{"name": "held", "exactly": {
        "deviceClassName": f"{batch}-blocker", "count": len(blocked), "tolerations": [{"operator": "Exists"}],
        "selectors": [{"cel": {"expression": f"device.attributes['{ID_DOMAIN}'].id in [{ids}]"}}]}}]}}


def slices_for(node: str, batch: str, pools: list[dict]) -> list[dict]:
    """The node's ResourceSlices: pool `<node>-<batch>-p<k>`, devices `d<i>` with an id attribute `p<k>-d<i>`."""
    out = []
    for k, pool in enumerate(pools):
        driver, number, generation = pool["driver"], 0, 2 if pool["stale"] else 1
        slices = [(f"s{s}", generation, pool["count"], devices) for s, devices in enumerate(pool["slices"])]
        if pool["stale"]:
            slices.append(("old", 1, 1, pool["slices"][0]))
        if pool["obsolete"]:
            slices.append(("new", generation + 1, 1, pool["slices"][0]))
        for suffix, generation, count, devices in slices:
            rendered = []
            for device in devices:
                name = "d0" if pool["duplicate"] and suffix == "s1" and not rendered else f"d{number}"
                if suffix in ("old", "new"):
                    name = f"{suffix}{len(rendered)}"
                attributes = {key: _attribute(value) for key, value in device["attributes"].items()}
                attributes[f"{ID_DOMAIN}/id"] = {"string": f"p{k}-{name}"}
                rendered.append({"name": name, "attributes": attributes, "taints": device.get("taints", []),
                                 "capacity": {key: {"value": v} for key, v in device["capacity"].items()}})
                number += suffix not in ("old", "new")
            elsewhere = suffix == "new" or (suffix == "s1" and pool["split"])  # on the probe node, never used there
            placement = {"nodeName": PROBE_NODE} if elsewhere else _placement(node, pool["placement"])
            out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice",
                        "metadata": {"name": f"{node}-{batch}-p{k}-{suffix}", "labels": {LABEL: batch}},
                        "spec": {"driver": driver, "devices": rendered, **placement,
                                 "pool": {"name": f"{node}-{batch}-p{k}", "generation": generation,
                                          "resourceSliceCount": count}}})
    return out


def claim(namespace: str, name: str, batch: str, spec: dict) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": {LABEL: batch}}, "spec": spec}


def pod(name: str, node: str, batch: str, claim_names: list[str], role: str = "case") -> dict:
    entries = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claim_names)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {LABEL: batch, ROLE: role}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [{"operator": "Exists"}],
                     "terminationGracePeriodSeconds": 0, "resourceClaims": entries,
                     "containers": [{"name": "c", "image": "x",
                                     "resources": {"claims": [{"name": e["name"]} for e in entries]}}]}}


def kwok_node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"type": "kwok", "kubernetes.io/hostname": name},
                         "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {}, "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                                   "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}


def narrowed(spec: dict, allocation: Allocation) -> dict:
    """The claim spec with each exact (sub)request narrowed to the devices `allocation` gave its request; All
    requests as they are (all matching devices: one answer only)."""
    chosen: dict[str, list[str]] = {}
    for request, device_id in allocation.results:
        chosen.setdefault(request.split("/", 1)[0], []).append(device_id)
    out = json.loads(json.dumps(spec))

    def narrow(body: dict, request: str) -> None:
        if body.get("allocationMode") == "All":
            return
        ids = [f"'{i}'" for i in chosen.get(request, [])]
        expression = f"device.attributes['{ID_DOMAIN}'].id in [{', '.join(ids)}]"
        body.setdefault("selectors", []).append({"cel": {"expression": expression}})

    for request in out["devices"]["requests"]:
        if "exactly" in request:
            narrow(request["exactly"], request["name"])
        for sub in request.get("firstAvailable") or ():
            narrow(sub, request["name"])
    return out


# --- running cases -------------------------------------------------------------------------------------------------


@dataclass
class Case:
    index: int
    node: str
    twin: str
    pools: list[dict]
    specs: list[dict]
    claims: list[str] = field(default_factory=list)
    twin_claims: list[str] = field(default_factory=list)
    ours: list[Allocation] | Shortfall | None = None
    pool_objs: list[dict] = field(default_factory=list)  # the node's ResourceSlices as served
    blocked: list[tuple[str, str]] = field(default_factory=list)  # (driver, device id) held by another claim
    taken: list[tuple[str, str, str]] = field(default_factory=list)  # the node's devices other claims hold


@dataclass
class Outcome:
    cases: int = 0
    both_allocated: int = 0
    neither: int = 0
    disagreements: list[dict] = field(default_factory=list)


class Agreement:
    """Runs batches of cases on `nodes` node pairs in `namespace`."""

    def __init__(self, api: client.ApiClient, namespace: str, nodes: int = 6, timeout: float = 60):
        self.api, self.namespace, self.nodes, self.timeout = api, namespace, nodes, timeout
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.outcome = Outcome()

    def setup(self) -> None:
        self._clean(LABEL)  # what an interrupted run left: its devices would be visible to this one's nodes
        names = self._node_names()
        for name in names:
            try:
                self.core.create_node(kwok_node(name))
            except client.ApiException as error:
                if error.status != 409:
                    raise
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            ready = {n.metadata.name for n in self.core.list_node(label_selector="type=kwok").items
                     if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or ())}
            if set(names) <= ready:
                return
            time.sleep(0.5)
        raise AssertionError(f"KWOK nodes not Ready: {sorted(set(names) - ready)}")

    def teardown(self) -> None:
        """Leave the cluster as found: no node, slice or class of these cases (other tests see the nodes)."""
        self._clean(LABEL)
        for name in self._node_names():
            try:
                self.core.delete_node(name)
            except client.ApiException as error:
                if error.status != 404:
                    raise

    def _node_names(self) -> list[str]:
        return [f"{NODE_PREFIX}-{i}{side}" for i in range(self.nodes) for side in "ab"] + [PROBE_NODE]

    def run(self, seed: int, batch_index: int) -> None:
        """One batch: a case per node pair. Devices other claims hold are taken first, on both nodes of a pair
        alike (a pod of a claim narrowed to random devices); then the cases' pods are scheduled."""
        rng = random.Random(seed * 1_000_003 + batch_index)
        batch = f"{self.namespace}-b{batch_index}"  # names never reused: controllers' caches cannot mix runs
        classes = random_classes(rng, batch)
        cases = [Case(i, f"{NODE_PREFIX}-{i}a", f"{NODE_PREFIX}-{i}b", random_devices(rng),
                      [random_claim_spec(rng, classes) for _ in range(rng.choice([1, 1, 1, 2, 2, 3]))])
                 for i in range(self.nodes)]
        for case in cases:
            case.blocked = random_blocked(rng, case.pools)
        for device_class in [*classes, blocker_class(batch)]:
            body = {k: v for k, v in device_class.items() if k != "driver"}
            self.custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", body)
        for case in cases:
            for node in (case.node, case.twin):
                for body in slices_for(node, batch, case.pools):
                    self.custom.create_cluster_custom_object(GROUP, VERSION, "resourceslices", body)
                if case.blocked:
                    self._create_claim(f"{batch}-{node}-blocker", batch, blocker_spec(batch, case.blocked))
            for k, spec in enumerate(case.specs):
                case.claims.append(self._create_claim(f"{batch}-n{case.index}-c{k}", batch, spec))
        self._probe(batch, "probe0")
        for case in cases:
            for node in (case.node, case.twin) if case.blocked else ():
                name = f"{batch}-{node}-blocker"
                self.core.create_namespaced_pod(self.namespace, pod(name, node, batch, [name], "blocker"))
        blockers = self._settled(batch, "blocker")
        assert all(bound for bound, _ in blockers.values()), f"pods holding devices were not scheduled: {blockers}"
        self._ours(batch, cases)
        for case in cases:
            if isinstance(case.ours, list):
                for k, (spec, allocation) in enumerate(zip(case.specs, case.ours, strict=True)):
                    case.twin_claims.append(self._create_claim(f"{batch}-n{case.index}-t{k}", batch,
                                                               narrowed(spec, self._by_id(allocation))))
        self._probe(batch, "probe1")
        for case in cases:
            self.core.create_namespaced_pod(self.namespace, pod(f"{batch}-n{case.index}", case.node, batch,
                                                                case.claims))
            if case.twin_claims:
                self.core.create_namespaced_pod(self.namespace, pod(f"{batch}-t{case.index}", case.twin, batch,
                                                                    case.twin_claims))
        pods = self._settled(batch, "case")
        allocations = self._allocations(batch)
        for case in cases:
            self._compare(batch, seed, batch_index, case, pods, allocations, classes)
        self._clean(f"{LABEL}={batch}")

    def _create_claim(self, name: str, batch: str, spec: dict) -> str:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "resourceclaims",
                                                    claim(self.namespace, name, batch, spec))
        return name

    # --- the allocator's answer, from the objects as the API server serves them ---

    def _ours(self, batch: str, cases: list[Case]) -> None:
        selector = f"{LABEL}={batch}"
        slice_objs = self.custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
        class_objs = self.custom.list_cluster_custom_object(GROUP, VERSION, "deviceclasses",
                                                            label_selector=selector)["items"]
        claim_objs = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                               "resourceclaims")["items"]
        slices, errors = read_slices(slice_objs)
        classes, class_errors = read_classes(class_objs)
        assert not errors and not class_errors, errors + class_errors
        by_name = {c["metadata"]["name"]: c for c in claim_objs}
        taken = allocated_devices(claim_objs)
        allocator = Allocator(classes)
        for case in cases:
            held = {f"p{pool.rsplit('-p', 1)[1]}-{device}" for _, pool, device in taken
                    if pool.startswith(f"{case.node}-{batch}-")}
            assert held == {device_id for _, device_id in case.blocked}, (case.node, held, case.blocked)
            case.taken = sorted(d for d in taken if d[1].startswith(f"{case.node}-{batch}-"))
            pools = node_pools(slices, case.node, kwok_node(case.node)["metadata"]["labels"])
            case.ours = allocator.allocate(case.node, pools, taken, [read_claim(by_name[n]) for n in case.claims])
            case.pool_objs = [s for s in slice_objs if s["metadata"]["name"].startswith(f"{case.node}-{batch}-")]

    def _by_id(self, allocation: Allocation) -> Allocation:
        """`allocation` with each device named by its id attribute (`p<k>-d<i>`), as the twin's selectors need."""
        results = tuple((request, f"p{pool.rsplit('-p', 1)[1]}-{device}")
                        for request, (_, pool, device) in allocation.results)
        return Allocation(results, allocation.config, allocation.node_selector)

    # --- kube-scheduler's answer ---

    def _probe(self, batch: str, suffix: str) -> None:
        """Wait until kube-scheduler has seen every class, slice and claim made so far: a pod whose claim only the
        newest slice can serve binds only then (each kind is one ordered watch)."""
        name, driver, node = f"{batch}-{suffix}", "probe.superpod.dev", PROBE_NODE
        metadata = {"name": name, "labels": {LABEL: batch}}
        expression = f"device.driver == '{driver}' && device.attributes['{driver}'].batch == '{name}'"
        self.custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "DeviceClass", "metadata": metadata,
            "spec": {"selectors": [{"cel": {"expression": expression}}]}})
        self.custom.create_cluster_custom_object(GROUP, VERSION, "resourceslices", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceSlice", "metadata": metadata,
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "d0", "attributes": {"batch": {"string": name}}}]}})
        request = {"name": "r", "exactly": {"deviceClassName": name}}
        self._create_claim(name, batch, {"devices": {"requests": [request]}})
        self.core.create_namespaced_pod(self.namespace, pod(name, node, batch, [name], "probe"))
        deadline = time.monotonic() + self.timeout
        while not self.core.read_namespaced_pod(name, self.namespace).spec.node_name:
            if time.monotonic() > deadline:
                raise AssertionError(f"the probe pod {name} was not scheduled in {self.timeout}s")
            time.sleep(0.1)

    def _settled(self, batch: str, role: str) -> dict[str, tuple[bool, str]]:
        """Per pod: bound, or why not (the PodScheduled condition's message), once every pod is one or the other."""
        deadline = time.monotonic() + self.timeout
        while True:
            pods = self.core.list_namespaced_pod(self.namespace,
                                                 label_selector=f"{LABEL}={batch},{ROLE}={role}").items
            out = {}
            for p in pods:
                condition = next((c for c in p.status.conditions or () if c.type == "PodScheduled"), None)
                if p.spec.node_name:
                    out[p.metadata.name] = (True, "")
                elif condition is not None and condition.status == "False" and \
                        condition.reason in ("Unschedulable", "SchedulerError"):
                    out[p.metadata.name] = (False, f"{condition.reason}: {condition.message}")
            if len(out) == len(pods):
                return out
            if time.monotonic() > deadline:
                waiting = sorted({p.metadata.name for p in pods} - set(out))
                raise AssertionError(f"pods neither bound nor unschedulable after {self.timeout}s: {waiting}")
            time.sleep(0.2)

    def _allocations(self, batch: str) -> dict[str, dict | None]:
        claims = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "resourceclaims",
                                                           label_selector=f"{LABEL}={batch}")["items"]
        return {c["metadata"]["name"]: (c.get("status") or {}).get("allocation") for c in claims}

    # --- comparing ---

    def _compare(self, batch, seed, batch_index, case: Case, pods, allocations, classes) -> None:
        self.outcome.cases += 1
        kube_ok, why = pods.get(f"{batch}-n{case.index}", (False, "the pod was deleted"))
        ours_ok = isinstance(case.ours, list)
        problem = ""
        if kube_ok and not ours_ok:
            problem = f"kube-scheduler allocated, the allocator did not: {case.ours.code}: {case.ours.message}"
        elif ours_ok and not kube_ok:
            problem = f"the allocator allocated, kube-scheduler did not ({why})"
        if ours_ok:
            twin_ok, twin_why = pods.get(f"{batch}-t{case.index}", (False, "the pod was deleted"))
            expected = [sorted(self._by_id(a).results) for a in case.ours]
            got = [sorted(_ids(allocations.get(name))) if twin_ok else None for name in case.twin_claims]
            if not twin_ok:
                problem += f"; kube-scheduler refused the allocator's devices ({twin_why})"
            elif got != expected:
                problem += f"; narrowed to the allocator's devices, kube-scheduler chose {got}, not {expected}"
        if kube_ok and ours_ok:
            self.outcome.both_allocated += 1
        elif not kube_ok and not ours_ok:
            self.outcome.neither += 1
        if problem:
            self.outcome.disagreements.append({
                "seed": seed, "batch": batch_index, "node": case.node, "problem": problem.lstrip("; "),
                "classes": [{k: v for k, v in c.items() if k != "driver"} for c in classes],
                "slices": case.pool_objs, "taken": case.taken, "claims": case.specs,
                "kube": [allocations.get(name) for name in case.claims],
                "ours": [a.to_dict() for a in case.ours] if ours_ok else str(case.ours)})

    def _clean(self, selector: str) -> None:
        self.core.delete_collection_namespaced_pod(self.namespace, label_selector=selector, grace_period_seconds=0)
        self.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, self.namespace, "resourceclaims",
                                                               label_selector=selector)
        self.custom.delete_collection_cluster_custom_object(GROUP, VERSION, "resourceslices",
                                                            label_selector=selector)
        self.custom.delete_collection_cluster_custom_object(GROUP, VERSION, "deviceclasses", label_selector=selector)


def _ids(allocation: dict | None) -> list[tuple[str, str]]:
    results = ((allocation or {}).get("devices") or {}).get("results") or ()
    return [(r["request"], f"p{r['pool'].rsplit('-p', 1)[1]}-{r['device']}") for r in results]


def report(outcome: Outcome) -> str:
    lines = [f"{outcome.cases} cases: {outcome.both_allocated} allocated by both, {outcome.neither} by neither, "
             f"{len(outcome.disagreements)} disagreements"]
    for d in outcome.disagreements:
        lines.append(f"- seed {d['seed']} batch {d['batch']} node {d['node']}: {d['problem']}")
    return "\n".join(lines)
