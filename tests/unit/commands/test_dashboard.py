"""The chart's Grafana dashboard: every metric its queries name is one the operator exports, and every panel says
something."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from superpod.controller.dashboard import dashboard
from superpod.controller.metrics import Metrics

SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> set[str]:
    registry = CollectorRegistry()
    Metrics(registry)
    return {family.name + suffix for family in registry.collect() for suffix in SUFFIXES.get(family.type, ("",))}


def test_every_metric_the_dashboard_queries_is_exported():
    names = exported()
    panels = dashboard()["panels"]
    queried = {name for panel in panels for target in panel["targets"]
               for name in re.findall(r"\bsuperpod_[a-z_]+", target["expr"])}
    assert queried and queried <= names, sorted(queried - names)
    assert all(panel["title"] and panel["targets"] for panel in panels)
    assert {"superpod_preemptions_total", "superpod_queue_gpus", "superpod_gpu_seconds_total"} <= queried
