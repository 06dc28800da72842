"""One precise, actionable sentence for a job that cannot be placed."""

from __future__ import annotations

from collections import Counter

from superpod.core.model import Snapshot
from superpod.core.placement import Solver, validate
from superpod.core.request import GPU, MIG_PREFIX, PRODUCT_LABEL, JobRequest

_FILTER_WORDS = {
    "not ready": "cordoned or not ready",
    "cordoned": "cordoned or not ready",
    "tainted": "tainted without a matching toleration",
    "other GPU product": "of another GPU product",
    "nodeSelector mismatch": "outside the nodeSelector",
    "node affinity mismatch": "outside the required node affinity",
}


def room_of(sv: Solver, d: int, idle: bool = False) -> int:
    """Most replicas domain d could hold on its own now (or `idle`: if no pod ran), slices respected."""
    s, u, sl = sv.s, sv.u, sv.sl
    total = 0
    groups: Counter = Counter()
    for i in s.nodes_under(d):
        k = idle_slots(sv, i) if idle else sv.slots(i)
        if not k:
            continue
        if sl is None:
            total += k
        elif sl == sv.L + 1:
            total += (k // u) * u
        else:
            groups[s.anc[i][sl]] += k
    total += sum((v // u) * u for v in groups.values())
    return min(total, sv.R)


def idle_ub(sv: Solver, d: int) -> int:
    if d in sv.excluded:
        return 0
    n = sv.view.count[d]
    return min(sv.R, n * (sv.s.hmax // sv.g)) if sv.g > 0 else (sv.R if n else 0)


def best_room(sv: Solver, doms: list[int], idle: bool = False) -> tuple[int, int]:
    """(domain, room) with the most room among `doms`: exact, visiting domains in upper-bound order."""
    bound = (lambda d: idle_ub(sv, d)) if idle else sv.ub
    best, arg = -1, doms[0] if doms else 0
    for ub, d in sorted(((bound(d), d) for d in doms), key=lambda x: (-x[0], x[1])):
        if ub <= best:
            break
        r = room_of(sv, d, idle)
        if r > best:
            best, arg = r, d
    return arg, max(best, 0)


def idle_slots(sv: Solver, i: int) -> int:
    if not sv.view.ok[i] or i in sv.exclude_nodes or sv.s.anc[i][-1] in sv.excluded:
        return 0
    alloc = sv.s.nodes[i].allocatable
    return min([sv.R] + [alloc.get(r, 0) // v for r, v in sv.req])


def demand(snap: Snapshot, job: JobRequest) -> str:
    req = job.per_replica
    unit = "replicas"
    if job.gpus:
        ok = [n for n, good in zip(snap.nodes, snap.view(job).ok, strict=True) if good]
        products = {n.labels.get(PRODUCT_LABEL) for n in ok}
        product = job.gpu_product or (products.pop() if len(products) == 1 else None)
        if {n.allocatable.get(GPU, 0) for n in ok} == {job.gpus}:
            unit = "nodes"
        what = f"{product} " if product else ""
        each = f"{job.gpus} free {what}GPU{'s' if job.gpus > 1 else ''}"
    else:
        mig = [r[len(MIG_PREFIX) :] for r in req if r.startswith(MIG_PREFIX)]
        each = f"a free MIG {mig[0]} slice" if mig else _fmt_cpu_mem(req)
    word = unit if job.replicas != 1 else unit[:-1]
    text = f"needs {job.replicas} {word} {'with' if unit == 'nodes' else 'of'} {each}"
    if job.required:
        text += f" inside one {job.required}"
    if job.slice_size and job.slice_required:
        text += f", in slices of {job.slice_size} per {job.slice_required}"
    return text


def _fmt_cpu_mem(req: dict[str, int]) -> str:
    parts = []
    if req.get("cpu"):
        parts.append(f"{req['cpu'] / 1000:g} cpu")
    if req.get("memory"):
        parts.append(f"{req['memory'] / 2**30:g}Gi memory")
    return " and ".join(parts) or "no resources"


def filtered(snap: Snapshot, job: JobRequest) -> str:
    words: Counter = Counter()
    for why, n in snap.view(job).reasons.items():
        words[_FILTER_WORDS.get(why, why)] += n
    return ", ".join(f"{_nodes(n)} {w}" for w, n in sorted(words.items(), key=lambda x: -x[1]))


def _full_nodes(sv: Solver) -> str:
    """How many eligible nodes lack room for one replica, and which resource they lack."""
    short: Counter = Counter()
    if sv.g > 0:  # from the aggregates: nodes with fewer free GPUs than one replica needs
        hist = sv.view.hist[0]
        short[("lack", GPU)] = sum(hist[: min(sv.g, len(hist))])
    else:
        for i in range(len(sv.s.nodes)):
            if sv.view.ok[i] and sv.slots(i) == 0:
                f, alloc = sv.s.free[i], sv.s.nodes[i].allocatable
                for r, v in sv.req:
                    if f.get(r, 0) < v:
                        short[("have too little" if alloc.get(r, 0) < v else "lack", r)] += 1
                        break
    names = {GPU: f"{sv.g} free GPUs" if sv.g > 1 else "a free GPU", "cpu": "free cpu", "memory": "free memory"}
    return ", ".join(
        f"{_nodes(n)} {verb if n > 1 else verb.replace('have', 'has').replace('lack', 'lacks')} "
        f"{names.get(r, r.removeprefix('nvidia.com/'))}"
        for (verb, r), n in short.most_common()
        if n
    )


def _nodes(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def explain(
    snap: Snapshot, job: JobRequest, exclude: frozenset[int] = frozenset(), exclude_nodes: frozenset[int] = frozenset()
) -> str:
    """Why `job` cannot be placed now (call after placement failed)."""
    bad = validate(snap, job)
    if bad:
        return bad
    sv = Solver(snap, job, exclude, exclude_nodes=exclude_nodes)
    head = demand(snap, job)
    tail = [t for t in (_full_nodes(sv), filtered(snap, job)) if t]
    if not any(sv.view.ok):
        return f"{head}; no node qualifies: {filtered(snap, job)}"
    level = job.required
    if sv.q == sv.L + 1:  # required: one node
        best = max(range(len(snap.nodes)), key=lambda i: (sv.slots(i), snap.nodes[i].name))
        where = f"the best node has room for {sv.slots(best)} ({snap.nodes[best].name})"
        ever = max((idle_slots(sv, i) for i in range(len(snap.nodes))), default=0)
        ever_d = 0
    else:
        doms = [d for d in (snap.by_level[sv.q] if sv.q else [0]) if d not in sv.excluded]
        ever_d, ever = best_room(sv, doms, idle=True)
        best, now = best_room(sv, doms)
        where = (
            f"the best {level} has room for {now} ({snap.domain_label(best)})"
            if level
            else (f"the cluster has room for {now}")
        )
    if ever < job.replicas:
        scope = (
            f"the largest {level} ({snap.domain_label(ever_d)}) holds"
            if level and sv.q <= sv.L
            else (f"the largest {level} holds" if level else "the whole cluster holds")
        )
        return "; ".join([head, f"{scope} only {ever} even when idle", *tail])
    return "; ".join([head, where, *tail])
