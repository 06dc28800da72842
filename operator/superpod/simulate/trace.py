"""Traces: the project's job format (CSV) and the Philly trace, as gangs the simulator submits.

Job CSV: a header and at least `submit,name,namespace,replicas,gpus,required,priority,duration` (seconds from the
trace's start; `required` a topology level name or empty); optional `fail_after` (seconds after start).
Philly (`timestamp,duration,num_gpus,...`): ≤ 8 GPUs is one replica of that many GPUs; more is whole 8-GPU
replicas (rounded up) with `required: leaf`, the level such a user asks for on a DGX SuperPOD (a leaf is 256 GPUs)."""

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
                        fail_after=float(row["fail_after"]) if row.get("fail_after") else None)
    except (KeyError, ValueError) as error:
        raise ValueError(f"line {line}: {error}") from None


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
                             required="leaf" if replicas > 1 else ""))
        if limit and len(jobs) >= limit:
            break
    return jobs
