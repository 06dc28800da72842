"""Two tenants under hypothesis: the controller state machine (tests/unit/controller/test_controller_machine.py: two
replicas, crashes, the Lease lost mid-write, write faults, lost and late events, node and pod failures) with GPUQueues,
hostile: at any moment either edits any field it may write of its jobs or pods (queue, class, priority, minimum
runtime, labels) — through the API as an admin would, so without the CRD's own refusals — and forges nominations.
Checked after every step: no node over its capacity, no queue above its limit, every GPU-second billed once to
its namespace's queue, a queue inside its guarantee served within two clear cycles (tests/unit/machine.py). CI runs
a few examples (SUPERPOD_MACHINE_EXAMPLES); bench/state_machine.py --tenants runs thousands."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from superpod.api.podgang import GANG_LABEL, GANG_SIZE, NOMINATED, QUEUE_LABEL
from superpod.api.resources import pod_requests, quantity
from superpod.api.times import rfc3339
from superpod.core.accounting import gpu_units
from superpod.hardware.kubelet import RUN_FOR
from superpod.k8s.api import GPUQUEUES, NODES, PODS, TRAININGJOBS
from tests.unit.controller.test_controller_machine import EXAMPLES, SEEN, STEPS, ControllerMachine
from tests.unit.machine import Violation
from tests.unit.memory_cluster import run, training_job

TENANTS = {"a": 16, "b": 24}  # queue -> its limit (guaranteed 16 each, on 48 GPUs)
FIELDS = st.sampled_from([("queue", "nowhere"), ("queue", "b"), ("queue", "a"), ("serviceClass", "reserved"),
                          ("serviceClass", "spot"), ("priority", 100), ("priority", 0),
                          ("minRuntimeSeconds", 30 * 86_400), ("minRuntimeSeconds", 0)])


def _queue(name: str) -> dict:
    return {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name},
            "spec": {"namespaces": [f"team-{name}"], "resources": [
                {"flavor": "*", "guaranteed": 16, "limit": TENANTS[name]}]}}


def _keeps_off(job, reserving) -> bool:
    """Under queues, reservations are per queue: a job keeps off its own queue's and the preemptors' (pinned); one
    inside its guarantee may use another queue's (core/queues.py, blocking), so those are not checked here."""
    pinned = bool(reserving.preempts) or reserving.reason.startswith("waiting for")
    return pinned or job is None or reserving.job.namespace == job.namespace


class TenantMachine(ControllerMachine):
    """The controller machine's rules (its replicas, faults and hostile environment), with queues and tenants."""

    def __init__(self) -> None:
        super().__init__()
        for name in TENANTS:
            run(self.world.c.admin.create(GPUQUEUES, _queue(name)))
        self.world.keeps_off = _keeps_off
        self.made = 0

    def _pick(self, kind, pick: int, live: bool = False) -> tuple[str, dict] | None:
        items = sorted(self.world.store.objects.get(kind, {}).items())
        if live:
            items = [(k, o) for k, o in items if not o["metadata"].get("deletionTimestamp")]
        return items[pick % len(items)] if items else None

    # ---- tenants --------------------------------------------------------------------------------------------------
    @rule(tenant=st.sampled_from(sorted(TENANTS)), replicas=st.integers(1, 2), gpus=st.sampled_from([4, 8]),
          priority=st.integers(0, 2), runs=st.sampled_from(["10s", "40s", "300s"]))
    def submit_job(self, tenant, replicas, gpus, priority, runs):
        self.made += 1
        body = training_job(f"t{self.made}", replicas, gpus, annotations={RUN_FOR: runs}, priority=priority,
                            startupTimeoutSeconds=60)
        body["metadata"]["namespace"] = f"team-{tenant}"
        self.world.c.submit(body)

    @rule(tenant=st.sampled_from(sorted(TENANTS)), size=st.integers(1, 2), gpus=st.sampled_from([4, 8]),
          priority=st.integers(0, 2), runs=st.sampled_from(["10s", "40s", "300s"]))
    def submit_gang(self, tenant, size, gpus, priority, runs):
        self.made += 1
        for index in range(size):
            limits = {"nvidia.com/gpu": str(gpus)}
            run(self.world.c.admin.create(PODS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"g{self.made}-{index}", "namespace": f"team-{tenant}",
                             "labels": {GANG_LABEL: f"g{self.made}"},
                             "annotations": {GANG_SIZE: str(size), RUN_FOR: runs}},
                "spec": {"schedulerName": "superpod-scheduler", "priority": priority, "containers": [
                    {"name": "main", "image": "trainer", "resources": {"limits": limits, "requests": limits}}]}}))

    @precondition(lambda self: self.world.store.objects.get(TRAININGJOBS))
    @rule(pick=st.integers(0, 100), change=FIELDS)
    def edit_job(self, pick, change):
        """Any field of its job the tenant may write, at any moment (the CRD would refuse some while it runs)."""
        key, job = self._pick(TRAININGJOBS, pick)
        field, value = change
        namespace, name = key.split("/", 1)
        run(self.world.c.admin.patch(TRAININGJOBS, name, {"spec": {field: value}}, namespace))
        SEEN["tenant edits of a job"] += 1
        if (job.get("status") or {}).get("phase") in ("Starting", "Running"):
            SEEN["tenant edits of a placed job"] += 1

    @precondition(lambda self: self.world.store.objects.get(PODS))
    @rule(pick=st.integers(0, 100), queue=st.sampled_from(["nowhere", "a", "b"]))
    def relabel_pod(self, pick, queue):
        key, pod = self._pick(PODS, pick, live=True) or (None, None)
        if key is None:
            return
        namespace, name = key.split("/", 1)
        run(self.world.c.admin.patch(PODS, name, {"metadata": {"labels": {QUEUE_LABEL: queue}}}, namespace))
        if pod["spec"].get("nodeName"):
            SEEN["tenant relabels of a bound pod"] += 1

    @rule(tenant=st.sampled_from(sorted(TENANTS)), victims=st.booleans())
    def forge_nomination(self, tenant, victims):
        """A pod that never fits, naming every node and (maybe) every job as its victims, in its annotations and in
        the status it is created with."""
        self.made += 1
        named = sorted(self.world.store.objects.get(TRAININGJOBS, {})) if victims else []
        text = json.dumps({"nodes": sorted(self.world.store.objects[NODES]), "victims": named, "attempts": {},
                           "time": rfc3339(self.world.c.now)})
        run(self.world.c.admin.create(PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"forged{self.made}", "namespace": f"team-{tenant}",
                         "annotations": {"superpod.dev/nomination": text}},
            "spec": {"schedulerName": "superpod-scheduler", "priority": 1000, "containers": [
                {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "16"},
                                                                  "requests": {"nvidia.com/gpu": "16"}}}]},
            "status": {"conditions": [{"type": NOMINATED, "status": "True", "message": text}]}}))

    @invariant()
    def holds(self):
        self.world.check()
        self._limits()

    def _limits(self) -> None:
        """No queue holds more than its limit: the GPUs of the live bound pods of its namespaces."""
        held = dict.fromkeys(TENANTS, 0.0)
        for pod in self.world.store.objects.get(PODS, {}).values():
            meta, status = pod["metadata"], pod.get("status") or {}
            if not pod["spec"].get("nodeName") or meta.get("deletionTimestamp") or status.get("phase") in (
                    "Succeeded", "Failed"):
                continue
            tenant = meta["namespace"].removeprefix("team-")
            requests = pod_requests(pod["spec"], lambda f, q: {r: quantity(v, r) for r, v in q.items()})
            held[tenant] = held.get(tenant, 0.0) + gpu_units(requests.items())
        for queue, limit in TENANTS.items():
            if held[queue] > limit + 1e-9:
                raise Violation(f"queue {queue} holds {held[queue]:g} GPUs, above its limit of {limit}")
        self.world.checks["queue limits checked"] += 1


TestTenantMachine = TenantMachine.TestCase
TestTenantMachine.settings = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                                      suppress_health_check=list(HealthCheck), derandomize=True)
