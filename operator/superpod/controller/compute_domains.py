"""The ComputeDomains of TrainingJobs with spec.computeDomain (api/compute_domain.py): asked for while the job
waits and the driver has not made the domain's channel template yet; the job waits for that template, in words."""

from __future__ import annotations

from superpod.api import compute_domain, manifests
from superpod.api.claims import TemplateMissing
from superpod.api.compute_domain import CHANNEL_FIELD, CLIQUE_LABEL
from superpod.controller.actions import CreateComputeDomain, Plan
from superpod.controller.jobs import JobView
from superpod.core.model import Topology
from superpod.core.phases import ACTIVE, FINISHED, Cause, Reason
from superpod.core.request import JobRequest

ASK_AGAIN, ASK_AT_MOST = 30.0, 900.0  # seconds before a job still without its template asks again, doubling


def channel_missing(view: JobView) -> Cause | None:
    """Why the job waits for its ComputeDomain (the driver has not made its channel template yet: all else of the
    job reads), or None."""
    return domain_pending(view.obj, view.request)


def domain_pending(job: dict, read: object) -> Cause | None:
    """channel_missing, of a job object and what reading it gave (a request, or why not)."""
    if not isinstance(read, TemplateMissing) or read.field != CHANNEL_FIELD:
        return None
    namespace, name = job["metadata"].get("namespace") or "default", job["metadata"]["name"]
    template = compute_domain.channel_template(job)
    return Cause(Reason.COMPUTE_DOMAIN_PENDING, f"waiting for ComputeDomain {namespace}/{name}: NVIDIA's DRA driver "
                 f"makes its IMEX channel template {template} (is the driver, with its ComputeDomain controller, "
                 "installed?)")


def wider_than_a_clique(topology: Topology, view) -> str | None:
    """Why a job asking for a ComputeDomain cannot be kept inside one NVLink clique on this cluster (its required
    level is coarser than the clique level, or no level labels cliques), or None."""
    if not isinstance(view, JobView) or not compute_domain.wanted(view.obj) or not isinstance(view.request, JobRequest):
        return None  # (a pod gang's view has no spec.computeDomain)
    clique = next((level.name for level in topology.levels if level.label == CLIQUE_LABEL), None)
    if clique is None:
        return (f"spec.computeDomain: no ClusterTopology level is labelled {CLIQUE_LABEL}, so nothing keeps the gang "
                "inside one NVLink clique (an IMEX domain joins the GPUs of one clique)")
    required = topology.index(view.request.required or "") or 0
    if required < (topology.index(clique) or 0):
        return (f"spec.computeDomain: topology.required {view.request.required} is wider than an NVLink clique: "
                f"require {clique} (or a level inside it), as an IMEX domain joins the GPUs of one clique")
    return None


class ComputeDomains:
    def __init__(self) -> None:
        self.asked: dict[str, tuple[float, float]] = {}  # job uid -> (when its domain is asked for next, the wait)

    def plans(self, views: list[JobView], now: float) -> list[Plan]:
        """A create for each waiting job (of `views`: the jobs whose pods claim devices) whose channel template is
        missing: at once, then after ASK_AGAIN seconds, doubling to ASK_AT_MOST (a driver installed late, a domain
        deleted). Creating an existing domain is a no-op (AlreadyExists)."""
        out, asking = [], {}
        for view in views:
            if view.phase in ACTIVE or view.phase in FINISHED or not channel_missing(view):
                continue
            due, wait = asking[view.uid] = self.asked.get(view.uid, (now, ASK_AGAIN / 2))
            if now >= due:
                wait = min(wait * 2, ASK_AT_MOST)
                asking[view.uid] = (now + wait, wait)
                domain = compute_domain.compute_domain(view.obj, manifests.owner_reference(view.obj))
                out.append(Plan(f"compute-domain:{view.key.text}", [CreateComputeDomain(domain)]))
        self.asked = asking
        return out
