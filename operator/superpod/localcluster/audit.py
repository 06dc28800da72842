"""Reading the local API server's audit log (logs/audit.log): every write, with the writer's user agent and the
server's own times. The operator identifies each replica in its user agent (`superpod-scheduler/<identity>`), so
the log shows which replica held the Lease when, and whether any other replica wrote meanwhile."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from superpod.api.times import timestamp
from superpod.k8s.kube import AGENT


@dataclass(frozen=True)
class Write:
    time: float  # when the server received it
    replica: str  # identity from the user agent
    verb: str
    resource: str  # e.g. pods, trainingjobs/status
    name: str
    code: int


def operator_writes(path: Path) -> list[Write]:
    """Successful writes by operator replicas, in the order the server received them."""
    out = []
    for line in path.read_text().splitlines() if path.exists() else ():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        agent = ev.get("userAgent") or ""
        code = (ev.get("responseStatus") or {}).get("code") or 0
        if not agent.startswith(AGENT) or not 200 <= code < 300:
            continue
        ref = ev.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        out.append(Write(timestamp(ev["requestReceivedTimestamp"]), agent[len(AGENT):].split(" ")[0], ev["verb"],
                         resource, f"{ref.get('namespace', '')}/{ref.get('name', '')}", code))
    return sorted(out, key=lambda w: w.time)


def second_writers(writes: list[Write], lease: str = "superpod-scheduler") -> list[Write]:
    """Writes by a replica while another held the Lease: the holder is the replica whose update of the Lease
    succeeded last (a replica writes the Lease only to take or renew it)."""
    holder, out = None, []
    for w in writes:
        if w.resource == "leases" and w.name.endswith(f"/{lease}"):
            holder = w.replica
        elif holder is not None and w.replica != holder:
            out.append(w)
    return out
