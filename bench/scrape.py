"""The operator's histograms read from its /metrics between two moments of a benchmark: how many cycles ran, and
their p50 / p99 (linear inside a bucket, as Prometheus' histogram_quantile estimates them)."""

from __future__ import annotations

import urllib.request
from collections import Counter

from prometheus_client.parser import text_string_to_metric_families


def buckets(url: str, name: str) -> dict[float, float]:
    """Upper bound -> cumulative count of the histogram `name` (without its _bucket suffix)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name == name:
            for sample in family.samples:
                if sample.name == f"{name}_bucket":
                    out[float(sample.labels["le"])] = sample.value
    return out


def quantile(counts: dict[float, float], q: float) -> float:
    bounds = sorted(counts)
    total = counts[bounds[-1]] if bounds else 0
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if counts[bound] >= rank:
            if bound == float("inf"):
                return lower  # beyond the last finite bucket: its bound is all that is known
            return lower + (bound - lower) * (rank - below) / max(counts[bound] - below, 1e-9)
        lower, below = bound, counts[bound]
    return lower


class Histograms:
    """Readings of some histograms at the start; `report` gives the cycles since, with p50 and p99 of each."""

    def __init__(self, url: str, names: tuple[str, ...]) -> None:
        self.url, self.names = url, names
        self.start = {name: buckets(url, name) for name in names}

    def report(self) -> str:
        parts = []
        for name in self.names:
            now = buckets(self.url, name)
            since = {bound: count - self.start[name].get(bound, 0) for bound, count in now.items()}
            count = since.get(float("inf"), 0)
            parts.append(f"{name.removeprefix('superpod_')} n={count:.0f} p50 {quantile(since, 0.5) * 1000:.0f} ms "
                         f"p99 {quantile(since, 0.99) * 1000:.0f} ms")
        return "; ".join(parts)


WRITES = ("POST", "PUT", "PATCH", "DELETE")


def server_writes(url: str, ssl_context) -> Counter:
    """The API server's writes so far, every client's, by verb and resource (apiserver_request_total)."""
    text = urllib.request.urlopen(f"{url}/metrics", context=ssl_context, timeout=30).read().decode()
    out: Counter = Counter()
    for family in text_string_to_metric_families(text):
        if family.name == "apiserver_request":
            for sample in family.samples:
                labels = sample.labels
                if sample.name == "apiserver_request_total" and labels.get("verb") in WRITES:
                    what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource")
                                                          else "")
                    out[f"{labels['verb'].lower()} {what}"] += sample.value
    return out


class ServerWrites:
    """The API server's writes between two moments, per job, the largest first."""

    def __init__(self, url: str, ssl_context) -> None:
        self.url, self.ssl = url, ssl_context
        self.start = server_writes(url, ssl_context)

    def report(self, jobs: int, top: int = 8) -> str:
        since = server_writes(self.url, self.ssl) - self.start
        total = sum(since.values())
        return f"{total / jobs:.2f} a job (" + ", ".join(
            f"{what} {count / jobs:.2f}" for what, count in since.most_common(top)) + ")"
