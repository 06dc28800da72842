"""`superpod cluster up|down|status|wipe|env`: the local control plane."""

from __future__ import annotations

import json
import sys
import time

from superpod.hardware import nodes, presets
from superpod.k8s.client import load
from superpod.localcluster.cluster import ClusterError, LocalCluster


def register(sub) -> None:
    p = sub.add_parser("cluster", help="a real local Kubernetes control plane with KWOK for simulated GPU nodes")
    p.add_argument("action", choices=["up", "down", "status", "wipe", "kubeconfig"])
    p.add_argument("--preset", action="append", default=[],
                   help="with up: also create the nodes of this simulated SuperPOD preset (repeatable)")
    p.add_argument("--dra", action="store_true", help="with --preset: the nodes also publish their DRA "
                                                      "ResourceSlices (and the NVIDIA DeviceClasses)")
    p.set_defaults(func=run)


def run(args) -> int:
    cluster = LocalCluster()
    try:
        if args.action == "up":
            started = time.monotonic()
            cluster.up()
            print(f"cluster up in {time.monotonic() - started:.1f}s; logs in {cluster.logs}", file=sys.stderr)
            if args.preset:
                api = load(cluster.kubeconfig)
                for preset in args.preset:
                    objs = presets.preset_nodes(preset)
                    created = nodes.create_nodes(api, objs, dra=args.dra)
                    print(f"simulated {preset}: {len(objs)} nodes ({created} created)", file=sys.stderr)
            print(f"export KUBECONFIG={cluster.kubeconfig}")
        elif args.action == "down":
            cluster.down()
            print("cluster down", file=sys.stderr)
        elif args.action == "wipe":
            cluster.wipe()
            print(f"cluster stopped and {cluster.root} removed", file=sys.stderr)
        elif args.action == "kubeconfig":
            print(cluster.kubeconfig)
        else:
            status = cluster.status()
            print(json.dumps(status, indent=2))
            return 0 if cluster.healthy() else 1
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
