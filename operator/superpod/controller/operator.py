"""`superpod run`: the operator. Its tasks, all on one event loop:

- kopf watches Services, ClusterTopologies, GPUQueues, GPUUsages (and PodGroups where that API is served); its
  handlers are coroutines that apply each event to the cache (ClusterState) on the loop and wake the scheduler;
- the kinds with most events (Nodes, Pods, TrainingJobs: `LEAN`) are watched by a plain list-watch each, on a thread
  (KubeAPI.watch), from the version the first list ended at: each event's JSON is parsed once and applied on the loop
  the same way. kopf diffs and deep-copies every event for handlers this operator does not use: at 1,000 nodes it
  was half of the operator's CPU, on a machine the API server shares;
- the Lease task renews leadership every retry period (k8s/lease.py), and relists the cluster whenever this replica
  becomes leader, so the first decision of a term sees everything the last leader wrote;
- the scheduling loop runs a cycle (controller/controller.py) whenever something changed and every second, while
  this replica leads; a failed cycle is counted and retried with backoff, never ends the loop;
- the resync task relists everything periodically and corrects the cache (missed events, phantoms), at most
  RELIST_SHARE of the time;
- the health server answers /metrics, /healthz and /readyz.
The cache is filled by a full list before the first cycle, so no decision is made on a partial view."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable

import kopf
import urllib3
from kubernetes import client

from superpod.api.convert import duration
from superpod.api.manifests import SCHEDULER_NAME
from superpod.controller.controller import Controller
from superpod.controller.health import Health
from superpod.controller.judge import Settings
from superpod.controller.metrics import Metrics
from superpod.controller.mig import MigFlow
from superpod.controller.state import ClusterState, Relist
from superpod.core.cycle import ESTIMATE, LIMIT, ReservationRule
from superpod.core.estimates import ARRIVAL, SERVICE, Ordering
from superpod.k8s.api import (
    DRA,
    NODES,
    PODGROUPS,
    PODS,
    RESOURCECLAIMS,
    RESOURCESLICES,
    TRAININGJOBS,
    WATCHED,
    ApiError,
    ClusterAPI,
    Kind,
)
from superpod.k8s.client import load
from superpod.k8s.kube import AGENT, KubeAPI
from superpod.k8s.lease import LEASE_SECONDS, TERM, LeaderLease, lease_timings

log = logging.getLogger("superpod")
LEAN = (NODES, PODS, TRAININGJOBS, RESOURCESLICES, RESOURCECLAIMS)  # watched without kopf (see above)
LEASE_NAME = SCHEDULER_NAME
MIG_CONFIGMAP = "superpod-mig-parted-config"
MIG_TIMEOUT = 300.0
# A periodic relist takes at most this share of the time: the next waits a hundred times as long as the last took
# (at 10,000 nodes and 50,000 pods a full list took a minute; every five minutes it was a fifth of the time)
RELIST_SHARE = 0.01


class Operator:
    """`api` serves the cache and the writes (its writes guarded by the Lease); `lease_api`, a client of its own,
    serves only the Lease, renewed from its own thread so that neither a long cycle nor a queue of writes delays it."""

    def __init__(self, api: ClusterAPI, lease_api: ClusterAPI, namespace: str, metrics: Metrics,
                 topology: str = "default", settings: Settings | None = None,
                 mig_configmap: str = MIG_CONFIGMAP, mig_timeout: float = MIG_TIMEOUT, identity: str | None = None,
                 lease_seconds: float = LEASE_SECONDS, resync_seconds: float = 300, stall_seconds: float = 120,
                 slow_cycle: float = 0, kinds: tuple[Kind, ...] = WATCHED, lean: tuple[Kind, ...] = ()) -> None:
        self.api, self.metrics, self.kinds, self.lean = api, metrics, kinds, lean
        self.listed: dict[Kind, str] = {}  # kind -> the resourceVersion its first list ended at
        self._relists: dict[Kind, Relist] = {}  # kind -> the Relist a lean watch is sending pages of
        self.state = ClusterState(topology, (settings or Settings()).scheduler_name)
        identity = identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.lease = LeaderLease(lease_api, namespace, LEASE_NAME, identity, *lease_timings(lease_seconds))
        api.guard = self.lease.may_write  # every write is asked, right before it is sent
        mig = MigFlow(self.state, namespace, mig_configmap, mig_timeout, metrics)
        self.controller = Controller(self.state, api, self.lease.is_leading, settings, mig, metrics)
        self.health = Health(metrics.registry, stall_seconds)
        self.health.leading = self.lease.is_leading
        self.resync_seconds, self.slow_cycle = resync_seconds, slow_cycle
        self.synced_for = -1  # the Lease acquisition the cache was last relisted for
        self.lease_tried = threading.Event()  # the Lease thread's first try is over (taken or not)
        self.wake = asyncio.Event()
        self.registry = kopf.OperatorRegistry()
        kopf.on.login(registry=self.registry)(kopf.login_via_client)
        kopf.on.startup(registry=self.registry)(_settings)
        for kind in kinds:
            if kind not in lean:
                kopf.on.event(kind.group, kind.version, kind.plural, registry=self.registry)(self._handler(kind))

    def _handler(self, kind):
        async def handler(event, **_):
            self._event(kind, event.get("type") or "MODIFIED", event["object"])
        handler.__name__ = f"watch_{kind.plural}"
        return handler

    def _event(self, kind: Kind, event: str, obj: dict) -> None:
        if self.state.apply(kind, event, obj, time.time()):
            self.wake.set()

    def _relisted(self, kind: Kind, items: list[dict], version: str, last: bool) -> None:
        """A page of the list a watch took after it fell behind (410 Gone)."""
        relist = self._relists.get(kind)
        if relist is None or relist.version != version:
            relist = self._relists[kind] = self.state.relist(kind, version)
        relist.page(items, time.time())
        if last and self._relists.pop(kind).end(time.time()):
            log.info("a relist after the watch fell behind corrected %s", relist.said())
            self.wake.set()

    async def _list(self, kind: Kind) -> Relist:
        """A full list of the kind into the cache, page by page (its `changed`, `version`, `present`, `said()`)."""
        relist = None
        async for items, version in self.api.pages(kind):
            relist = relist or self.state.relist(kind, version)
            relist.page(items, time.time())
        relist.end(time.time())
        return relist

    def _watch_threads(self, loop: asyncio.AbstractEventLoop, stop: threading.Event) -> list[threading.Thread]:
        """A thread per lean kind, list-watching from where the first list ended, applying on the loop."""
        threads = []
        for kind in self.lean:
            def deliver(event: str, obj: dict, kind: Kind = kind) -> None:
                with contextlib.suppress(RuntimeError):  # the loop closed: the operator is stopping
                    loop.call_soon_threadsafe(self._event, kind, event, obj)

            def relist(items: list[dict], version: str, last: bool, kind: Kind = kind) -> None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._relisted, kind, items, version, last)
            threads.append(threading.Thread(target=self.api.watch, name=f"watch-{kind.plural}", daemon=True,
                                            args=(kind, self.listed.get(kind, ""), deliver, relist, stop)))
        return threads

    # ---- tasks ------------------------------------------------------------------------------------------------------
    async def sync(self) -> None:
        """List every watched kind into the cache (retried until it works)."""
        failures = 0
        while True:
            try:
                for kind in self.kinds:
                    self.listed.setdefault(kind, (await self._list(kind)).version)
                settle_heap()
                return
            except ApiError as e:
                failures += 1
                log.warning("listing the cluster failed (%s); retrying", e)
                await asyncio.sleep(min(30.0, 2.0 ** failures))

    def lease_thread(self, stop: threading.Event, wake: Callable[[], None]) -> None:
        """Renew (or try to take) the Lease every retry period, on a loop of its own; release it at the end."""

        async def renew() -> None:
            while not stop.is_set():
                before = self.lease.acquisitions
                try:
                    await self.lease.step()
                except Exception as e:  # noqa: BLE001 - the Lease must outlive any error: count, retry
                    self.metrics.cycle_errors.labels("lease").inc()
                    log.warning("lease renewal failed: %s", e)
                self.metrics.leading.set(1 if self.lease.is_leading() else 0)
                self.lease_tried.set()
                if self.lease.acquisitions != before:
                    wake()
                await asyncio.to_thread(stop.wait, self.lease.retry_period)
            try:
                await self.lease.release()
            finally:
                await self.lease.api.close()

        asyncio.run(renew())

    async def schedule_loop(self, stop: asyncio.Event) -> None:
        failures = 0
        while not stop.is_set():
            self.wake.clear()  # a standby too: else one event leaves it set and this loop spins
            if self.lease.is_leading():
                if self.synced_for != self.lease.acquisitions:
                    # A new term: a fresh view before its first decision, with whatever the last leader wrote.
                    acquisition = self.lease.acquisitions
                    self.state.forget_unsent()  # a status of the last term that was never sent is not in force
                    await self.sync()
                    self.synced_for = acquisition
                    self.health.cycle_done()  # the stall clock starts with leadership
                self.controller.writer(self.lease.fence)
                TERM.set(self.lease.acquisitions)
                started = time.monotonic()
                try:
                    await self.controller.cycle(time.time(), pause=self.slow_cycle)
                    failures = 0
                    self.health.cycle_done()
                except Exception:  # noqa: BLE001 - one bad cycle must not stop scheduling
                    failures += 1
                    self.metrics.cycle_errors.labels("cycle").inc()
                    log.exception("scheduling cycle failed (%d in a row); retrying", failures)
                    await asyncio.sleep(min(30.0, 0.5 * 2 ** failures))
                self.metrics.cycle_seconds.observe(time.monotonic() - started)
            else:
                self.state.unfollow()  # a standby: no cycle takes the cache's changes, so none is kept
            gc.freeze()  # what the cycle kept is long-lived: out of the collections until the next full list
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=1.0)

    async def resync_loop(self, stop: asyncio.Event) -> None:
        """Every --resync seconds: a full relist if the last one ended long enough ago (RELIST_SHARE), and a full
        collection of the heap either way."""
        due = 0.0  # monotonic time from which the next relist may start
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.resync_seconds)
            if stop.is_set():
                return
            if time.monotonic() >= due:
                started = time.monotonic()
                listed = await self._resync()
                took = time.monotonic() - started
                due = started + took / RELIST_SHARE
                log.info("resync: %d objects relisted in %.1fs; the next relist in %.0fs or later", listed, took,
                         max(self.resync_seconds, due - started))
            settle_heap()  # what the cycles froze is collected every period

    async def _resync(self) -> int:
        """Every kind listed again into the cache: how many objects (up to a failure, retried at the next period)."""
        listed = 0
        try:
            for kind in self.kinds:
                relist = await self._list(kind)
                listed += len(relist.present)
                if relist.changed:
                    log.info("resync corrected %s", relist.said())
                    self.wake.set()
        except Exception as e:  # noqa: BLE001 - retried at the next period
            self.metrics.cycle_errors.labels("resync").inc()
            log.warning("resync failed: %s", e)
        return listed

    async def start(self, stop_lease: threading.Event) -> threading.Thread:
        """The Lease thread first: a free Lease is taken before the first list, which then serves its term (a second
        full list at the first acquisition doubled the time to the first cycle). Returns the Lease thread."""
        loop = asyncio.get_running_loop()
        lease = threading.Thread(target=self.lease_thread, name="lease", daemon=True,
                                 args=(stop_lease, lambda: loop.call_soon_threadsafe(self.wake.set)))
        lease.start()
        try:
            await asyncio.to_thread(self.lease_tried.wait, self.lease.retry_period)
            term = self.lease.acquisitions if self.lease.is_leading() else None
            await self.sync()
        except BaseException:  # never held by a replica that did not start
            stop_lease.set()
            await asyncio.to_thread(lease.join, 30)
            raise
        if term is not None and self.lease.is_leading() and self.lease.acquisitions == term:
            self.synced_for = term  # listed after the term began: what the last leader wrote is in it
            self.health.cycle_done()
        self.health.synced = True
        return lease

    async def run(self, stop: asyncio.Event, port: int = 0) -> None:
        server = self.health.serve(port) if port else None
        loop = asyncio.get_running_loop()
        stop_lease = threading.Event()
        lease = await self.start(stop_lease)
        stop_watches = threading.Event()
        for watch in self._watch_threads(loop, stop_watches):
            watch.start()
        tasks = [asyncio.create_task(self.schedule_loop(stop), name="schedule"),
                 asyncio.create_task(self.resync_loop(stop), name="resync")]
        self.health.tasks = [*tasks, lease]
        try:
            await kopf.operator(registry=self.registry, clusterwide=True, standalone=True, stop_flag=stop)
        finally:
            stop.set()
            stop_watches.set()  # the threads end with their current request (daemons: never waited for)
            await asyncio.gather(*tasks, return_exceptions=True)
            stop_lease.set()  # released only now: no write of this replica is in flight any more
            await asyncio.to_thread(lease.join, 30)
            await self.api.close()
            if server:
                server.shutdown()


def settle_heap() -> None:
    """After a full list: one full collection, then what survives is kept out of the collections (gc.freeze; each
    cycle freezes what it kept too). The cache is a million acyclic objects or more that live for minutes (a node's or
    pod's JSON each, freed by reference counting when replaced) that the collector must not scan again and again.
    What a freeze keeps that later becomes cyclic garbage waits for this collection (every --resync)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _settings(settings: kopf.OperatorSettings, **_) -> None:
    settings.posting.enabled = False  # the applier writes its own Events
    settings.scanning.disabled = True  # the watched kinds are fixed: no need to list CRDs or namespaces
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60


def condition(text: str) -> tuple[str, str]:
    """TYPE=STATUS of --failure-condition (a bare TYPE: True)."""
    kind, _, status = text.partition("=")
    if not kind.strip():
        raise argparse.ArgumentTypeError(f"expected TYPE=STATUS, e.g. GpuUnhealthy=True, not {text!r}")
    return kind.strip(), status.strip() or "True"


def spares(text: str) -> tuple[str, int]:
    """LEVEL=N of --spares."""
    level, _, count = text.partition("=")
    if not level.strip() or not count.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected LEVEL=N, e.g. leaf=1, not {text!r}")
    return level.strip(), int(count)


def register(sub) -> None:
    p = sub.add_parser("run", help="run the operator (scheduler) against the cluster KUBECONFIG names")
    p.add_argument("--kubeconfig", help="default: $KUBECONFIG, else in-cluster")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "superpod-system"),
                   help="namespace of the leader-election Lease and the MIG ConfigMap")
    p.add_argument("--topology", default="default", help="name of the ClusterTopology to use")
    p.add_argument("--metrics-port", type=int, default=8080, help="/metrics, /healthz, /readyz; 0 disables")
    p.add_argument("--mig-configmap", default=MIG_CONFIGMAP,
                   help="ConfigMap (in --namespace) the mig-parted config is written to, key config.yaml")
    p.add_argument("--mig-timeout", type=float, default=MIG_TIMEOUT,
                   help="seconds a MIG reconfiguration may stay pending before it is reverted and the node marked")
    p.add_argument("--scheduler-name", default=SCHEDULER_NAME,
                   help="spec.schedulerName of the pods it creates (bound already), and of the pods other "
                        "controllers create that it schedules as gangs")
    p.add_argument("--not-ready-grace", type=float, default=Settings.not_ready_grace,
                   help="seconds a placed node may be NotReady before its gang restarts elsewhere")
    p.add_argument("--replace-deadline", type=float, default=Settings.replace_deadline,
                   help="seconds the replicas of a lost node wait for a node to replace it (spec.nodeFailure "
                        "Replace) before their gang restarts")
    p.add_argument("--failure-condition", dest="failure_conditions", action="append", type=condition, default=[],
                   metavar="TYPE=STATUS",
                   help="a node condition that means the node failed, e.g. GpuUnhealthy=True (Node Problem Detector, "
                        "DCGM): its gangs' replicas are replaced or the gangs restart, and no gang is placed there; "
                        "repeatable")
    p.add_argument("--spares", type=spares, metavar="LEVEL=N",
                   help="keep N wholly free nodes in each domain of this ClusterTopology level for replacing the "
                        "lost nodes of gangs (spec.nodeFailure Replace), e.g. leaf=1; no other job is placed there "
                        "but a short one (--spare-runtime)")
    p.add_argument("--spare-runtime", type=float, default=None,
                   help="a job whose runtime limit (maxRuntimeSeconds, or its queue's) is at most this may run on "
                        "spare nodes when no other node takes it, in seconds (default: --replace-deadline, so a spare "
                        "lent out is free before a replacement waiting for it restarts its gang)")
    p.add_argument("--usage-half-life", type=duration, default=Settings.usage_half_life,
                   help="how fast a GPUQueue's past usage is forgotten in the order of the surplus, e.g. 168h "
                        "(it halves in this time)")
    p.add_argument("--status-delay", type=float, default=Settings.status_delay,
                   help="seconds a placed gang's status may wait after its pods are written: a gang whose pods all "
                        "run by then is written once, Running (under load most are); 0 writes Starting at the next "
                        "cycle")
    p.add_argument("--order", choices=(ARRIVAL, SERVICE), default=Settings.ordering.by,
                   help="jobs of one priority: by arrival, or by service (short, small ones by limit first, aged)")
    p.add_argument("--service-weight", type=float, default=Settings.ordering.weight,
                   help="--order service: seconds a job's turn moves back per square-root GPU-hour (of its limit)")
    p.add_argument("--reservations", type=int, default=Settings.reserving.per_group,
                   help="blocked jobs that hold a reservation at once, per queue")
    p.add_argument("--reserve-after", type=float, default=Settings.reserving.after,
                   help="seconds a blocked job waits before it reserves (0: at once), unless it is big enough "
                   "(--reserve-from-gpus)")
    p.add_argument("--reserve-from-gpus", type=float, default=Settings.reserving.from_units,
                   help="a blocked job of this many GPUs or more reserves at once")
    p.add_argument("--backfill-by", choices=(LIMIT, ESTIMATE), default=Settings.reserving.backfill_by,
                   help="a job runs inside a reservation when its limit (never delays the holder) or its estimate "
                   "ends before the holder's predicted start")
    p.add_argument("--preemption", action=argparse.BooleanOptionalAction, default=Settings.preemption,
                   help="a blocked job may evict lower-priority gangs, and a queue below its guarantee what others "
                        "borrow")
    p.add_argument("--lease-duration", type=float, default=LEASE_SECONDS, help="seconds; renew deadline and retry "
                   "period are 2/3 and 2/15 of it")
    p.add_argument("--identity", default=os.environ.get("POD_NAME"),
                   help="this replica's name in the Lease and the API server's audit log (default: $POD_NAME, else "
                        "the host name and a random suffix)")
    p.add_argument("--api-workers", type=int, default=32,
                   help="API calls in flight at once (a gang's pods are written this many at a time)")
    p.add_argument("--api-qps", type=float, default=500,
                   help="client-side limit of API calls per second (0: none); a 429 from the server's API Priority "
                        "and Fairness is waited out as its Retry-After says")
    p.add_argument("--api-burst", type=int, default=1000, help="API calls allowed at once above --api-qps")
    p.add_argument("--resync", type=float, default=300, help="seconds between full relists of "
                   "the cluster, or more: a relist waits a hundred times as long as the last took")
    p.add_argument("--stall-timeout", type=float, default=120,
                   help="/healthz fails when the leader has not finished a cycle for this long")
    p.add_argument("--debug-slow-cycle", type=float, default=0,
                   help="testing only: sleep this long between deciding and writing, in every cycle")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run)


def run(args) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # not a line per watch event
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = args.kubeconfig  # kopf logs in from the same kubeconfig
    api_client = load(args.kubeconfig, pool_size=args.api_workers + 4)  # and the Lease client's
    _ensure_namespace(api_client, args.namespace)
    identity = args.identity or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
    api_client.user_agent = f"{AGENT}{identity}"  # the API server's audit log names each replica
    settings = Settings(args.scheduler_name, args.not_ready_grace, usage_half_life=args.usage_half_life,
                        preemption=args.preemption, status_delay=args.status_delay,
                        replace_deadline=args.replace_deadline, failure_conditions=tuple(args.failure_conditions),
                        spares=args.spares if args.spares and args.spares[1] > 0 else None,
                        spare_runtime=args.spare_runtime,
                        reserving=ReservationRule(args.reservations, args.reserve_after, args.reserve_from_gpus,
                                                  args.backfill_by),
                        ordering=Ordering(args.order, args.service_weight))
    metrics = Metrics()
    api = KubeAPI(api_client, workers=args.api_workers, qps=args.api_qps, burst=args.api_burst,
                  throttled=metrics.api_throttled.inc)
    kinds = WATCHED + ((PODGROUPS,) if api.serves(PODGROUPS) else ())  # installed later: seen after a restart
    kinds += DRA if api.serves(RESOURCESLICES) else ()
    op = Operator(api, KubeAPI(api_client, workers=2), args.namespace, metrics, args.topology, settings,
                  args.mig_configmap, args.mig_timeout, identity, args.lease_duration, args.resync,
                  args.stall_timeout, args.debug_slow_cycle, kinds, LEAN)
    asyncio.run(_main(op, args.metrics_port))
    return 0


async def _main(op: Operator, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await op.run(stop, port)


def _ensure_namespace(api: client.ApiClient, name: str) -> None:
    """Create the Lease's namespace when running outside a cluster; in-cluster it exists (and the chart's
    ServiceAccount may not read namespaces: then just go on). Waits for an API server that is not answering yet;
    another replica creating it at the same moment is fine."""
    core = client.CoreV1Api(api)
    for attempt in itertools.count(1):
        try:
            core.read_namespace(name)
            return
        except client.ApiException as e:
            if e.status == 403:
                return
            if e.status == 404:
                try:
                    core.create_namespace({"metadata": {"name": name}})
                except client.ApiException as c:
                    if c.status != 409:  # 409: another replica created it meanwhile
                        raise
                return
            error = e
        except urllib3.exceptions.HTTPError as e:
            error = e
        log.warning("the API server is not answering (%s); retrying", error)
        time.sleep(min(30.0, 2.0 ** attempt))
