"""`superpod run`: the operator. kopf watches Nodes, Pods, TrainingJobs and ClusterTopologies into ClusterState;
one loop, on the replica that holds the Lease, runs a scheduling cycle whenever something changed (and every
second, for timers)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import uuid

import kopf
from kubernetes import client

from superpod.controller.metrics import Metrics
from superpod.controller.mig import MigFlow
from superpod.controller.scheduler import Scheduler
from superpod.controller.state import ClusterState
from superpod.k8s.client import load
from superpod.k8s.lease import LeaderLease
from superpod.k8s.manifests import GROUP, VERSION
from superpod.k8s.writer import Writer

log = logging.getLogger("superpod")
KINDS = (("", "v1", "nodes"), ("", "v1", "pods"), (GROUP, VERSION, "trainingjobs"),
         (GROUP, VERSION, "clustertopologies"))


class Operator:
    def __init__(self, api: client.ApiClient, namespace: str, topology: str, metrics: Metrics,
                 mig_configmap: str = "superpod-mig-parted-config", mig_timeout: float = 300,
                 scheduler_name: str = "superpod-scheduler", identity: str | None = None,
                 lease_seconds: int = 15) -> None:
        self.api = api
        self.state = ClusterState(topology)
        writer = Writer(api)
        mig = MigFlow(self.state, writer, namespace, mig_configmap, mig_timeout, metrics)
        self.scheduler = Scheduler(self.state, writer, metrics, mig, scheduler_name)
        self.lease = LeaderLease(api, namespace, "superpod-scheduler",
                                 identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}", lease_seconds)
        self.wake = asyncio.Event()
        self.registry = kopf.OperatorRegistry()
        self._handlers = {"nodes": self.state.on_node, "pods": self.state.on_pod,
                          "trainingjobs": self.state.on_job, "clustertopologies": self.state.on_topology}
        kopf.on.login(registry=self.registry)(kopf.login_via_client)
        kopf.on.startup(registry=self.registry)(_settings)
        for group, version, plural in KINDS:
            kopf.on.event(group, version, plural, registry=self.registry)(self._event(plural))

    def _event(self, plural: str):
        apply = self._handlers[plural]

        def handler(event, **_):
            apply(event.get("type") or "ADDED", event["object"])
            self.wake.set()
        handler.__name__ = f"watch_{plural}"
        return handler

    def initial_list(self) -> None:
        """Fill the state before the first cycle, so no decision is made on a partial view of the cluster."""
        core, custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)
        for n in core.list_node(_preload_content=False).json()["items"]:
            self.state.on_node("ADDED", n)
        for p in core.list_pod_for_all_namespaces(_preload_content=False).json()["items"]:
            self.state.on_pod("ADDED", p)
        for plural, apply in (("trainingjobs", self.state.on_job), ("clustertopologies", self.state.on_topology)):
            for obj in custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]:
                apply("ADDED", obj)

    async def schedule_forever(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        next_lease = 0.0
        while not stop.is_set():
            if loop.time() >= next_lease:
                await asyncio.to_thread(self.lease.step)
                next_lease = loop.time() + self.lease.duration / 3
            if self.lease.leading:
                self.wake.clear()
                try:
                    await self.scheduler.cycle()
                except Exception:  # one bad cycle must not stop scheduling; the next cycle starts from state
                    log.exception("scheduling cycle failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=1.0)
        await asyncio.to_thread(self.lease.release)

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.to_thread(self.initial_list)
        sched = asyncio.create_task(self.schedule_forever(stop))
        try:
            await kopf.operator(registry=self.registry, clusterwide=True, standalone=True, stop_flag=stop)
        finally:
            stop.set()
            await sched


def _settings(settings: kopf.OperatorSettings, **_) -> None:
    settings.posting.enabled = False  # the scheduler writes its own Events on TrainingJobs
    settings.scanning.disabled = True  # the four watched kinds are fixed: no need to list CRDs or namespaces
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60


def register(sub) -> None:
    p = sub.add_parser("run", help="run the operator (scheduler) against the cluster KUBECONFIG names")
    p.add_argument("--kubeconfig", help="default: $KUBECONFIG, else in-cluster")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "superpod-system"),
                   help="namespace of the leader-election Lease")
    p.add_argument("--topology", default="default", help="name of the ClusterTopology to use")
    p.add_argument("--metrics-port", type=int, default=8080, help="0 disables /metrics")
    p.add_argument("--mig-configmap", default="superpod-mig-parted-config",
                   help="ConfigMap (in --namespace) the mig-parted config is written to, key config.yaml")
    p.add_argument("--mig-timeout", type=float, default=300,
                   help="seconds a MIG reconfiguration may stay pending before the node is marked failed")
    p.add_argument("--scheduler-name", default="superpod-scheduler",
                   help="spec.schedulerName of the pods it creates (they are bound already; no other scheduler acts)")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run)


def run(args) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # not a line per watch event
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # kopf logs in from the same kubeconfig
    api = load(args.kubeconfig)
    _ensure_namespace(api, args.namespace)
    metrics = Metrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
    op = Operator(api, args.namespace, args.topology, metrics, args.mig_configmap, args.mig_timeout,
                  args.scheduler_name)
    asyncio.run(_main(op))
    return 0


async def _main(op: Operator) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await op.run(stop)


def _ensure_namespace(api: client.ApiClient, name: str) -> None:
    """Create the Lease's namespace when running outside a cluster; in-cluster it exists (and the chart's
    ServiceAccount may not read namespaces: then just go on)."""
    core = client.CoreV1Api(api)
    try:
        core.read_namespace(name)
    except client.ApiException as e:
        if e.status == 403:
            return
        if e.status != 404:
            raise
        core.create_namespace({"metadata": {"name": name}})
