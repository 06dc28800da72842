"""The DRA claims a pod spec makes from ResourceClaimTemplates, read as claim shapes (core/dra/model.ClaimSpec)."""

from __future__ import annotations

from typing import Protocol

from superpod.api.resources import ConvertError
from superpod.core.dra.model import ClaimSpec, DraError, Request, pod_claims
from superpod.core.dra.units import uncounted


class TemplateMissing(ConvertError):
    """A claim's ResourceClaimTemplate does not exist (yet)."""


class ClaimSource(Protocol):
    """What claims are read against: the cluster's templates, and what a device given to a request is worth in GPUs
    (core/dra/units.py)."""

    def template(self, namespace: str, name: str) -> ClaimSpec:
        """The claim spec ResourceClaimTemplate namespace/name makes; raises LookupError or DraError."""

    def worth(self, request: Request) -> float:
        """GPUs one device given to `request` is, at most (core/dra/units.request_units)."""


def claims_of(obj: str, namespace: str, pod_spec: dict, at: str, source: ClaimSource) -> tuple[ClaimSpec, ...]:
    """Each entry of `pod_spec`'s resourceClaims as the claim its template makes. Raises ConvertError naming `obj`
    and the field under `at`: a claim shared by name, a template that is missing or does not read."""
    out = []
    try:
        entries = pod_claims(pod_spec)
    except DraError as error:
        raise ConvertError(obj, f"{at}.resourceClaims", str(error)) from None
    for claim in entries:
        field = f"{at}.resourceClaims[{claim.name}]"
        if not claim.template:
            raise ConvertError(obj, field, "a ResourceClaim shared by name is not placed by superpod-scheduler yet; "
                               "give each pod its own through resourceClaimTemplateName")
        try:
            out.append(source.template(namespace, claim.template))
        except LookupError as error:
            raise TemplateMissing(obj, field, str(error).strip("'\"")) from None
        except DraError as error:
            raise ConvertError(obj, field, str(error).strip("'\"")) from None
        if why := uncounted(out[-1:], source.worth):
            raise ConvertError(obj, field, why)
    return tuple(out)
