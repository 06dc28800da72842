"""Who submits a generated job, under which recurring name, and with what time limit (`workload.generate`).

History-based runtime estimates need what real traces have: users who run the same job again and again, with
similar run times, and who ask for time limits well above what their jobs take. So:
- Users: `USERS_PER_TENANT` per tenant, named `<tenant>-u<k>`, Zipf-skewed within their tenant (exponent
  `USER_ZIPF`: the first submits most).
- Recurring names: each user has `STEMS_PER_USER` stems `<user>-<model>` (models drawn from `MODELS`); a job is
  named `<stem>-<n>`, its stem's n-th run. Each stem has a typical log run time, drawn around the trace's
  log-normal mean with spread √(σ² − `RUN_SIGMA`²), so stem means and the spread of runs around them together
  make the trace's σ. The durations themselves are drawn before, as they always were (same seed, same durations);
  a job goes to one of its user's stems with probability ∝ the normal density of its log duration around that
  stem's mean (σ `RUN_SIGMA`): the runs of one stem cluster around its mean (docs/benchmarks.md's LLM trace, seed 1:
  σ of log run time 1.16 within a stem, ×3.2, against 2.13 over the trace).
- Time limits: users over-estimate (Tsafrir, Etsion and Feitelson, "Backfilling using system-generated
  predictions rather than user runtime estimates", IEEE TPDS 2007: limits are often 2-5× the run time, or the
  maximum allowed). A share `MAXIMUM_SHARE` of users always ask for a round maximum: the first of
  `ROUND_MAXIMA` (1 d, 3 d, 1 wk) at least as long as the run, else the run rounded up to whole days; the others
  have a factor of their own, uniform in `OVER_ESTIMATE`, and ask for the run time × that factor rounded up to
  the next hour. A limit is never below the trace's duration: the trace says the job ran that long.
  With `limits="round"` users give what real users give instead (Tsafrir, "Using inaccurate estimates accurately",
  JSSPP 2010: 90 % of jobs use about 20 limit values, and a limit modelled as a factor of each job's run time leaks
  that run time): each of a user's job scripts (stems) has one limit of `ROUND_LIMITS`, the first at least its
  typical run time × the user's factor × `ROUND_HEADROOM` (the users who ask for the maximum: the largest); a run
  longer than its script's limit is stopped at the limit."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

USERS_PER_TENANT = 3
USER_ZIPF = 1.0
STEMS_PER_USER = 4
MODELS = ("llama", "gpt", "moe", "vit", "bert", "t5", "diffusion", "whisper", "mamba", "clip")
RUN_SIGMA = 0.7  # spread of a stem's log run times around its mean
OVER_ESTIMATE = (1.2, 5.0)
MAXIMUM_SHARE = 0.2
HOUR, DAY = 3600.0, 86_400.0
ROUND_MAXIMA = (DAY, 3 * DAY, 7 * DAY)
ROUND_LIMITS = (HOUR, 2 * HOUR, 4 * HOUR, 8 * HOUR, 12 * HOUR, DAY, 2 * DAY, 3 * DAY, 7 * DAY)
LIMITS = ("habit", "round")  # how users choose their limits (see the module docstring)
ROUND_HEADROOM = 2.0  # a script's round limit covers its typical run × the user's factor × this: few runs time out


@dataclass(frozen=True)
class User:
    name: str
    stems: tuple[str, ...]
    log_means: tuple[float, ...]  # each stem's typical log run time
    over_estimate: float | None  # their limits ÷ run time, before rounding; None: they ask for a round maximum


@dataclass(frozen=True)
class Submitter:
    """What `assign` gives one job: its user, name and time limit."""

    user: str
    name: str
    limit: float


def make_users(stream: random.Random, namespaces: list[str], log_mean: float, sigma: float) -> dict[str, list[User]]:
    """The users of each namespace, in order; `log_mean` and `sigma` are the trace's log-normal run time's."""
    spread = math.sqrt(max(0.0, sigma ** 2 - RUN_SIGMA ** 2))
    users = {}
    for namespace in namespaces:
        users[namespace] = []
        for rank in range(USERS_PER_TENANT):
            name = f"{namespace}-u{rank}"
            models = stream.sample(MODELS, STEMS_PER_USER)
            means = tuple(stream.gauss(log_mean, spread) for _ in models)
            factor = None if stream.random() < MAXIMUM_SHARE else stream.uniform(*OVER_ESTIMATE)
            users[namespace].append(User(name, tuple(f"{name}-{model}" for model in models), means, factor))
    return users


def assign(stream: random.Random, users: dict[str, list[User]], namespaces: list[str],
           durations: list[float], limits: str = "habit") -> list[Submitter]:
    """A user, a recurring name and a limit for each job (by its namespace and duration), in order."""
    runs: dict[str, int] = {}  # stem -> runs so far
    out = []
    weights = [1 / (rank + 1) ** USER_ZIPF for rank in range(USERS_PER_TENANT)]
    for namespace, duration in zip(namespaces, durations, strict=True):
        user = stream.choices(users[namespace], weights=weights)[0]
        stem = _stem(stream, user, duration)
        runs[stem] = runs.get(stem, 0) + 1
        limit = round_limit(user, stem) if limits == "round" else time_limit(user, duration)
        out.append(Submitter(user.name, f"{stem}-{runs[stem]}", limit))
    return out


def _stem(stream: random.Random, user: User, duration: float) -> str:
    """One of the user's stems, with probability ∝ the density of log(duration) around each stem's mean."""
    distances = [((math.log(duration) - mean) / RUN_SIGMA) ** 2 for mean in user.log_means]
    nearest = min(distances)  # subtracted so the farthest weights do not all underflow to 0
    weights = [math.exp(-(distance - nearest) / 2) for distance in distances]
    return stream.choices(user.stems, weights=weights)[0]


def round_limit(user: User, stem: str) -> float:
    """The limit `user` gives every run of script `stem` (limits="round")."""
    if user.over_estimate is None:
        return ROUND_LIMITS[-1]
    typical = math.exp(user.log_means[user.stems.index(stem)]) * user.over_estimate * ROUND_HEADROOM
    return next((limit for limit in ROUND_LIMITS if limit >= typical), ROUND_LIMITS[-1])


def time_limit(user: User, duration: float) -> float:
    """The limit `user` asks for a job that runs `duration` seconds."""
    if user.over_estimate is None:
        return next((maximum for maximum in ROUND_MAXIMA if maximum >= duration), math.ceil(duration / DAY) * DAY)
    return math.ceil(duration * user.over_estimate / HOUR) * HOUR
