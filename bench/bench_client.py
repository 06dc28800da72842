"""What a write costs the operator's own process: client CPU milliseconds per create, the way KubeAPI sends writes
(from the event loop, aiohttp: k8s/transport.py) beside the way it sent them before (urllib3 on 32 worker threads,
still its path for the pages of lists), same API server, same bodies, 64 writes in flight. Medians of interleaved
rounds.

    .venv/bin/python bench/bench_client.py [--writes 2000] [--repeat 3]

The pods are bound to a node that does not exist (no kubelet acts on them). Runs on its own ports and state folder
and wipes them afterwards."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from kubernetes import client

from superpod.k8s.api import PODS
from superpod.k8s.client import load
from superpod.k8s.kube import KubeAPI, _path
from superpod.localcluster.cluster import LocalCluster, Ports, state_dir

sys.path.insert(0, str(Path(__file__).parent))
from bench_cluster import machine  # noqa: E402
from bench_writes import pod  # noqa: E402

PORTS = Ports(etcd=13879, etcd_peer=13880, apiserver=17943, controller_manager=21757, scheduler=21759, kwok=21747)
WORKERS = 32
IN_FLIGHT = 64  # as the applier's concurrency


async def writes(api: KubeAPI, ns: str, count: int, threads: bool) -> None:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int) -> None:
        body = {**pod(f"p{i}", "nowhere"), "apiVersion": "v1", "kind": "Pod"}
        body["metadata"]["namespace"] = ns
        async with gate:
            if threads:
                await api._run(api._call, "POST", _path(PODS, ns), body)
            else:
                await api.create(PODS, body)
    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await api.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    local = LocalCluster(state_dir().parent / "cluster-bench-client", PORTS)
    local.wipe()
    local.up(local.build(quiet=True))
    try:
        admin = load(local.kubeconfig, pool_size=WORKERS + 4)
        per_write: dict[str, list[float]] = {"threads (urllib3)": [], "loop (aiohttp)": []}
        for round_ in range(1, args.repeat + 1):
            for name, threads in (("threads (urllib3)", True), ("loop (aiohttp)", False)):
                ns = f"{'threads' if threads else 'loop'}-{round_}"
                client.CoreV1Api(admin).create_namespace({"metadata": {"name": ns}})
                api = KubeAPI(admin, workers=WORKERS)
                cpu, wall = time.process_time(), time.monotonic()
                asyncio.run(writes(api, ns, args.writes, threads))
                used, took = time.process_time() - cpu, time.monotonic() - wall
                per_write[name].append(used * 1000 / args.writes)
                print(f"round {round_}: {name}: {args.writes} pod creates in {took:.1f}s, client CPU {used:.2f}s "
                      f"({per_write[name][-1]:.2f} ms a write)", flush=True)
        base = statistics.median(per_write["threads (urllib3)"])
        for name, values in per_write.items():
            print(f"median client CPU per write, {name}: {statistics.median(values):.2f} ms "
                  f"({statistics.median(values) / base:.2f} of the threads')")
    finally:
        local.wipe()


if __name__ == "__main__":
    main()
