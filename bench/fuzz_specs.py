"""Fuzz of the TrainingJob API against the real API server and the running operator. Generates TrainingJob specs
deterministically from a seed: (a) from the CRD's openAPIV3Schema for `spec` (a small walker: types, patterns,
bounds, int-or-string, plus wrong types and unknown fields) and (b) mutations of valid specs (the samples and a few
small ones: fields deleted, wrong types, out of range, unknown topology levels, container resources, broken
templates, huge replicas, slices that do not divide, unknown products and MIG profiles, extreme priorities ...).
Each is created with the Python client (field validation Strict, as `kubectl apply` does, for 4 in 5; the server's
default, Warn, for the rest) and then:

- refused at apply (HTTP 400/422): the message must name the field (`spec.` / `spec:`);
- accepted: it must reach a phase: Queued (with a message), Starting, Running, Succeeded, Failed (with a message)
  or Invalid (with a message), within ~2 minutes after the last apply.

Meanwhile a canary TrainingJob (1 replica, 1 GPU, runs 2s) is created every 5 seconds on two tainted simulated
nodes that no fuzz spec can use; each must be Running within 30s. At the end the operator's log must hold no
Traceback / ERROR / unhandled line and the operator must still run. Prints a summary; exit code 1 if any criterion
failed.

    .venv/bin/python bench/fuzz_specs.py [--count 1000] [--seed 1] [--rate 20] [--out results.json]

Runs its own local control plane (own ports, state folder cluster-fuzz): 32 simulated DGX H100 nodes, the 12-node
rental pool (as cluster "fuzzrent"), 2 tainted HGX H20 canary nodes, the operator and the simulated MIG manager. It
wipes it all at the end."""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from superpod.hardware import nodes, presets
from superpod.k8s.client import load
from superpod.localcluster.cluster import REPO, LocalCluster, Ports, state_dir

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import machine, wait_all_ready  # noqa: E402

PORTS = Ports(etcd=13179, etcd_peer=13180, apiserver=17243, controller_manager=21057, scheduler=21059, kwok=21047)
GROUP, VERSION, PLURAL = "superpod.dev", "v1alpha1", "trainingjobs"
FUZZ_NS, CANARY_NS = "fuzz", "fuzz-canary"
CANARY_CLUSTER = "fuzz-canary"
CANARY_TAINT = {"key": "fuzz.superpod.dev/canary", "value": "true", "effect": "NoSchedule"}
CANARY_EVERY, CANARY_LIMIT = 5.0, 30.0
SETTLE = 120.0  # seconds after the last apply for every accepted job to reach a phase
KEEP = 20.0  # seconds a settled, still active fuzz job stays before it is deleted (the cluster is small)
SIM = "sim.superpod.dev/"

LEVELS = ["spine", "leaf", "nvlink", "node"]
BAD_LEVELS = ["rack", "pod", "zone", "LEAF", "", "kubernetes.io/hostname", "x" * 63, "x" * 64]
PRODUCTS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200", "NVIDIA-A100-SXM4-80GB", "NVIDIA-GB200", "NVIDIA-H20"]
BAD_PRODUCTS = ["NVIDIA-Z999", "", "nvidia-h100-80gb-hbm3", "H100", "x" * 128, "x" * 129]
MIG_OK = ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.18gb", "3g.71gb",
          "7g.141gb", "9g.99gb", "0g.0gb", "1g.5gb"]  # all match the pattern; the last three exist nowhere here
MIG_BAD = ["3g40gb", "3G.40GB", "mig-3g.40gb", "", "1g.10gb+xe", "1g.10gb " + "x" * 30]
QUANTITIES = [1, 2, 16, "500m", "2", "32", "256Gi", "1Ti", "100M", "0", 0, "1.5"]
BAD_QUANTITIES = ["abc", "-1", -3, "1.2.3", "", "1e999", "5 Gi", "0x10", 1.5, True, [], {}]
RESOURCE_NAMES = ["cpu", "memory", "cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "rdma/ib",
                  "example.com/foo", "hugepages-2Mi", "ephemeral-storage"]
SELECTORS = [{}, {}, {presets.SIM_LABEL: "dgx-h100"}, {presets.SIM_LABEL: "fuzzrent"},
             {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu.product": "NVIDIA-H200"},
             {"superpod.dev/leaf": "su-1"}, {"superpod.dev/mig-dynamic": "true"}, {presets.SIM_LABEL: "nowhere"}]
ANNOTATIONS = [{}, {f"{SIM}run-for": "3s"}, {f"{SIM}run-for": "5s"}, {f"{SIM}run-for": "10s"},
               {f"{SIM}run-for": "20s"}, {f"{SIM}fail-after": "2s"}, {f"{SIM}stay-pending": ""},
               {f"{SIM}image-error": ""}, {f"{SIM}run-for": "5s", f"{SIM}terminate-after": "5s"},
               {f"{SIM}run-for": "bogus"}]
UNKNOWN = ["foo", "replica", "gpu", "Replicas", "x-extra", "spec", "status", "metadata", "nodeSelector"]
WRONG = {"string": ["x", "3g.40gb"], "integer": [7, -1, 2**40], "number": [1.5, -0.5, 3.0],
         "boolean": [True, False], "array": [[], [1, "a"], [{}]], "object": [{}, {"a": 1}], "null": [None]}
# Probability that the schema walker sets an optional field (default 0.5).
INCLUDE = {"spec.template.spec": 0.97, "spec.template.spec.containers": 0.97, "spec.template.spec.nodeName": 0.04,
           "spec.template.spec.schedulerName": 0.04, "spec.template.spec.schedulingGates": 0.04,
           "spec.template.spec.restartPolicy": 0.15, "spec.template.spec.initContainers": 0.1,
           "spec.template.spec.containers[].resources": 0.3, "spec.template.metadata": 0.6}


# Fields of a pod template the CRD keeps as given (x-kubernetes-preserve-unknown-fields): plausible values.
EXTRAS: dict[str, dict[str, Any]] = {
    "spec.template.metadata": {
        "annotations": lambda rng: dict(rng.choice(ANNOTATIONS)),
        "labels": lambda rng: rng.choice([{"app": "fuzz"}, {"team": "a", "tier": "x"}]),
    },
    "spec.template.spec": {
        "nodeSelector": lambda rng: dict(rng.choice(SELECTORS)),
        "tolerations": lambda rng: rng.choice([
            [{"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"}],
            [{"key": "example.com/gpu", "operator": "Exists"}]]),
        "affinity": lambda rng: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "superpod.dev/leaf", "operator": rng.choice(["In", "NotIn"]), "values": ["su-1"]}]}]}}},
        "volumes": lambda rng: [{"name": "data", "emptyDir": {}}],
    },
    "spec.template.spec.containers[]": {
        "image": lambda rng: rng.choice(["trainer", "nvcr.io/nvidia/pytorch:24.08-py3"]),
        "command": lambda rng: ["python", "train.py"],
        "env": lambda rng: [{"name": "A", "value": "1"}],
    },
}


class SchemaFuzzer:
    """Walks a structural OpenAPI v3 schema and makes a value for it: valid most of the time, and with probability
    `chaos` per field a wrong type, a bound broken, a pattern missed, or an unknown field."""

    def __init__(self, rng: random.Random, schema: dict) -> None:
        self.rng, self.schema, self.chaos, self.containers = rng, schema, 0.0, 0

    def spec(self) -> Any:
        self.chaos = self.rng.choice([0.0, 0.0, 0.01, 0.03, 0.06, 0.12, 0.25])
        if self.rng.random() < 0.01:
            return self.wrong("object")
        return self.value(self.schema, "spec")

    def value(self, schema: dict, path: str) -> Any:
        kind = "int-or-string" if schema.get("x-kubernetes-int-or-string") else schema.get("type", "object")
        if path != "spec" and self.rng.random() < self.chaos / 2:
            return self.wrong(kind)
        if kind == "int-or-string":
            return self.rng.choice(BAD_QUANTITIES) if self.bad() else self.rng.choice(QUANTITIES)
        if kind == "object":
            return self.obj(schema, path)
        if kind == "array":
            return self.array(schema, path)
        if kind == "integer":
            return self.integer(schema, path)
        if kind == "string":
            return self.string(schema, path)
        return self.rng.random() < 0.5

    def bad(self) -> bool:
        return self.rng.random() < self.chaos

    def wrong(self, kind: str) -> Any:
        kinds = [k for k in WRONG if k != kind and not (kind == "int-or-string" and k in ("string", "integer"))]
        return copy.deepcopy(self.rng.choice(WRONG[self.rng.choice(kinds)]))

    def obj(self, schema: dict, path: str) -> dict:
        rng, out = self.rng, {}
        required = set(schema.get("required", []))
        for name, sub in schema.get("properties", {}).items():
            p = 0.98 if name in required else INCLUDE.get(f"{path}.{name}", 0.5)
            if rng.random() < p:
                out[name] = self.value(sub, f"{path}.{name}")
        if isinstance(schema.get("additionalProperties"), dict):
            for _ in range(rng.choice([0, 1, 1, 2, 3])):
                key = rng.choice(RESOURCE_NAMES)
                out[key] = self.value(schema["additionalProperties"], f"{path}.{key}")
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            if path == "spec.template.spec.containers[]" and rng.random() < 0.97:
                self.containers += 1
                out["name"] = f"c{self.containers}"
            for name, make in EXTRAS.get(path, {}).items():
                if rng.random() < (0.9 if name == "image" else 0.4):
                    out[name] = self.wrong("object") if self.bad() else make(rng)
        if self.bad():
            out[rng.choice(UNKNOWN)] = rng.choice(["x", 1, {"a": 1}])
        return out

    def array(self, schema: dict, path: str) -> list:
        n = self.rng.choice([1, 1, 1, 2, 3] if path.endswith("containers") else [0, 1, 1, 2])
        if self.bad():
            n = self.rng.choice([0, schema.get("maxItems", 16) + 1])
        items = schema.get("items", {})
        return [self.value(items, f"{path}[]") for _ in range(n)]

    def integer(self, schema: dict, path: str) -> Any:
        rng = self.rng
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if self.bad():
            return rng.choice([v for v in (None if lo is None else lo - 1, None if hi is None else hi + 1,
                                           2**63 - 1, -(2**63), 2**64, 1.5, "3") if v is not None])
        if lo is None and hi is None:  # priority
            return rng.choice([0, 0, 1, 100, -5, 2**31 - 1, -(2**31), 10**12])
        lo = 1 if lo is None else lo
        if hi is not None and rng.random() < 0.15:
            return rng.choice([lo, hi, rng.randint(lo, hi)])
        small = {"spec.replicas": 8, "spec.resources.gpus": 8, "spec.topology.sliceSize": 4}.get(path, 600)
        return rng.randint(lo, lo + small - 1 if hi is None else min(hi, lo + small - 1))

    def string(self, schema: dict, path: str) -> Any:
        rng, last = self.rng, path.rsplit(".", 1)[-1]
        if "enum" in schema:
            return rng.choice(schema["enum"]) if not self.bad() else "NotAValue"
        if last == "migProfile":
            return rng.choice(MIG_BAD if self.bad() else MIG_OK)
        if last == "gpuProduct":
            return rng.choice(BAD_PRODUCTS if self.bad() else PRODUCTS)
        if last in ("required", "preferred", "sliceRequired"):
            return rng.choice(BAD_LEVELS if self.bad() else LEVELS)
        if last == "restartPolicy":
            return rng.choice(["Never", "Never", "Always", "OnFailure", ""])
        if last == "nodeName":
            return "dgx-su01-n01"
        if last == "schedulerName":
            return "default-scheduler"
        if self.bad() and "maxLength" in schema:
            return "a" * (schema["maxLength"] + 1)
        return rng.choice(["a", "x", "value"])


# ---- mutations of valid specs ------------------------------------------------------------------------------------

def valid_bases() -> list[tuple[str, dict]]:
    """The samples (valid TrainingJobs) and small valid specs that fit the simulated nodes."""
    out = []
    for path in sorted((REPO / "samples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "TrainingJob":
                out.append((path.stem, doc["spec"]))

    def job(replicas: int, resources: dict, topology: dict | None = None, pod: dict | None = None, **more) -> dict:
        spec = {"replicas": replicas, "resources": resources,
                "template": {"spec": {"containers": [{"name": "main", "image": "trainer"}], **(pod or {})}}}
        if topology:
            spec["topology"] = topology
        return {**spec, **more}

    out += [
        ("one", job(1, {"gpus": 1}, pod={"nodeSelector": {presets.SIM_LABEL: "dgx-h100"}})),
        ("leaf", job(2, {"gpus": 8, "gpuProduct": PRODUCTS[0]}, {"required": "leaf", "preferred": "node"})),
        ("mig", job(2, {"migProfile": "1g.10gb", "gpuProduct": "NVIDIA-A100-SXM4-80GB"},
                    pod={"nodeSelector": {presets.SIM_LABEL: "fuzzrent"}})),
        ("h200", job(1, {"gpus": 4, "gpuProduct": "NVIDIA-H200"}, priority=5)),
        ("slices", job(4, {"gpus": 8}, {"required": "spine", "sliceSize": 2, "sliceRequired": "leaf"})),
        ("cpu", job(3, {"gpus": 2, "cpu": "16", "memory": "64Gi"}, maxRestarts=1, startupTimeoutSeconds=60,
                    pod={"tolerations": [{"key": "dedicated", "operator": "Exists"}],
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchExpressions": [
                                 {"key": "superpod.dev/spine", "operator": "In", "values": ["dgx-spine-1"]}]}]}}}})),
    ]
    return out


def all_paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    out = []
    for k, v in items:
        out.append((*prefix, k))
        out += all_paths(v, (*prefix, k))
    return out


def put(spec: dict, path: tuple, value: Any) -> None:
    cur: Any = spec
    for k in path[:-1]:
        nxt = cur.get(k) if isinstance(cur, dict) else None
        if not isinstance(nxt, dict):
            nxt = cur[k] = {}
        cur = nxt
    cur[path[-1]] = value


def pod_spec(spec: dict) -> dict:
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    spec["template"] = template
    if not isinstance(template.get("spec"), dict):
        template["spec"] = {"containers": [{"name": "main", "image": "trainer"}]}
    return template["spec"]


def first_container(spec: dict) -> dict:
    pod = pod_spec(spec)
    ctrs = pod.get("containers")
    if not (isinstance(ctrs, list) and ctrs and isinstance(ctrs[0], dict)):
        pod["containers"] = [{"name": "main", "image": "trainer"}]
    return pod["containers"][0]


def m_delete(spec: dict, rng: random.Random) -> str:
    if not (paths := all_paths(spec)):
        return "noop"
    path = rng.choice(paths)
    parent = spec
    for k in path[:-1]:
        parent = parent[k]
    del parent[path[-1]]
    return f"del-{path[-1]}"


def m_wrong_type(spec: dict, rng: random.Random) -> str:
    if not (paths := all_paths(spec)):
        return "noop"
    path = rng.choice(paths)
    put_at(spec, path, copy.deepcopy(rng.choice(WRONG[rng.choice(list(WRONG))])))
    return f"type-{path[-1]}"


def m_empty(spec: dict, rng: random.Random) -> str:
    if not (paths := all_paths(spec)):
        return "noop"
    path = rng.choice(paths)
    put_at(spec, path, copy.deepcopy(rng.choice(["", {}, [], 0])))
    return f"empty-{path[-1]}"


def put_at(spec: dict, path: tuple, value: Any) -> None:
    parent = spec
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value


RANGES = [(("replicas",), [0, -1, 100_001, 2**31, 2**63 - 1]), (("resources", "gpus"), [0, 65, -1, 9, 64, 16]),
          (("maxRestarts",), [-1, 1001, 0, 1000]), (("startupTimeoutSeconds",), [0, -1, 1, 2**31]),
          (("topology", "sliceSize"), [0, -2, 3, 2**40]),
          (("priority",), [-1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 2**64, 10**30, 1.5])]


def m_range(spec: dict, rng: random.Random) -> str:
    path, values = rng.choice(RANGES)
    put(spec, path, rng.choice(values))
    return f"range-{path[-1]}"


def m_level(spec: dict, rng: random.Random) -> str:
    key = rng.choice(["required", "preferred", "sliceRequired"])
    put(spec, ("topology", key), rng.choice(BAD_LEVELS + LEVELS))
    return f"level-{key}"


CONTAINER_RESOURCES = [
    {"limits": {"nvidia.com/gpu": 1}}, {"requests": {"nvidia.com/gpu": "1"}},
    {"requests": {"nvidia.com/mig-1g.10gb": 1}, "limits": {"nvidia.com/mig-1g.10gb": 1}},
    {"requests": {"rdma/ib": 1}, "limits": {"rdma/ib": 1}}, {"requests": {"rdma/ib": 1}}, {"limits": {"rdma/ib": 2}},
    {"requests": {"cpu": "500"}}, {"requests": {"memory": "100Ti"}},
    {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
    {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}, {"requests": {"memory": "abc"}}, {"requests": {"cpu": -1}},
    {"limits": {"example.com/foo": "1.5"}}, {"requests": {"hugepages-2Mi": "1Gi"}, "limits": {"hugepages-2Mi": "1Gi"}},
    {"limits": "lots"}, "lots", {"claims": [{"name": "gpu"}]}, {"requests": {"cpu": 1.5}},
]


def m_container_resources(spec: dict, rng: random.Random) -> str:
    case = copy.deepcopy(rng.choice(CONTAINER_RESOURCES))
    if rng.random() < 0.15:
        pod_spec(spec)["initContainers"] = [{"name": "init", "image": "busybox", "resources": case}]
        return "init-res"
    first_container(spec)["resources"] = case
    return "ctr-res"


def _breaks() -> list[tuple[str, Any]]:
    """Ways to break a pod template: (tag, function of (spec, rng))."""
    def setp(key: str, value: Any):
        return lambda s, r: pod_spec(s).__setitem__(key, copy.deepcopy(value))

    def setc(key: str, value: Any):
        return lambda s, r: first_container(s).__setitem__(key, copy.deepcopy(value))

    def delc(key: str):
        return lambda s, r: first_container(s).pop(key, None)

    def tmeta(key: str, value: Any):
        return lambda s, r: put(s, ("template", "metadata", key), copy.deepcopy(value))

    return [
        ("ctrs-map", setp("containers", {"name": "x", "image": "trainer"})), ("ctrs-str", setp("containers", "x")),
        ("ctrs-empty", setp("containers", [])), ("ctr-str", setp("containers", ["trainer"])),
        ("ctrs-65", setp("containers", [{"name": f"c{i}", "image": "t"} for i in range(65)])),
        ("ctrs-dup", setp("containers", [{"name": "a", "image": "t"}, {"name": "a", "image": "t"}])),
        ("env-map", setc("env", {"A": "1"})), ("env-strs", setc("env", [{"name": "A"}, "B"])),
        ("env-noname", setc("env", [{"value": "1"}])), ("noname", delc("name")), ("noimage", delc("image")),
        ("name-empty", setc("name", "")), ("name-bad", setc("name", "Bad_Name")),
        ("ports-bad", setc("ports", [{"containerPort": "eighty"}])), ("cmd-str", setc("command", "python x")),
        ("nodename", setp("nodeName", "dgx-su01-n01")), ("schedname", setp("schedulerName", "default-scheduler")),
        ("gates", setp("schedulingGates", [{"name": "wait"}])), ("restart-always", setp("restartPolicy", "Always")),
        ("restart-never", setp("restartPolicy", "Never")), ("restart-int", setp("restartPolicy", 1)),
        ("tpl-spec-list", lambda s, r: put(s, ("template", "spec"), [])),
        ("tpl-spec-str", lambda s, r: put(s, ("template", "spec"), "x")),
        ("tpl-empty", lambda s, r: s.__setitem__("template", {})),
        ("tpl-str", lambda s, r: s.__setitem__("template", "pod")),
        ("tmeta-str", lambda s, r: put(s, ("template", "metadata"), "x")),
        ("ann-str", tmeta("annotations", "x")), ("ann-int", tmeta("annotations", {"a": 1})),
        ("labels-int", tmeta("labels", {"a": 1})), ("labels-bad", tmeta("labels", {"a": "has space"})),
        ("labels-list", tmeta("labels", ["a"])), ("tmeta-name", tmeta("name", "other")),
        ("sel-str", setp("nodeSelector", "x")), ("sel-list", setp("nodeSelector", ["a"])),
        ("sel-int", setp("nodeSelector", {"k": 1})), ("sel-nowhere", setp("nodeSelector", {"k": "nowhere"})),
        ("tol-str", setp("tolerations", "x")), ("tol-ints", setp("tolerations", [1])),
        ("tol-op", setp("tolerations", [{"key": "a", "operator": "Bogus"}])),
        ("tol-noop", setp("tolerations", [{"key": "", "operator": "Equal", "value": "a"}])),
        ("aff-str", setp("affinity", "x")),
        ("aff-terms", setp("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": "x"}}})),
        ("aff-op", setp("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}]}}})),
        ("aff-gt", setp("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["x", "y"]}]}]}}})),
        ("aff-empty", setp("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": []}}})),
        ("volumes-str", setp("volumes", "x")), ("volumes-bad", setp("volumes", [{"name": "v", "hostPath": 1}])),
        ("hostnet", setp("hostNetwork", True)), ("hostname", setp("hostname", "other")),
        ("pod-unknown", setp("fooBar", 1)), ("ctr-unknown", setc("fooBar", 1)),
        ("overhead", setp("overhead", {"cpu": "1"})), ("prio-class", setp("priorityClassName", "missing")),
        ("sa-missing", setp("serviceAccountName", "missing")), ("grace-neg", setp("terminationGracePeriodSeconds", -5)),
    ]


BREAKS = _breaks()


def m_template(spec: dict, rng: random.Random) -> str:
    tag, fn = rng.choice(BREAKS)
    fn(spec, rng)
    return tag


def m_huge(spec: dict, rng: random.Random) -> str:
    spec["replicas"] = rng.choice([1000, 5000, 99_999, 100_000])
    if rng.random() < 0.5:
        spec["priority"] = rng.choice([10**6, 2**31 - 1])
    return "huge"


def m_slices(spec: dict, rng: random.Random) -> str:
    topo = spec["topology"] = spec.get("topology") if isinstance(spec.get("topology"), dict) else {}
    case = rng.randrange(5)
    if case == 0:
        spec["replicas"], topo["sliceSize"], topo["sliceRequired"] = 6, 4, "leaf"
    elif case == 1:
        topo["sliceSize"] = 2
        topo.pop("sliceRequired", None)
    elif case == 2:
        topo["sliceRequired"] = "nvlink"
        topo.pop("sliceSize", None)
    elif case == 3:
        spec["replicas"], topo["sliceSize"], topo["sliceRequired"] = 4, 4, "nvlink"
    else:
        spec["replicas"], topo["sliceSize"], topo["sliceRequired"] = 8, 8, rng.choice(["node", "rack"])
    return f"slice{case}"


def _resources(spec: dict) -> dict:
    if not isinstance(spec.get("resources"), dict):
        spec["resources"] = {"gpus": 1}
    return spec["resources"]


def m_product(spec: dict, rng: random.Random) -> str:
    _resources(spec)["gpuProduct"] = rng.choice(BAD_PRODUCTS + PRODUCTS)
    return "product"


def m_mig(spec: dict, rng: random.Random) -> str:
    res = _resources(spec)
    case = rng.randrange(4)
    if case < 2:
        res.pop("gpus", None)
        res["migProfile"] = rng.choice(MIG_OK if case == 0 else MIG_BAD)
    elif case == 2:
        res["migProfile"] = rng.choice(MIG_OK)
        res["gpus"] = 1
    else:
        res.pop("gpus", None)
        res.pop("migProfile", None)
    return f"mig{case}"


def m_cpu_mem(spec: dict, rng: random.Random) -> str:
    key = rng.choice(["cpu", "memory"])
    _resources(spec)[key] = rng.choice(QUANTITIES + BAD_QUANTITIES + ["2Ei", 10**20, "1000", "100Ti"])
    return key


def m_lifecycle(spec: dict, rng: random.Random) -> str:
    put(spec, ("template", "metadata", "annotations"), dict(rng.choice(ANNOTATIONS[5:])))
    spec["maxRestarts"] = rng.choice([0, 1, 3])
    spec["startupTimeoutSeconds"] = rng.choice([2, 5, 600])
    return "life"


def m_unknown(spec: dict, rng: random.Random) -> str:
    where = rng.choice([(), ("resources",), ("topology",), ("template",)])
    key = rng.choice(UNKNOWN)
    put(spec, (*where, key), rng.choice(["x", 1, {"a": 1}]))
    return f"unk-{key}"


def m_selector(spec: dict, rng: random.Random) -> str:
    pod_spec(spec)["nodeSelector"] = dict(rng.choice(SELECTORS))
    return "sel"


MUTATIONS = [(m_delete, 3), (m_wrong_type, 3), (m_empty, 2), (m_range, 3), (m_level, 2), (m_container_resources, 3),
             (m_template, 5), (m_huge, 1), (m_slices, 2), (m_product, 2), (m_mig, 3), (m_cpu_mem, 2),
             (m_lifecycle, 2), (m_unknown, 2), (m_selector, 1)]


@dataclass
class Case:
    name: str
    origin: str  # "schema" or "mutation:<base>:<tags>"
    spec: Any
    strict: bool


def generate(count: int, seed: int, schema: dict) -> list[Case]:
    rng = random.Random(seed)
    fuzzer = SchemaFuzzer(rng, schema)
    bases = valid_bases()
    fns, weights = zip(*MUTATIONS, strict=True)
    cases = []
    for i in range(count):
        if rng.random() < 0.35:
            spec, origin, tag = fuzzer.spec(), "schema", "s"
        else:
            base, spec = rng.choice(bases)
            spec = copy.deepcopy(spec)
            if rng.random() < 0.7:
                put(spec, ("template", "metadata", "annotations"), dict(rng.choice(ANNOTATIONS[:6])))
            if rng.random() < 0.4:
                pod_spec(spec)["nodeSelector"] = dict(rng.choice(SELECTORS[:-1]))
            tags = [fn(spec, rng) for fn in rng.choices(fns, weights, k=rng.choice([1, 1, 1, 2, 2, 3]))]
            origin, tag = f"mutation:{base}:{','.join(tags)}", "-".join(tags)
        name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", f"fz-{i:04d}-{tag}".lower()))[:50].strip("-")
        cases.append(Case(name, origin, spec, strict=rng.random() < 0.8))
    return cases


# ---- running ----------------------------------------------------------------------------------------------------

@dataclass
class Job:
    case: Case
    applied: float
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    ok_at: float | None = None
    deleted: bool = False


def ok_status(st: dict) -> bool:
    phase, message = st.get("phase"), st.get("message")
    return phase in ("Starting", "Running", "Succeeded") or (phase in ("Queued", "Failed", "Invalid") and
                                                             bool(message))


@dataclass
class Tracker:
    custom: client.CustomObjectsApi
    jobs: dict[str, Job] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    errors: list[str] = field(default_factory=list)

    def observe(self, obj: dict) -> None:
        st = obj.get("status") or {}
        with self.lock:
            job = self.jobs.get(obj["metadata"]["name"])
            if job is None:
                return
            job.phase, job.reason, job.message = st.get("phase"), st.get("reason"), st.get("message")
            if job.ok_at is None and ok_status(st):
                job.ok_at = time.monotonic()

    def watch(self, stop: threading.Event) -> None:
        rv = None
        while not stop.is_set():
            try:
                if rv is None:
                    listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, FUZZ_NS, PLURAL)
                    for obj in listed["items"]:
                        self.observe(obj)
                    rv = listed["metadata"]["resourceVersion"]
                for ev in watch.Watch().stream(self.custom.list_namespaced_custom_object, GROUP, VERSION, FUZZ_NS,
                                               PLURAL, resource_version=rv, timeout_seconds=5):
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        rv = None
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] != "DELETED":
                        self.observe(obj)
                    if stop.is_set():
                        break
            except ApiException as e:
                rv = None
                if e.status != 410:
                    self.errors.append(f"watch: HTTP {e.status}")
                    stop.wait(1)
            except Exception as e:  # keep watching; reported in the summary
                rv = None
                self.errors.append(f"watch: {type(e).__name__}: {e}")
                stop.wait(1)

    def reap(self, stop: threading.Event) -> None:
        """Delete fuzz jobs once they reached a phase: finished ones at once, the others after KEEP seconds."""
        while not stop.wait(2):
            now = time.monotonic()
            with self.lock:
                done = [j for j in self.jobs.values() if j.ok_at is not None and not j.deleted and
                        (j.phase in ("Succeeded", "Failed", "Invalid") or now - j.ok_at > KEEP)]
            for j in done:
                try:
                    self.custom.delete_namespaced_custom_object(GROUP, VERSION, FUZZ_NS, PLURAL, j.case.name)
                except ApiException as e:
                    if e.status != 404:
                        self.errors.append(f"delete {j.case.name}: HTTP {e.status}")
                j.deleted = True
                if stop.is_set():
                    break


def canary_body(name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"replicas": 1, "resources": {"gpus": 1}, "template": {
                "metadata": {"annotations": {f"{SIM}run-for": "2s"}},
                "spec": {"nodeSelector": {presets.SIM_LABEL: CANARY_CLUSTER},
                         "tolerations": [{"key": CANARY_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
                         "containers": [{"name": "canary", "image": "busybox"}]}}}}


@dataclass
class Canaries:
    custom: client.CustomObjectsApi
    started: float
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (created at, seconds to Running)
    pending: dict[str, float] = field(default_factory=dict)
    stalls: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    created: int = 0

    def run(self, stop: threading.Event) -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_at:
                name = f"canary-{self.created:04d}"
                self.created += 1
                next_at += CANARY_EVERY
                try:
                    self.custom.create_namespaced_custom_object(GROUP, VERSION, CANARY_NS, PLURAL, canary_body(name))
                    self.pending[name] = now
                except ApiException as e:
                    self.errors.append(f"{name}: create HTTP {e.status}: {e.reason}")
            if self.pending:
                self.check()
            stop.wait(0.3)

    def check(self) -> None:
        try:
            items = self.custom.list_namespaced_custom_object(GROUP, VERSION, CANARY_NS, PLURAL)["items"]
        except ApiException as e:
            self.errors.append(f"list: HTTP {e.status}")
            return
        now = time.monotonic()
        for obj in items:
            name, st = obj["metadata"]["name"], obj.get("status") or {}
            t0 = self.pending.get(name)
            if t0 is None:
                continue
            if st.get("phase") in ("Running", "Succeeded", "Failed", "Invalid"):
                del self.pending[name]
                if st.get("phase") in ("Running", "Succeeded"):
                    self.latencies.append((t0 - self.started, now - t0))
                    if now - t0 > CANARY_LIMIT:
                        self.stalls.append(f"{name}: Running only after {now - t0:.1f}s")
                else:
                    self.stalls.append(f"{name}: {st.get('phase')}: {st.get('message')}")
                try:
                    self.custom.delete_namespaced_custom_object(GROUP, VERSION, CANARY_NS, PLURAL, name)
                except ApiException as e:
                    self.errors.append(f"delete {name}: HTTP {e.status}")

    def finish(self) -> None:
        self.check()
        now = time.monotonic()
        for name, t0 in self.pending.items():
            if now - t0 > CANARY_LIMIT:
                self.stalls.append(f"{name}: not Running after {now - t0:.1f}s (created at +{t0 - self.started:.0f}s)")


def api_message(e: ApiException) -> str:
    try:
        return json.loads(e.body).get("message") or str(e.body)
    except (TypeError, ValueError, AttributeError):
        return str(e.body or e.reason)


def names_field(message: str) -> bool:
    return re.search(r"\bspec[.:\[]", message) is not None


def kinds(messages: list[str], n: int) -> list[str]:
    """The n most frequent kinds of message (names and numbers blanked), each with one example and its count."""
    groups: dict[str, list[str]] = {}
    for m in messages:
        key = re.sub(r'"fz-[^"]*"', '"<name>"', m)
        key = re.sub(r"\d+", "N", re.sub(r'"[^"]*"', '"…"', key))[:120]
        groups.setdefault(key, []).append(m)
    top = sorted(groups.values(), key=len, reverse=True)[:n]
    return [f"[{len(g)}x] {g[0][:300]}" for g in top]


def short(spec: Any) -> str:
    text = json.dumps(spec, separators=(",", ":"), sort_keys=True)
    return text if len(text) < 600 else text[:600] + "…"


def operator_log(path: Path) -> tuple[list[str], list[str], Counter]:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    warnings = Counter(re.sub(r"\d+", "N", re.sub(r"^\S+ \S+ WARNING ", "", ln))[:90]
                       for ln in lines if " WARNING " in ln)
    bad = [i for i, ln in enumerate(lines) if "Traceback" in ln or " ERROR " in ln or "CRITICAL" in ln
           or "unhandled" in ln.lower()]
    shown = []
    for i in bad[:5]:
        shown.append(lines[i][:400])
        if "Traceback" in lines[i] or (i + 1 < len(lines) and lines[i + 1].startswith("Traceback")):
            block = lines[i + 1:i + 40]
            end = next((k for k, ln in enumerate(block) if ln and not ln.startswith((" ", "Traceback"))), len(block))
            shown += [f"    {ln[:300]}" for ln in block[:end + 1]]
    return [lines[i] for i in bad], shown, warnings


def setup(local: LocalCluster, api: client.ApiClient, bin_dir: Path) -> int:
    core = client.CoreV1Api(api)
    fuzz_nodes = presets.preset_nodes("dgx-h100", 32) + presets.preset_nodes("rental-mixed", 12, cluster="fuzzrent")
    canary_nodes = presets.preset_nodes("hgx-h20", 2, cluster=CANARY_CLUSTER)
    for n in canary_nodes:
        n["spec"]["taints"] = [CANARY_TAINT]
    objs = fuzz_nodes + canary_nodes
    nodes.create_nodes(api, objs)
    wait_all_ready(core, presets.SIM_LABEL, len(objs))
    kubectl = [str(bin_dir / "kubectl"), f"--kubeconfig={local.kubeconfig}"]
    for step in (["apply", "-f", str(REPO / "crds")], ["wait", "--for=condition=Established", "crd", "--all"],
                 ["apply", "-f", str(REPO / "samples" / "topology.yaml")]):
        subprocess.run(kubectl + step, check=True, capture_output=True)
    for ns in (FUZZ_NS, CANARY_NS):
        core.create_namespace({"metadata": {"name": ns}})
    env = {**os.environ, "KUBECONFIG": str(local.kubeconfig)}
    local.start_process("operator", [sys.executable, "-m", "superpod.cli", "run", "--metrics-port", "0",
                                     "--log-level", "INFO"], env)
    local.start_process("mig-manager", [sys.executable, "-m", "superpod.cli", "hardware", "mig-manager"], env)
    return len(objs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=20, help="creates per second at most")
    ap.add_argument("--out", help="write every case and its outcome to this JSON file")
    args = ap.parse_args()
    started = time.monotonic()
    print(f"machine: {machine()}", flush=True)
    schema_doc = yaml.safe_load((REPO / "crds" / "superpod.dev_trainingjobs.yaml").read_text())
    schema = schema_doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    cases = generate(args.count, args.seed, schema)
    local = LocalCluster(state_dir().parent / "cluster-fuzz", PORTS)
    local.wipe()
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        bin_dir = local.build(quiet=True)
        local.up(bin_dir)
        api = load(local.kubeconfig, pool_size=8)
        custom = client.CustomObjectsApi(api)
        n_nodes = setup(local, api, bin_dir)
        print(f"cluster up, {n_nodes} simulated nodes Ready, operator started ({time.monotonic() - started:.0f}s)",
              flush=True)
        tracker, canaries = Tracker(custom), Canaries(custom, time.monotonic())
        threads = [threading.Thread(target=t, args=(stop,), daemon=True)
                   for t in (tracker.watch, tracker.reap, canaries.run)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 90  # the operator leads and schedules: the first canary runs
        while not canaries.latencies and time.monotonic() < deadline:
            time.sleep(0.5)
        print(f"first canary Running after {canaries.latencies[0][1]:.1f}s" if canaries.latencies else
              "no canary Running within 90s of the start", flush=True)

        refused: list[tuple[Case, int, str]] = []
        other: list[tuple[Case, str]] = []
        apply_started = time.monotonic()
        for i, case in enumerate(cases):
            wait = apply_started + i / args.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
                    "metadata": {"name": case.name, "labels": {"fuzz.superpod.dev/seed": str(args.seed)}},
                    "spec": case.spec}
            with tracker.lock:
                tracker.jobs[case.name] = Job(case, time.monotonic())
            try:
                custom.create_namespaced_custom_object(GROUP, VERSION, FUZZ_NS, PLURAL, body,
                                                       field_validation="Strict" if case.strict else None)
            except ApiException as e:
                with tracker.lock:
                    del tracker.jobs[case.name]
                if e.status in (400, 422):
                    refused.append((case, e.status, api_message(e)))
                else:
                    other.append((case, f"HTTP {e.status}: {api_message(e)}"))
            if (i + 1) % 100 == 0:
                with tracker.lock:
                    live = sum(1 for j in tracker.jobs.values() if not j.deleted)
                print(f"  applied {i + 1}/{len(cases)} ({time.monotonic() - apply_started:.0f}s): "
                      f"{len(refused)} refused, {len(tracker.jobs)} accepted, {live} live; "
                      f"canaries {len(canaries.latencies)} Running, {len(canaries.pending)} pending", flush=True)
        last_apply = time.monotonic()
        apply_time = last_apply - apply_started
        while time.monotonic() < last_apply + SETTLE:
            with tracker.lock:
                waiting = sum(1 for j in tracker.jobs.values() if j.ok_at is None)
            if not waiting and time.monotonic() > last_apply + 30:  # canaries keep going at least 30s more
                break
            time.sleep(1)
        settle_time = time.monotonic() - last_apply
        try:  # a last read of the jobs not yet deleted, in case the watch lags
            for obj in custom.list_namespaced_custom_object(GROUP, VERSION, FUZZ_NS, PLURAL)["items"]:
                tracker.observe(obj)
        except ApiException as e:
            tracker.errors.append(f"final list: HTTP {e.status}")
        stop.set()
        for t in threads:
            t.join(timeout=15)
        canaries.finish()
        op_pid = local.pid("operator")
        bad_lines, shown, warnings = operator_log(local.logs / "operator.log")
        return report(args, cases, refused, other, tracker, canaries, (bad_lines, shown, warnings), op_pid,
                      apply_time, settle_time, started)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        local.wipe()


def report(args, cases: list[Case], refused, other, tracker: Tracker, canaries: Canaries, log: tuple,
           op_pid: int | None, apply_time: float, settle_time: float, started: float) -> int:
    bad_lines, shown, warnings = log
    jobs = list(tracker.jobs.values())
    unnamed = [(c, s, m) for c, s, m in refused if not names_field(m)]
    no_phase = [j for j in jobs if j.ok_at is None]
    phases = Counter(j.phase or "<none>" for j in jobs)
    reasons = Counter(j.reason or "<none>" for j in jobs)
    internal = [j for j in jobs if j.reason == "InternalError"]
    lat = [t for _, t in canaries.latencies]
    failures = len(unnamed) + len(no_phase) + len(other) + len(canaries.stalls) + len(bad_lines) + (op_pid is None)
    if not canaries.latencies:
        failures += 1
    origins = Counter(c.origin.split(":")[0] for c in cases)
    print("\n==== fuzz_specs summary ====")
    print(f"machine: {machine()}")
    print(f"generated: {len(cases)} specs (seed {args.seed}): {origins['schema']} from the CRD schema, "
          f"{origins['mutation']} mutations of {len(valid_bases())} valid specs; field validation Strict for "
          f"{sum(c.strict for c in cases)}, server default (Warn) for {sum(not c.strict for c in cases)}")
    print(f"applied in {apply_time:.0f}s (at most {args.rate:g}/s); settling took {settle_time:.0f}s")
    print(f"refused at apply: {len(refused)} (HTTP 422: {sum(s == 422 for _, s, _ in refused)}, HTTP 400: "
          f"{sum(s == 400 for _, s, _ in refused)}); naming the field: {len(refused) - len(unnamed)}, "
          f"not naming it: {len(unnamed)}")
    print(f"accepted: {len(jobs)}; by last phase seen: "
          + ", ".join(f"{p} {phases.get(p, 0)}" for p in ("Queued", "Starting", "Running", "Succeeded", "Failed",
                                                           "Invalid", "<none>")))
    print("  by reason: " + ", ".join(f"{r} {n}" for r, n in reasons.most_common()))
    if other:
        print(f"other API errors at apply: {len(other)}")
    print("\nrefusal messages (5 most frequent kinds of "
          f"{len(kinds([m for _, _, m in refused], 10**6))}):")
    for line in kinds([m for _, _, m in refused], 5):
        print(f"  {line}")
    for phase in ("Invalid", "Queued", "Failed"):
        msgs = [j.message or "" for j in jobs if j.phase == phase]
        n = 5 if phase == "Invalid" else 3
        print(f"\n{phase} messages ({n} most frequent kinds of {len(kinds(msgs, 10**6))}):")
        for line in kinds(msgs, n) or ["(none)"]:
            print(f"  {line}")
    print("\ncanaries: "
          f"{canaries.created} created, {len(lat)} Running; time to Running median "
          f"{statistics.median(lat) if lat else float('nan'):.1f}s, max {max(lat) if lat else float('nan'):.1f}s"
          + (f" (created at +{max(canaries.latencies, key=lambda x: x[1])[0]:.0f}s)" if lat else "")
          + f"; over {CANARY_LIMIT:.0f}s or failed: {len(canaries.stalls)}")
    for s in canaries.stalls[:10]:
        print(f"  {s}")
    for e in (canaries.errors + tracker.errors)[:10]:
        print(f"  (script) {e}")
    print(f"operator: {'alive' if op_pid else 'NOT running'} at the end; log lines with Traceback/ERROR/CRITICAL/"
          f"unhandled: {len(bad_lines)}")
    for line in shown[:60]:
        print(f"  {line}")
    print(f"  WARNING lines (allowed): {sum(warnings.values())}" + "".join(
        f"\n    [{n}x] {w}" for w, n in warnings.most_common(4)))
    print("\ncriterion failures:")
    for c, s, m in unnamed[:20]:
        print(f"  refused without naming a field: {c.name} ({c.origin}) HTTP {s}: {m[:300]}\n    spec: {short(c.spec)}")
    for j in no_phase[:20]:
        print(f"  no phase (status {j.phase!r}, message {j.message!r}): {j.case.name} ({j.case.origin})\n"
              f"    spec: {short(j.case.spec)}")
    for c, m in other[:20]:
        print(f"  API error at apply: {c.name} ({c.origin}): {m[:300]}\n    spec: {short(c.spec)}")
    if internal:
        print(f"  (note) {len(internal)} jobs with reason InternalError, e.g. {internal[0].case.name}: "
              f"{internal[0].message}\n    spec: {short(internal[0].case.spec)}")
    if not failures:
        print("  none")
    print(f"\ntotal time: {time.monotonic() - started:.0f}s")
    print(f"RESULT: {'PASS' if not failures else f'FAIL ({failures} failures)'}")
    if args.out:
        out = {"refused": [{"name": c.name, "origin": c.origin, "status": s, "message": m, "spec": c.spec}
                           for c, s, m in refused],
               "accepted": [{"name": j.case.name, "origin": j.case.origin, "phase": j.phase, "reason": j.reason,
                             "message": j.message, "spec": j.case.spec} for j in jobs],
               "other": [{"name": c.name, "message": m, "spec": c.spec} for c, m in other],
               "canaries": canaries.latencies, "stalls": canaries.stalls, "operator_errors": bad_lines}
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
