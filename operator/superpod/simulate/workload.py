"""Workloads for the simulator: write the job CSV, generate synthetic traces, and reshape a trace (load, window).

Synthetic traces (`generate`) draw from `random.Random(seed)`: the seed seeds one independent stream each for
arrivals, sizes, durations, tenants and users, so changing the arrival process keeps every job's size, duration,
tenant, user, name and limit (the users' stream came last: the others draw what they drew before it).

Sizes, as total GPUs, mapped to gangs by `trace.gang_shape` (≤ a server: one replica; more: whole servers):
- "philly": the GPU counts of the Philly trace with its frequencies (`PHILLY_GPU_COUNTS`); `required: leaf` when
  the gang spans servers, as `trace.read_philly` does.
- "llm": gangs of 8–512 GPUs with a Pareto tail, P(n) ∝ 1/n (`LLM_GPU_WEIGHTS`: each doubling is half as likely,
  so every size class brings the same GPU demand and 512-GPU jobs, 0.8 % of jobs, are 1/7 of it);
  `required: leaf` for 16–256 GPUs (a DGX SuperPOD leaf is 256 GPUs), none for 8 or above 256.
- "acme": an LLM datacenter's mix as Acme's Kalos and Seren clusters show it (Hu et al., NSDI'24): many one-GPU and
  one-server jobs (evaluation, debugging) beside pretraining gangs up to 1,024 GPUs (`ACME_GPU_WEIGHTS`, about 26
  GPUs a job on average); `required` as "llm".
Arrivals: "poisson" (exponential gaps, mean `mean_gap`) or "bursty", a two-state Markov-modulated Poisson process:
at each arrival the state flips with probability `BURST_SWITCH` (runs of 20 jobs on average); burst gaps average
`BURST_GAP` × mean_gap and calm gaps `CALM_GAP` × mean_gap (a 9× rate ratio). Both states are equally likely over
arrivals, so the mean gap stays `mean_gap`.
Durations: log-normal with mean `mean_duration` and σ = `DURATION_SIGMA` (2.15, the standard deviation of log run
time over the Philly trace's jobs: median ≈ 0.1 × mean, the top 1 % over 14 × mean).
Tenants: `tenant-0` … `tenant-{n-1}`, Zipf with exponent `TENANT_ZIPF` (1): tenant k has weight 1/(k+1), e.g.
four tenants get 48 %, 24 %, 16 % and 12 % of the jobs.
Users, names and time limits (`simulate/users.py`): a few users per tenant, each with a few recurring job-name
stems whose run times cluster (`<user>-<model>-<n>`), and a limit per job as its user habitually over-estimates
(`limits="habit"`), or one of a few round values per script (`limits="round"`; a run longer is stopped at it).
Early ends (`early_ends`, a share of the jobs): jobs that fail or are cancelled early, as about 40 % of the jobs of
LLM clusters do, mostly short (Acme, NSDI '24: by count 43-50 % failed or cancelled, by GPU-time most of it
cancelled): such a job runs `EARLY_END` (uniform) of its drawn duration, under its script's name and limit, so a
script's history mixes full runs and early ends. Drawn from a stream of their own, after the others.
Times are rounded to the millisecond."""

from __future__ import annotations

import csv
import math
import random
import re
from dataclasses import replace
from pathlib import Path

from superpod.simulate import users
from superpod.simulate.trace import GPUS_PER_SERVER, REQUIRED_COLUMNS, TraceJob, gang_shape

CSV_COLUMNS = (*REQUIRED_COLUMNS, "fail_after", "limit", "user")
EARLY_END = (0.01, 0.3)  # the share of its drawn duration a job that ends early runs

# Philly trace (Jeon et al., ATC '19): jobs by GPU count.
PHILLY_GPU_COUNTS = {1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67, 64: 6, 128: 3}
# LLM training gangs: P(n) ∝ 1/n from 8 to 512 GPUs (50 %, 25 %, 12.6 %, 6.3 %, 3.1 %, 1.6 %, 0.8 %).
LLM_GPU_WEIGHTS = {8: 64, 16: 32, 32: 16, 64: 8, 128: 4, 256: 2, 512: 1}
# An LLM datacenter's mix: one-GPU and one-server jobs beside pretraining gangs up to 1,024 GPUs (mean ≈ 26 GPUs).
ACME_GPU_WEIGHTS = {1: 40, 2: 6, 4: 8, 8: 28, 16: 7, 32: 6, 64: 4, 128: 2, 256: 1.3, 512: 1, 1024: 0.7}
SIZES = {"philly": PHILLY_GPU_COUNTS, "llm": LLM_GPU_WEIGHTS, "acme": ACME_GPU_WEIGHTS}
ARRIVALS = ("poisson", "bursty")

DURATION_SIGMA = 2.15
TENANT_ZIPF = 1.0
BURST_SWITCH = 1 / 20
BURST_GAP = 0.2
CALM_GAP = 1.8

UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}
WINDOW_BOUND = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)")


# --- job CSV -------------------------------------------------------------------------------------------------------

def write_jobs_csv(jobs: list[TraceJob], path: str | Path) -> None:
    """Writes `jobs` in the order given, in the format `trace.read_jobs_csv` reads."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for job in jobs:
            writer.writerow([_decimal(job.submit), job.name, job.namespace, job.replicas, job.gpus, job.required,
                             job.priority, _decimal(job.duration),
                             "" if job.fail_after is None else _decimal(job.fail_after),
                             "" if job.limit is None else _decimal(job.limit), job.user])


def _decimal(value: float) -> str:
    """The shortest text that reads back as exactly `value`, without a trailing `.0`."""
    text = repr(float(value))
    return text.removesuffix(".0")


# --- synthetic traces ----------------------------------------------------------------------------------------------

def generate(seed: int, jobs: int, tenants: int, sizes: str, arrival: str, mean_gap: float, mean_duration: float,
             gpus_per_node: int = GPUS_PER_SERVER, limits: str = "habit", early_ends: float = 0.0) -> list[TraceJob]:
    """A synthetic trace of `jobs` jobs, the first submitted at 0 (see the module docstring for the distributions)."""
    _check_generate(jobs, tenants, sizes, arrival, mean_gap, mean_duration, gpus_per_node)
    if limits not in users.LIMITS:
        raise ValueError(f"unknown limits {limits!r}: choose one of {', '.join(users.LIMITS)}")
    if not 0.0 <= early_ends <= 1.0:
        raise ValueError(f"early_ends must be a share between 0 and 1, not {early_ends}")
    root = random.Random(seed)
    arrival_stream, size_stream, duration_stream, tenant_stream, user_stream, early_stream = (
        random.Random(root.getrandbits(64)) for _ in range(6))
    submits = _submits(arrival_stream, jobs, arrival, mean_gap)
    table = SIZES[sizes]
    totals = size_stream.choices(list(table), weights=list(table.values()), k=jobs)
    durations = _durations(duration_stream, jobs, mean_duration)
    namespaces = _tenants(tenant_stream, jobs, tenants)
    people = users.make_users(user_stream, _tenant_names(tenants), _log_mean(mean_duration), DURATION_SIGMA)
    submitters = users.assign(user_stream, people, namespaces, durations, limits)
    runs = [_run(early_stream, duration, submitter.limit, early_ends)
            for duration, submitter in zip(durations, submitters, strict=True)]
    return [_generated_job(submits[index], totals[index], runs[index], namespaces[index], submitters[index],
                           sizes, gpus_per_node) for index in range(jobs)]


def _run(stream: random.Random, duration: float, limit: float, early_ends: float) -> float:
    """How long a job of drawn `duration` runs: a share of its duration if it ends early, at most its limit."""
    if early_ends and stream.random() < early_ends:
        duration = max(0.001, round(duration * stream.uniform(*EARLY_END), 3))
    return min(duration, limit)


def _check_generate(jobs: int, tenants: int, sizes: str, arrival: str, mean_gap: float, mean_duration: float,
                    gpus_per_node: int) -> None:
    if sizes not in SIZES:
        raise ValueError(f"unknown sizes {sizes!r}: choose one of {', '.join(SIZES)}")
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival {arrival!r}: choose one of {', '.join(ARRIVALS)}")
    if jobs < 0:
        raise ValueError(f"jobs must be 0 or more, not {jobs}")
    if tenants < 1:
        raise ValueError(f"tenants must be 1 or more, not {tenants}")
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be 1 or more, not {gpus_per_node}")
    if not (mean_gap > 0 and math.isfinite(mean_gap)):
        raise ValueError(f"mean_gap must be a positive number of seconds, not {mean_gap}")
    if not (mean_duration > 0 and math.isfinite(mean_duration)):
        raise ValueError(f"mean_duration must be a positive number of seconds, not {mean_duration}")


def _submits(stream: random.Random, count: int, arrival: str, mean_gap: float) -> list[float]:
    """Submit times from 0: exponential gaps, their mean scaled per job by the arrival process's state."""
    bursting = stream.random() < 0.5
    clock, submits = 0.0, []
    for index in range(count):
        if index:
            scale = 1.0
            if arrival == "bursty":
                if stream.random() < BURST_SWITCH:
                    bursting = not bursting
                scale = BURST_GAP if bursting else CALM_GAP
            clock += stream.expovariate(1 / (scale * mean_gap))
        submits.append(round(clock, 3))
    return submits


def _log_mean(mean_duration: float) -> float:
    """The mu of the log-normal of mean `mean_duration` and sigma `DURATION_SIGMA` (its mean is exp(mu + sigma²/2))."""
    return math.log(mean_duration) - DURATION_SIGMA ** 2 / 2


def _durations(stream: random.Random, count: int, mean_duration: float) -> list[float]:
    mu = _log_mean(mean_duration)
    return [max(0.001, round(stream.lognormvariate(mu, DURATION_SIGMA), 3)) for _ in range(count)]


def _tenant_names(tenants: int) -> list[str]:
    return [f"tenant-{rank}" for rank in range(tenants)]


def _tenants(stream: random.Random, count: int, tenants: int) -> list[str]:
    weights = [1 / (rank + 1) ** TENANT_ZIPF for rank in range(tenants)]
    return stream.choices(_tenant_names(tenants), weights=weights, k=count)


def _generated_job(submit: float, total_gpus: int, duration: float, namespace: str, submitter: users.Submitter,
                   sizes: str, gpus_per_node: int) -> TraceJob:
    replicas, per_replica = gang_shape(total_gpus, gpus_per_node)
    return TraceJob(submit=submit, name=submitter.name, namespace=namespace, replicas=replicas, gpus=per_replica,
                    duration=duration, required=_required(sizes, total_gpus, replicas), limit=submitter.limit,
                    user=submitter.user)


def _required(sizes: str, total_gpus: int, replicas: int) -> str:
    if sizes in ("llm", "acme"):
        return "leaf" if 16 <= total_gpus <= 256 else ""
    return "leaf" if replicas > 1 else ""  # as trace.read_philly


# --- load and windows ----------------------------------------------------------------------------------------------

def offered_load(jobs: list[TraceJob], capacity_gpus: float) -> float:
    """GPU-time asked for ÷ capacity ÷ the submit span: 1.0 keeps every GPU busy if nothing waits or fragments."""
    if capacity_gpus <= 0:
        raise ValueError(f"capacity_gpus must be positive, not {capacity_gpus}")
    if not jobs:
        return 0.0
    work = sum(job.total_gpus * job.duration for job in jobs)
    span = max(job.submit for job in jobs) - min(job.submit for job in jobs)
    if span == 0:
        return math.inf if work > 0 else 0.0
    return work / capacity_gpus / span


def rescale(jobs: list[TraceJob], load: float, capacity_gpus: float) -> list[TraceJob]:
    """The jobs, in the same order, with submits relative to the first and their gaps stretched or squeezed so that
    `offered_load` is `load`. Sizes and durations are kept."""
    if not (load > 0 and math.isfinite(load)):
        raise ValueError(f"load must be a positive number, not {load}")
    if len({job.submit for job in jobs}) < 2:
        raise ValueError("cannot rescale a trace with fewer than 2 distinct submit times: it has no gaps to scale")
    current = offered_load(jobs, capacity_gpus)
    if current == 0:
        raise ValueError("cannot rescale a trace with no GPU work (every duration is 0)")
    first = min(job.submit for job in jobs)
    factor = current / load
    return [replace(job, submit=(job.submit - first) * factor) for job in jobs]


def window(jobs: list[TraceJob], start: float, end: float) -> list[TraceJob]:
    """The jobs submitted in [start, end), in the same order, with submits relative to `start`."""
    if not start < end:
        raise ValueError(f"window start {start} must come before its end {end}")
    return [replace(job, submit=job.submit - start) for job in jobs if start <= job.submit < end]


def parse_window(text: str) -> tuple[float, float]:
    """`start:end` in seconds, each with an optional unit s, m, h or d: "0:14d", "3d:17d", "3600:7200"."""
    bounds = text.strip().split(":")
    if len(bounds) != 2:
        raise ValueError(f"window {text!r}: expected start:end, e.g. 0:14d or 3600:7200")
    start, end = (_seconds(bound, text) for bound in bounds)
    if not start < end:
        raise ValueError(f"window {text!r}: start must come before end")
    return start, end


def _seconds(bound: str, text: str) -> float:
    return duration(bound, f"window {text!r}")


def duration(text: str, what: str) -> float:
    """Seconds of `text`, a number with an optional unit s, m, h or d ("30d", "4h", "3600"); `what` names it in
    the error."""
    match = WINDOW_BOUND.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{what}: {text!r} is not a duration (a number with optional unit s, m, h or d)")
    number, unit = match.groups()
    return float(number) * UNIT_SECONDS[unit]


def with_priorities(jobs: list[TraceJob], text: str, seed: int) -> list[TraceJob]:
    """The jobs with priorities drawn per job, seeded: `text` is `priority:share,...` (e.g. "100:0.1": one job in ten
    at priority 100); the rest keep theirs."""
    levels = []
    for part in text.split(","):
        priority, _, share = part.partition(":")
        try:
            levels.append((int(priority), float(share)))
        except ValueError:
            raise ValueError(f"priorities {text!r}: expected priority:share,... e.g. 100:0.1") from None
    if any(not 0 <= share <= 1 for _, share in levels) or sum(share for _, share in levels) > 1:
        raise ValueError(f"priorities {text!r}: shares must be in [0, 1] and add up to at most 1")
    stream = random.Random(seed)
    out = []
    for job in jobs:
        draw, bound = stream.random(), 0.0
        for priority, share in levels:
            bound += share
            if draw < bound:
                job = replace(job, priority=priority)
                break
        out.append(job)
    return out
