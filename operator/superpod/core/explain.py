"""Why a job cannot be placed: a code, and one precise, actionable sentence."""

from __future__ import annotations

from collections import Counter

from superpod.core.dra.allocate import Shortfall, describe
from superpod.core.model import Snapshot
from superpod.core.phases import Cause, Reason
from superpod.core.placement import DEVICES, Solver, validate
from superpod.core.request import GPU, MIG_PREFIX, PRODUCT_LABEL, JobRequest

_FILTER_WORDS = {
    "not ready": "cordoned or not ready",
    "cordoned": "cordoned or not ready",
    "tainted": "tainted without a matching toleration",
    "other GPU product": "of another GPU product",
    "nodeSelector mismatch": "outside the nodeSelector",
    "node affinity mismatch": "outside the required node affinity",
}


NOTHING = "no resources"


def demand(snap: Snapshot, job: JobRequest) -> str:
    unit, product = _unit_and_product(snap, job)
    word = unit if job.replicas != 1 else unit[:-1]
    each = _each(job.requests, product)
    text = f"needs {job.replicas} {word}"
    if each != NOTHING or not job.claims:
        text += f" {'with' if unit == 'nodes' else 'of'} {each}"
    if job.claims:
        text += f" claiming {describe(job.claims)}"
    if job.shared:
        text += f", and a claim they share of {describe(job.shared)} (so all on one node)"
    others = Counter(job.others)
    if others:  # the members that differ, each of its own request
        text += " and " + ", ".join(f"{count} {'pod' if count == 1 else 'pods'} of {_each(requests, product)}"
                                    for requests, count in sorted(others.items(), key=lambda x: (-x[1], x[0])))
    if job.required:
        text += f" inside one {job.required}"
    if job.slice_size and job.slice_required:
        text += f", in slices of {job.slice_size} per {job.slice_required}"
    return text


def _unit_and_product(snap: Snapshot, job: JobRequest) -> tuple[str, str | None]:
    """("nodes" when each replica takes a whole eligible node, else "replicas"; the GPU product named): read from the
    eligible nodes' allocatable and labels, so kept with the job's view."""
    if not job.gpus:
        return "replicas", job.gpu_product
    view = snap.view(job)
    key = ("unit-and-product", job.gpus)
    known = view.static.get(key)
    if known is None:
        ok = [n for n, good in zip(snap.nodes, view.eligible, strict=True) if good]
        products = {n.labels.get(PRODUCT_LABEL) for n in ok}
        product = job.gpu_product or (products.pop() if len(products) == 1 else None)
        known = view.static[key] = ("nodes" if {n.allocatable.get(GPU, 0) for n in ok} == {job.gpus} else "replicas",
                                    product)
    return known


def _each(requests: tuple[tuple[str, int], ...], product: str | None) -> str:
    """What one member of these requests needs free, in words."""
    req = dict(requests)
    gpus = req.get(GPU, 0)
    if gpus:
        return f"{gpus} free {f'{product} ' if product else ''}GPU{'s' if gpus > 1 else ''}"
    mig = [r[len(MIG_PREFIX) :] for r in req if r.startswith(MIG_PREFIX)]
    return f"a free MIG {mig[0]} slice" if mig else _fmt_cpu_mem(req)


def _fmt_cpu_mem(req: dict[str, int]) -> str:
    parts = []
    if req.get("cpu"):
        parts.append(f"{req['cpu'] / 1000:g} cpu")
    if req.get("memory"):
        parts.append(f"{req['memory'] / 2**30:g}Gi memory")
    return " and ".join(parts) or NOTHING


def filtered(snap: Snapshot, job: JobRequest) -> str:
    words: Counter = Counter()
    for why, n in snap.view(job).reasons.items():
        words[_FILTER_WORDS.get(why, why)] += n
    return ", ".join(f"{_nodes(n)} {w}" for w, n in sorted(words.items(), key=lambda x: (-x[1], x[0])))


def _full_nodes(sv: Solver) -> str:
    """How many eligible nodes lack room for one replica, and which resource they lack."""
    gpus = sv.job.gpus
    names = {GPU: f"{gpus} free GPUs" if gpus > 1 else "a free GPU", "cpu": "free cpu", "memory": "free memory",
             DEVICES: "the free devices its claims need"}
    out = []
    for (r, too_small), n in sv.shortages().most_common():
        if n and r == DEVICES:
            out.append(f"{_nodes(n)} {'lack' if n > 1 else 'lacks'} "
                       f"{'the devices its claims need, even when idle' if too_small else names[r]}")
        elif n:
            verb = "have too little" if too_small else "lack"
            verb = verb if n > 1 else verb.replace("have", "has").replace("lack", "lacks")
            what = r.removeprefix("nvidia.com/") if too_small and r != GPU else names.get(r, r.removeprefix(
                "nvidia.com/"))
            out.append(f"{_nodes(n)} {verb} {what}")
    return ", ".join(out)


def _claims_refused(sv: Solver) -> str:
    """Why no node can ever allocate the job's claims as written (a DeviceClass missing, a selector failing, a claim
    too large), or "" when some node may."""
    snap, devices = sv.snap, sv.snap.devices
    if devices is None:
        return "no node publishes DRA devices"
    node = next((n.name for i, n in enumerate(snap.nodes) if sv.is_open(i) and devices.has_devices(n.name)), None)
    found = devices.fits(node, sv.job.claims, 1, idle=True, shared=sv.shared) if node is not None else None
    return found.message if isinstance(found, Shortfall) and found.fatal else ""


def _nodes(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def explain(
    snap: Snapshot, job: JobRequest, exclude: frozenset[int] = frozenset(), exclude_nodes: frozenset[int] = frozenset()
) -> Cause:
    """Why `job` cannot be placed now (call after placement failed)."""
    if invalid := validate(snap, job):
        return Cause(Reason.INVALID, invalid)
    return explain_solver(Solver(snap, job, exclude, exclude_nodes=exclude_nodes))


def _spares(snap: Snapshot) -> str:
    """What the spares the job could not use are kept for."""
    if not snap.spares:
        return ""
    short = f" and for jobs whose maxRuntimeSeconds is at most {snap.spare_runtime:.0f}" if snap.spare_runtime else ""
    return f"{_nodes(len(snap.spares))} kept spare for replacing lost nodes{short}"


def explain_solver(sv: Solver) -> Cause:
    """`explain` for a valid job, asking the solver that failed to place it."""
    snap, job = sv.snap, sv.job
    head = demand(snap, job)
    why_filtered = filtered(snap, job)
    spare = _spares(snap)
    tail = [t for t in (_full_nodes(sv), why_filtered, spare) if t]
    if not any(snap.view(job).eligible):
        return Cause(Reason.NO_NODE_QUALIFIES, f"{head}; no node qualifies: {why_filtered}")
    if sv.claiming and (refused := _claims_refused(sv)):
        return Cause(Reason.NO_NODE_QUALIFIES, f"{head}; no node can allocate its claims as written: {refused}")
    level = snap.topology.node_level_name if job.shared else job.required
    nodes = range(len(snap.nodes))
    if sv.required_level == sv.node_level:  # required: one node
        best = max(nodes, key=lambda i: (sv.slots(i), snap.nodes[i].name))
        now = sv.slots(best)
        where = f"the best node has room for {now} ({snap.nodes[best].name})"
        ever = sv.remembered(("largest-idle-node",), lambda: max((sv.idle_slots(i) for i in nodes), default=0))
        ever_domain = 0
    else:
        domains = sv.domains_at(sv.required_level)
        ever_domain, ever = sv.remembered(("largest-idle",), lambda: sv.best_room(domains, idle=True))
        best, now = sv.best_room(domains)
        if level:
            where = f"the best {level} has room for {now} ({snap.domain_label(best)})"
        else:
            where = f"the cluster has room for {now}"
    if ever < job.replicas:
        if level and sv.required_level <= sv.finest_level:
            scope = f"the largest {level} ({snap.domain_label(ever_domain)}) holds"
        else:
            scope = f"the largest {level} holds" if level else "the whole cluster holds"
        return Cause(Reason.TOO_LARGE, "; ".join([head, f"{scope} only {ever} even when idle", *tail]))
    if job.others and now >= job.replicas:  # the identical members fit: the others found no room beside them
        where += f", but not for its {len(job.others)} other member{'s' if len(job.others) > 1 else ''} beside them"
    return Cause(Reason.NO_ROOM, "; ".join([head, where, *tail]))
