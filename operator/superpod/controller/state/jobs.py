"""The TrainingJobs, with the statuses in force but not sent yet."""

from __future__ import annotations

from collections.abc import Callable

from superpod.controller.state.base import Notes
from superpod.core.gang_key import GangKey


def job_key(key: str) -> GangKey:
    """The gang of the TrainingJob (or of its Service, named as it) with object key `key` ("namespace/name")."""
    namespace, name = key.split("/", 1)
    return GangKey(namespace, name)


def accounted(job: dict) -> int:
    """The attempts a job's status says are closed and billed (status.accountedAttempts)."""
    value = (job.get("status") or {}).get("accountedAttempts")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class JobStore:
    """The TrainingJobs by key, those stored or deleted since JobReader last read them (`edited_jobs`), and the
    statuses in force but not sent yet (`unsent`). `owner_changed(key)`: the job of that name came, went, was made
    again or closed an attempt (whether its pods are billed on their own may change)."""

    def __init__(self, notes: Notes, owner_changed: Callable[[GangKey], None]) -> None:
        self.notes, self.owner_changed = notes, owner_changed
        self.jobs: dict[GangKey, dict] = {}
        self.edited_jobs: set[GangKey] = set()
        # Job statuses in force but not sent yet (WriteStatus.deferred): key -> (the object as the API server has it,
        # since when). The cache shows the job with its new status until a status is written (the next write of
        # it landing, or anyone's) or the job is deleted; then what the API server has is all there is.
        self.unsent: dict[GangKey, tuple[dict, float]] = {}

    def job_of(self, key: str) -> GangKey | None:
        return job_key(key)

    def store(self, key: str, obj: dict, now: float) -> None:
        """A job's new version. A status not sent yet stays in force over an edit that left the status as it was
        (a label, the spec: the status write that follows is made on this version); a status written by anyone
        ends it."""
        key = job_key(key)
        unsent = self.unsent.get(key)
        if unsent is not None and obj.get("status") == unsent[0].get("status"):
            self.unsent[key] = (obj, unsent[1])
            obj = {**obj, "status": self.jobs[key]["status"]}
        else:
            self.unsent.pop(key, None)
        before = self.jobs.get(key)
        self.jobs[key] = obj
        self._edited(key)
        if before is None or before["metadata"].get("uid") != obj["metadata"].get("uid") or (
                accounted(before) != accounted(obj)):
            self.owner_changed(key)

    def forget(self, key: str, uid: str, obj: dict | None, now: float) -> None:
        key = job_key(key)
        self.jobs.pop(key, None)
        self.unsent.pop(key, None)
        self._edited(key)
        self.notes.went(uid)
        self.owner_changed(key)

    def defer(self, key: GangKey, resource_version: str, status: dict, now: float) -> bool:
        """A job's new status in force at once and sent later; False if the job is gone or no longer at
        `resource_version` (the decision was made on another version)."""
        obj = self.jobs.get(key)
        if obj is None or (resource_version and obj["metadata"].get("resourceVersion") != resource_version):
            return False
        self.unsent.setdefault(key, (obj, now))
        self.jobs[key] = {**obj, "status": status}
        self._edited(key)
        return True

    def forget_unsent(self) -> list[GangKey]:
        """The jobs as the API server has them: the statuses not sent are dropped; the keys of those jobs."""
        keys = list(self.unsent)
        for key, (obj, _) in self.unsent.items():
            self.jobs[key] = obj
            self._edited(key)
        self.unsent.clear()
        return keys

    def _edited(self, key: GangKey) -> None:
        if self.notes.followed:
            self.edited_jobs.add(key)
