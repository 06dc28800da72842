"""The DRA claims a pod spec makes, read as claim shapes (core/dra/model.ClaimSpec): its own, made per pod from
ResourceClaimTemplates, and those all the gang's pods share by name (ResourceClaims)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Protocol

from superpod.api.resources import ConvertError
from superpod.core.dra.model import ClaimSpec, DraError, Request, pod_claims
from superpod.core.dra.units import claimed_gpus, gpu_classes, uncounted
from superpod.core.request import JobRequest

MOST_CONSUMERS = 256  # pods a ResourceClaim may be reserved for (resource.k8s.io/v1 status.reservedFor)


class TemplateMissing(ConvertError):
    """A claim's ResourceClaimTemplate does not exist (yet)."""


@dataclass(frozen=True)
class Shared:
    """A ResourceClaim pods use by name: its spec, and where its allocation lets them run (the allocation's node
    selector as JSON, "" for anywhere; None while it is not allocated)."""

    spec: ClaimSpec
    on: str | None = None


class ClaimSource(Protocol):
    """What claims are read against: the cluster's templates and claims, and what a device given to a request is
    worth in GPUs (core/dra/units.py)."""

    def template(self, namespace: str, name: str) -> ClaimSpec:
        """The claim spec ResourceClaimTemplate namespace/name makes; raises LookupError or DraError."""

    def shared(self, namespace: str, name: str) -> Shared:
        """ResourceClaim namespace/name as pods sharing it read it; raises LookupError or DraError."""

    def worth(self, request: Request) -> float:
        """GPUs one device given to `request` is, at most (core/dra/units.request_units)."""


@dataclass(frozen=True)
class ClaimsRead:
    """What a pod spec claims: its own claims (from templates) and the claims it shares, by name, in its order."""

    own: tuple[ClaimSpec, ...] = ()
    shared: tuple[tuple[str, Shared], ...] = ()


def read_pod_claims(obj: str, namespace: str, pod_spec: dict, at: str, source: ClaimSource) -> ClaimsRead:
    """Each entry of `pod_spec`'s resourceClaims as the claim it makes or names. Raises ConvertError naming `obj` and
    the field under `at`: a template or claim that is missing or does not read, a claim that counts no GPUs it may
    take."""
    own, shared = [], []
    try:
        entries = pod_claims(pod_spec)
    except DraError as error:
        raise ConvertError(obj, f"{at}.resourceClaims", str(error)) from None
    for claim in entries:
        field = f"{at}.resourceClaims[{claim.name}]"
        if claim.claim and any(name == claim.claim for name, _ in shared):
            continue  # (named twice: one claim all the same)
        try:
            if claim.template:
                own.append(spec := source.template(namespace, claim.template))
            else:
                shared.append((claim.claim, found := source.shared(namespace, claim.claim)))
                spec = found.spec
        except LookupError as error:
            if claim.template:
                raise TemplateMissing(obj, field, str(error).strip("'\"")) from None
            raise ConvertError(obj, field, str(error).strip("'\"")) from None
        except DraError as error:
            raise ConvertError(obj, field, str(error).strip("'\"")) from None
        if why := uncounted((spec,), source.worth):
            raise ConvertError(obj, field, why)
    return ClaimsRead(tuple(own), tuple(shared))


def claims_of(obj: str, namespace: str, pod_spec: dict, at: str, source: ClaimSource) -> tuple[ClaimSpec, ...]:
    """The claims each pod of `pod_spec` makes for itself from templates (read_pod_claims)."""
    return read_pod_claims(obj, namespace, pod_spec, at, source).own


def claiming(request: JobRequest, claims: ClaimsRead, source: ClaimSource) -> JobRequest:
    """`request` whose every identical member claims `claims`: its own claims booked per member, the claims they
    share booked once (on the one node they then go to while not allocated; where their allocation allows when
    allocated), and the GPUs of both counted."""
    if not claims.own and not claims.shared:
        return request
    if claims.shared and request.size > MOST_CONSUMERS:
        raise ConvertError(f"gang {request.key}", "resourceClaims", f"{request.size} pods share a ResourceClaim, "
                           f"which may be reserved for at most {MOST_CONSUMERS}")
    shared = [found for _, found in claims.shared]
    specs = tuple(found.spec for found in shared)
    return replace(request, claims=claims.own, claimed_gpus=claimed_gpus(claims.own, source.worth),
                   gpu_classes=gpu_classes((*claims.own, *specs), source.worth),
                   shared=tuple(found.spec for found in shared if found.on is None),
                   shared_on=tuple(sorted({found.on for found in shared if found.on})),
                   shared_gpus=claimed_gpus(specs, source.worth))


def selector_text(selector: dict) -> str:
    """A node selector as JobRequest.shared_on holds it: canonical JSON."""
    return json.dumps(selector, sort_keys=True, separators=(",", ":"))
