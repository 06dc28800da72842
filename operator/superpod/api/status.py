"""A TrainingJob's status, read and written. The status is the operator's own record, but anything with write access
to the status subresource can damage it: a field that does not read as the model says is dropped (and reported),
never allowed to stop scheduling. Writes replace the whole status (the changes they make: controller/job_status.py)."""

from __future__ import annotations

from pydantic import ValidationError

from superpod.api.models import TrainingJobStatus
from superpod.api.times import rfc3339


def read_status(obj: dict) -> tuple[TrainingJobStatus, dict, list[str]]:
    """(the status as the model reads it, the raw fields that read well, the problems with the others)."""
    raw = obj.get("status")
    if not isinstance(raw, dict):
        return TrainingJobStatus(), {}, ([] if raw is None else [f"status: expected a mapping, got {raw!r:.40}"])
    raw = dict(raw)
    problems: list[str] = []
    while True:  # each round drops at least one field, so this ends
        try:
            return TrainingJobStatus.model_validate(raw), raw, problems
        except ValidationError as e:
            bad = {str(err["loc"][0]) for err in e.errors() if err["loc"] and str(err["loc"][0]) in raw}
            problems += [f"status.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()]
            if not bad:
                return TrainingJobStatus(), {}, problems
            for field in bad:
                raw.pop(field)


def updated(raw: dict, changes: dict) -> dict:
    """The whole new status: the old fields, then the changes; a None change removes the field."""
    out = {**raw, **changes}
    return {k: v for k, v in out.items() if v is not None}


def condition(conditions: list[dict], kind: str, status: str, reason: str, message: str, now: float) -> list[dict]:
    """`conditions` with one of type `kind` set; its lastTransitionTime moves only when its status changes."""
    old = next((c for c in conditions if isinstance(c, dict) and c.get("type") == kind), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else None
    new = {"type": kind, "status": status, "reason": str(reason), "message": message,
           "lastTransitionTime": since or rfc3339(now)}
    return [c for c in conditions if c is not old] + [new]
