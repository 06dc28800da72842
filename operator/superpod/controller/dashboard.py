"""The Grafana dashboard the chart ships (hack/gen-dashboard.py writes it to the chart; CI fails when it is stale):
each panel a title and PromQL over the operator's own metrics (controller/metrics.py), which a unit test checks."""

from __future__ import annotations

# (title, unit, [(legend, PromQL)]) per panel, in rows of two
PANELS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("GPUs allocated by product", "short", [("{{product}}", "sum by (product) (superpod_gpus_allocated)")]),
    ("GPUs free by product", "short", [("{{product}}", "sum by (product) (superpod_gpus_free)")]),
    ("GPU utilisation", "percentunit", [
        ("allocated / (allocated + free)",
         "sum(superpod_gpus_allocated) / (sum(superpod_gpus_allocated) + sum(superpod_gpus_free))")]),
    ("GPUs by queue", "short", [
        ("{{queue}} allocated", 'sum by (queue) (superpod_queue_gpus{kind="allocated"})'),
        ("{{queue}} guaranteed", 'sum by (queue) (superpod_queue_gpus{kind="guaranteed"})'),
        ("{{queue}} borrowed", 'sum by (queue) (superpod_queue_gpus{kind="borrowed"})')]),
    ("Queue waiting time", "s", [
        ("p50", "histogram_quantile(0.5, sum by (le) (rate(superpod_queue_wait_seconds_bucket[5m])))"),
        ("p99", "histogram_quantile(0.99, sum by (le) (rate(superpod_queue_wait_seconds_bucket[5m])))")]),
    ("Placement latency", "s", [
        ("p50", "histogram_quantile(0.5, sum by (le) (rate(superpod_placement_seconds_bucket[5m])))"),
        ("p99", "histogram_quantile(0.99, sum by (le) (rate(superpod_placement_seconds_bucket[5m])))"),
        ("cycle p99", "histogram_quantile(0.99, sum by (le) (rate(superpod_cycle_seconds_bucket[5m])))")]),
    ("Jobs by phase", "short", [("{{phase}}", "sum by (phase) (superpod_jobs)")]),
    ("Gang restarts per hour", "short", [
        ("{{cause}}", "sum by (cause) (increase(superpod_gang_restarts_total[1h]))")]),
    ("Gangs preempted per hour", "short", [
        ("{{kind}}", "sum by (kind) (increase(superpod_preemptions_total[1h]))")]),
    ("MIG reconfigurations per hour", "short", [
        ("nodes", "sum(increase(superpod_mig_reconfigurations_total[1h]))")]),
    ("GPU-hours per tenant, last 24 h", "short", [
        ("{{queue}} {{namespace}}",
         "sum by (queue, namespace) (increase(superpod_gpu_seconds_total[24h])) / 3600")]),
    ("Operator errors per hour", "short", [
        ("cycle {{stage}}", "sum by (stage) (increase(superpod_cycle_errors_total[1h]))"),
        ("object {{stage}}", "sum by (stage) (increase(superpod_object_errors_total[1h]))")]),
]


def dashboard() -> dict:
    panels = []
    for index, (title, unit, queries) in enumerate(PANELS):
        panels.append({
            "id": index + 1, "type": "timeseries", "title": title,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + n), "expr": expr, "legendFormat": legend}
                        for n, (legend, expr) in enumerate(queries)],
        })
    return {
        "uid": "superpod-scheduler", "title": "superpod-scheduler", "schemaVersion": 39, "version": 1,
        "tags": ["superpod", "gpu", "scheduler"], "timezone": "utc", "refresh": "30s",
        "time": {"from": "now-24h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus"}]},
        "panels": panels,
    }
