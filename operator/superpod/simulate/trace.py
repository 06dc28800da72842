"""Traces: the project's job format (CSV) and the Philly trace, as gangs the simulator submits.

Job CSV: a header and at least `submit,name,namespace,replicas,gpus,required,priority,duration` (seconds from the
trace's start; `required` a topology level name or empty); optional columns:
- `fail_after`: the first attempt fails this many seconds after it starts;
- `limit`: the time limit the user gave, seconds (> 0; empty: none). What the job asked for, not what it ran:
  the trace's `duration` may be longer (enforcing the limit is the replay's business, not the reader's);
- `user`: who submitted it (empty: the namespace), so history can be kept per user.
Philly (`timestamp,duration,num_gpus,cluster`, and `user` where the trace has it): ≤ 8 GPUs is one replica of
that many GPUs; more is whole 8-GPU replicas (rounded up) with `required: leaf`, the level such a user asks for
on a DGX SuperPOD (a leaf is 256 GPUs). The namespace is the virtual cluster; the user, where there is none, too."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

GPUS_PER_SERVER = 8
REQUIRED_COLUMNS = ("submit", "name", "namespace", "replicas", "gpus", "required", "priority", "duration")


@dataclass(frozen=True)
class TraceJob:
    submit: float
    name: str
    namespace: str
    replicas: int
    gpus: int  # per replica
    duration: float
    required: str = ""
    priority: int = 0
    fail_after: float | None = None
    limit: float | None = None  # the user's time limit, seconds
    user: str = ""  # who submitted it; "" is read as the namespace

    def __post_init__(self) -> None:
        if not self.user:  # the namespace stands for its users when the trace names none
            object.__setattr__(self, "user", self.namespace)

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus


def read_jobs_csv(path: str | Path) -> list[TraceJob]:
    with open(path, newline="") as handle:
        rows = csv.DictReader(handle)
        missing = [column for column in REQUIRED_COLUMNS if column not in (rows.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing columns {', '.join(missing)}")
        jobs = [_job(row, line) for line, row in enumerate(rows, start=2)]
    return sorted(jobs, key=lambda job: (job.submit, job.name))


def _job(row: dict, line: int) -> TraceJob:
    try:
        return TraceJob(submit=float(row["submit"]), name=row["name"], namespace=row["namespace"] or "default",
                        replicas=int(row["replicas"]), gpus=int(row["gpus"]), duration=float(row["duration"]),
                        required=row["required"] or "", priority=int(row["priority"] or 0),
                        fail_after=float(row["fail_after"]) if row.get("fail_after") else None,
                        limit=time_limit(row.get("limit") or ""), user=row.get("user") or "")
    except (KeyError, ValueError) as error:
        raise ValueError(f"line {line}: {error}") from None


def time_limit(text: str) -> float | None:
    """A `limit` cell: seconds > 0, or None when empty."""
    if not text.strip():
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"limit {text!r} is not a time limit: seconds > 0, or empty for none")
    return seconds


def gang_shape(total_gpus: int, gpus_per_server: int = GPUS_PER_SERVER) -> tuple[int, int]:
    """(replicas, GPUs per replica) for a job asking for `total_gpus`: up to a server's worth is one replica of that
    many GPUs; more is whole servers' worth of replicas, rounded up."""
    if total_gpus <= gpus_per_server:
        return 1, total_gpus
    return math.ceil(total_gpus / gpus_per_server), gpus_per_server


def read_philly(path: str | Path, limit: int | None = None) -> list[TraceJob]:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    times = [datetime.strptime(row["timestamp"], "%Y-%m-%d %H:%M:%S").timestamp() for row in rows]
    start = min(times)
    jobs = []
    for index, (row, submitted) in enumerate(sorted(zip(rows, times, strict=True), key=lambda pair: pair[1])):
        replicas, per_replica = gang_shape(int(row["num_gpus"]))
        jobs.append(TraceJob(submit=submitted - start, name=f"philly-{index}", namespace=f"vc-{row['cluster']}",
                             replicas=replicas, gpus=per_replica, duration=float(row["duration"]),
                             required="leaf" if replicas > 1 else "", user=row.get("user") or ""))
        if limit and len(jobs) >= limit:
            break
    return jobs
