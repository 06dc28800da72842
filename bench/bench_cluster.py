"""Benchmark of the local control plane and the simulated SuperPOD: warm `up` time, time to create 1,000 and 10,000
simulated GPU nodes (until created, and until KWOK reports all Ready), and the control plane's RSS with them.

    .venv/bin/python bench/bench_cluster.py [--nodes 1000 10000]

Runs on its own ports and state folder, and wipes them afterwards. Prints figures and the machine."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

from kubernetes import client, watch

from superpod.hardware import nodes, presets
from superpod.k8s.client import load
from superpod.localcluster.cluster import COMPONENTS, LocalCluster, Ports, state_dir

PORTS = Ports(etcd=12579, etcd_peer=12580, apiserver=16643, controller_manager=20457, scheduler=20459, kwok=20447)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "?")
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem = int(next(ln.split()[1] for ln in meminfo if ln.startswith("MemTotal"))) / 1024 / 1024
    return f"{platform.node()}: {os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}"


def is_ready(node: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))


def wait_all_ready(core: client.CoreV1Api, selector: str, n: int) -> None:
    """Follow a watch (not repeated lists, which would load the API server being measured) until n nodes are Ready."""
    listed = core.list_node(label_selector=selector, _preload_content=False).json()
    ready = {i["metadata"]["name"] for i in listed["items"] if is_ready(i)}
    rv = listed["metadata"]["resourceVersion"]
    while len(ready) < n:
        for event in watch.Watch().stream(
            core.list_node, label_selector=selector, resource_version=rv, timeout_seconds=60
        ):
            node = event["raw_object"]
            rv = node["metadata"]["resourceVersion"]
            if is_ready(node):
                ready.add(node["metadata"]["name"])
            if len(ready) >= n:
                return


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--up-runs", type=int, default=3)
    args = ap.parse_args()
    print(f"machine: {machine()}")
    local = LocalCluster(state_dir().parent / "cluster-bench", PORTS)
    local.wipe()
    bin_dir = local.build(quiet=True)
    ups = []
    for _ in range(args.up_runs):
        started = time.monotonic()
        local.up(bin_dir)
        ups.append(time.monotonic() - started)
        local.down()
    print(f"warm `up` (binaries cached, until every component is healthy): median {statistics.median(ups):.1f}s "
          f"over {len(ups)} runs {[round(u, 1) for u in ups]}")
    local.up(bin_dir)
    try:
        api = load(local.kubeconfig, pool_size=32)
        core = client.CoreV1Api(api)
        for n in args.nodes:
            name = f"bench-{n}"
            objs = presets.preset_nodes("dgx-h100", nodes=n, cluster=name)
            started = time.monotonic()
            nodes.create_nodes(api, objs)
            created = time.monotonic() - started
            selector = f"{presets.SIM_LABEL}={name}"
            wait_all_ready(core, selector, n)
            ready = time.monotonic() - started
            print(f"{n:>6} simulated DGX H100 nodes ({n * 8} GPUs): created in {created:.1f}s "
                  f"({n / created:.0f} nodes/s), all Ready (KWOK) in {ready:.1f}s")
            if n != args.nodes[-1]:
                nodes.delete_cluster(api, name)
                while core.list_node(label_selector=selector, limit=1).items:
                    time.sleep(0.5)
        time.sleep(10)  # let the controllers settle before reading memory
        total = 0.0
        parts = []
        for comp in COMPONENTS:
            pid = local.pid(comp)
            mib = rss_mib(pid) if pid else 0.0
            total += mib
            parts.append(f"{comp} {mib:.0f}")
        print(f"control-plane RSS with {args.nodes[-1]} nodes: {total:.0f} MiB ({', '.join(parts)} MiB)")
    finally:
        local.wipe()


if __name__ == "__main__":
    main()
