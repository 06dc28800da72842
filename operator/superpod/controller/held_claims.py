"""What a placed TrainingJob's replicas claim through DRA, against what the job was admitted with
(`status.admitted.claimedGpus`). kube-controller-manager makes a replica's claims from its templates as they are when
it makes them, and kube-scheduler allocates them: a template swapped after placement (delete and create under the same
name) makes claims that ask for more than the job was counted at. So a replica counts and bills the larger of what was
admitted and what its claims hold, and a claim that asks for or holds more than was admitted stops the attempt
(judge): the job is placed again, counted at what its claims ask now. So does a claim given a device an earlier claim
holds: kube-scheduler allocates these claims while this operator allocates pod gangs' from the same devices, each
from its own view of the other's writes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from superpod.controller.jobs import JobView
from superpod.controller.state import ClusterState, PodInfo
from superpod.core.accounting import gpu_units
from superpod.core.dra.model import DraError, read_claim
from superpod.core.dra.units import claimed_gpus
from superpod.core.phases import Reason
from superpod.core.request import JobRequest

SLACK = 1e-6  # GPUs: a claim worth this much more than admitted is the same (float sums)


def claiming(view: JobView) -> bool:
    return isinstance(view.request, JobRequest) and view.request.claiming


def replica_units(state: ClusterState, view: JobView, pod_uid: str) -> float:
    """GPUs one replica's pod counts and bills: its nvidia.com/gpu and MIG requests, and the larger of the GPUs its
    claims were admitted at and those they hold."""
    if not claiming(view):
        return view.units
    request = view.request
    return gpu_units(request.requests) + max(request.claimed_per_member, state.dra.member_gpus(pod_uid, view.replicas))


def counted(state: ClusterState, gang: tuple) -> JobRequest:
    """A placed job's request as its queue counts it (`gang`: JobView.gang): each replica at the most any pod of
    its attempt holds, when more than it was admitted at."""
    request, uid, attempt, _ = gang
    if not request.claiming:
        return request
    held = max((state.dra.member_gpus(pod.uid, request.size) for pod in state.pods_of(request.key)
                if pod.owner == uid and pod.attempt == attempt), default=0.0)
    if held <= request.claimed_per_member + SLACK:
        return request
    return replace(request, claimed_gpus=held - request.shared_gpus / request.size)


def fault(state: ClusterState, view: JobView, pods: Iterable[PodInfo]) -> tuple[str, str] | None:
    """Why the attempt must stop, as (reason, words), for the first of `pods` (its replicas' pods) whose claims hold
    a device an earlier claim holds too (those kube-scheduler made for their nvidia.com/gpu too), or ask for or hold
    more GPUs than the job was admitted with; None when none does."""
    claims = claiming(view)
    if not claims and not state.dra.claims:
        return None
    admitted = view.request.claimed_per_member if claims else 0.0
    for pod in sorted(pods, key=lambda p: p.index if p.index is not None else -1):
        for claim in (*state.dra.reserved_for(pod.uid), *state.dra.extended_of(pod.uid)):
            if (twice := state.dra.taken_before(claim)) is not None:
                name = f"{claim['metadata'].get('namespace')}/{claim['metadata'].get('name')}"
                return Reason.DEVICE_TAKEN_TWICE, (
                    f"replica {pod.index}'s claim {name} was given device {twice[0][2]} of pool {twice[0][1]}, which "
                    f"the earlier claim {twice[1]} holds: stopped, and placed again")
        if not claims:
            continue
        specs = tuple(spec for claim in state.dra.owned_by(pod.uid) if (spec := _read(claim)) is not None)
        asked = claimed_gpus(specs, state.dra.worth)
        held = state.dra.member_gpus(pod.uid, view.replicas)
        most = max(asked, held)
        if most > admitted + SLACK:
            what = "hold" if held >= asked else "ask for"
            return Reason.CLAIMS_CHANGED, (
                f"replica {pod.index}'s claims {what} {most:g} GPUs, but the job was admitted with {admitted:g} a "
                "replica (a ResourceClaimTemplate it uses changed after it was placed): stopped, and placed again as "
                "its claims ask now")
    return None


def _read(claim: dict):
    try:
        return read_claim(claim)
    except DraError:  # a claim the API server took but that does not read here asks for nothing we can count
        return None
