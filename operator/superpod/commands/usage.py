"""`superpod usage`: GPU-hours per tenant over a time window, from the cluster's recorded usage — the GPUUsage
records of ended attempts and pods, plus the attempts running now (from their pods) and the pods billed on their own
that hold GPUs now (controller/podbills.py) unless --recorded-only. What a provider turns into invoices."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import sys
import time
from dataclasses import replace
from typing import Any

from superpod.api.convert import duration, record_from_k8s, usage_name
from superpod.api.resources import ConvertError
from superpod.api.times import rfc3339, timestamp
from superpod.controller.jobs import JobReader
from superpod.controller.metering import attempt_runs
from superpod.controller.podbills import PodBills
from superpod.controller.podgangs import PodGangs
from superpod.controller.queues import QueueBook
from superpod.controller.state import ClusterState
from superpod.core.accounting import gpu_seconds
from superpod.core.usage import COLUMNS, Record, summarize
from superpod.k8s.api import GPUQUEUES, GPUUSAGES, PODS, TRAININGJOBS, ClusterAPI


def when(text: str, now: float) -> float:
    """A point in time: an RFC 3339 time, a date (UTC midnight), or a duration before now (720h)."""
    try:
        return now - duration(text)
    except ValueError:
        pass
    try:
        return timestamp(text if "T" in text else f"{text}T00:00:00Z")
    except ValueError:
        raise ValueError(f"not a time: {text!r} (an RFC 3339 time, a date like 2026-11-01, or a duration ago like "
                         "720h)") from None


async def gather(api: ClusterAPI, now: float, running: bool = True) -> tuple[list[Record], list[str]]:
    """The records, plus one for each running attempt up to `now` (unless not `running`), and the records that
    could not be read."""
    objs, _ = await api.list(GPUUSAGES)
    records, problems = [], []
    for obj in objs:
        try:
            records.append(record_from_k8s(obj))
        except ConvertError as e:
            problems.append(str(e))
    if running:
        records += await _running(api, now, {obj["metadata"]["name"] for obj in objs})
    return records, problems


async def _running(api: ClusterAPI, now: float, recorded: set[str]) -> list[Record]:
    state = ClusterState()
    for kind in (GPUQUEUES, GPUUSAGES, TRAININGJOBS, PODS):  # the records: where an orphaned pod's billing starts
        items, version = await api.list(kind)
        state.resync(kind, items, version, now)
    reader, book = JobReader(), QueueBook(state, half_life=0)
    reader.read(state)
    bills = PodBills(book)
    bills.update(state, reader, PodGangs(), pending=False)
    out = [replace(bill.record(), end=now if bill.run.end is None else bill.run.end, gpu_seconds=bill.seconds(now))
           for bills_of in (bills.live.values(), bills.ended.values()) for bill in bills_of
           if bill.run.start is not None and bill.seconds(now) > 0]
    for view in reader.active.values():
        status = view.status
        runs = [run for run in attempt_runs(state, view, status.attempt) if run.start is not None]
        if status.accountedAttempts >= status.attempt or not runs or usage_name(view.uid, status.attempt) in recorded:
            continue
        queue, namespace, flavor, service_class = book.labels(view)
        out.append(Record(queue, namespace, view.obj["metadata"]["name"], flavor, service_class, status.attempt,
                          view.units * view.replicas, min(run.start for run in runs), now,
                          gpu_seconds(runs, view.units, now)))
    return out


def table(records: list[Record], since: float, until: float, by: str) -> list[dict[str, Any]]:
    rows = []
    for key, (seconds, attempts) in sorted(summarize(((r, r.within(since, until)) for r in records), by).items()):
        row: dict[str, Any] = dict(zip(COLUMNS[by], key, strict=True))
        rows.append({**row, "gpuHours": round(seconds / 3600, 4), "gpuSeconds": round(seconds, 3),
                     "attempts": attempts})
    return rows


def render(rows: list[dict[str, Any]], output: str, since: float, until: float) -> str:
    if output == "json":
        return json.dumps({"since": rfc3339(since), "until": rfc3339(until), "rows": rows}, indent=2)
    if not rows:
        return "" if output == "csv" else f"no usage from {rfc3339(since)} to {rfc3339(until)}"
    if output == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().rstrip("\n")
    heads = [name.upper().replace("_", " ") for name in rows[0]]
    heads[heads.index("GPUHOURS")], heads[heads.index("GPUSECONDS")] = "GPU-HOURS", "GPU-SECONDS"
    cells = [[f"{v:,.2f}" if k == "gpuHours" else f"{v:,.0f}" if k == "gpuSeconds" else str(v or "-")
              for k, v in row.items()] for row in rows]
    total = sum(row["gpuHours"] for row in rows)
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cell, widths, strict=True)) for cell in cells]
    lines.append(f"{total:,.2f} GPU-hours from {rfc3339(since)} to {rfc3339(until)}")
    return "\n".join(lines)


def register(sub: Any) -> None:
    p = sub.add_parser("usage", help="GPU-hours per queue, namespace, job or flavor over a time window")
    p.add_argument("--since", default="1970-01-01", help="start: RFC 3339, a date (2026-11-01), or a duration ago "
                   "(720h); default: all time")
    p.add_argument("--until", default=None, help="end (same forms); default: now")
    p.add_argument("--by", choices=sorted(COLUMNS), default="queue")
    p.add_argument("-o", "--output", choices=("table", "json", "csv"), default="table")
    p.add_argument("--recorded-only", action="store_true",
                   help="only ended attempts (GPUUsage records), not the attempts running now")
    p.add_argument("--kubeconfig", default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from superpod.k8s.client import load
    from superpod.k8s.kube import KubeAPI

    now = time.time()
    try:
        since = when(args.since, now)
        until = when(args.until, now) if args.until else now
    except ValueError as e:
        print(f"superpod usage: {e}", file=sys.stderr)
        return 2
    records, problems = asyncio.run(gather(KubeAPI(load(args.kubeconfig), workers=4), now, not args.recorded_only))
    for problem in problems:
        print(f"superpod usage: left out: {problem}", file=sys.stderr)
    print(render(table(records, since, until, args.by), args.output, since, until))
    return 0
