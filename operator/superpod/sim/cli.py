"""`superpod sim ...`: simulated GPU hardware for clusters without GPUs."""

from __future__ import annotations

import json
import sys
import time

from superpod.k8s.client import load
from superpod.sim import nodes, presets


def register(sub) -> None:
    sim = sub.add_parser("sim", help="simulated GPU hardware (KWOK nodes) for clusters without GPUs")
    simsub = sim.add_subparsers(dest="sim_command", required=True)
    c = simsub.add_parser("cluster", help="create the nodes of a simulated SuperPOD preset")
    c.add_argument("--preset", required=True, choices=sorted(presets.PRESETS))
    c.add_argument("--nodes", type=int, help="number of nodes (default: the preset's size; up to 12,500)")
    c.add_argument("--name", help="name of this simulated cluster (default: the preset name)")
    c.add_argument("--kubeconfig")
    c.set_defaults(func=_cluster)
    d = simsub.add_parser("delete", help="delete exactly the nodes of one simulated cluster")
    d.add_argument("name")
    d.add_argument("--kubeconfig")
    d.set_defaults(func=_delete)
    ls = simsub.add_parser("list", help="simulated clusters and their node counts; the presets")
    ls.add_argument("--kubeconfig")
    ls.set_defaults(func=_list)


def _cluster(args) -> int:
    if args.nodes is not None and not 1 <= args.nodes <= 12_500:
        print("error: --nodes must be between 1 and 12500", file=sys.stderr)
        return 2
    objs = presets.preset_nodes(args.preset, args.nodes, args.name)
    started = time.monotonic()
    created = nodes.create_nodes(load(args.kubeconfig), objs)
    gpus = sum(int(o["status"]["capacity"]["nvidia.com/gpu"]) for o in objs)
    print(f"{args.name or args.preset}: {len(objs)} nodes, {gpus} GPUs ({created} created) "
          f"in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


def _delete(args) -> int:
    count = nodes.delete_cluster(load(args.kubeconfig), args.name)
    print(f"{args.name}: {count} nodes deleted", file=sys.stderr)
    return 0


def _list(args) -> int:
    out = {"clusters": nodes.list_clusters(load(args.kubeconfig)),
           "presets": {k: v[1] for k, v in presets.PRESETS.items()}}
    print(json.dumps(out, indent=2))
    return 0
