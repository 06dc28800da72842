"""`superpod hardware ...`: simulated GPU hardware for clusters without GPUs."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time

from superpod.hardware import nodes, presets
from superpod.hardware.compute_domains import SimComputeDomains
from superpod.hardware.mig_manager import SimMigManager
from superpod.k8s.client import load


def register(sub) -> None:
    hardware = sub.add_parser("hardware", help="simulated GPU hardware (KWOK nodes, MIG manager, device plugin) for "
                                               "clusters without GPUs")
    simsub = hardware.add_subparsers(dest="hardware_command", required=True)
    c = simsub.add_parser("cluster", help="create the nodes of a simulated SuperPOD preset")
    c.add_argument("--preset", required=True, choices=sorted(presets.PRESETS))
    c.add_argument("--nodes", type=int, help="number of nodes (default: the preset's size; up to 12,500)")
    c.add_argument("--name", help="name of this simulated cluster (default: the preset name)")
    c.add_argument("--dra", action="store_true", help="also publish each node's ResourceSlices and the DeviceClasses, "
                                                      "as NVIDIA's DRA driver would (resource.k8s.io/v1)")
    c.add_argument("--dra-only", action="store_true",
                   help="publish the GPUs through DRA only: the nodes advertise no nvidia.com/gpu, which the "
                        "DeviceClass gpu.nvidia.com serves from their devices (NVIDIA's DRA driver without the device "
                        "plugin)")
    c.add_argument("--kubeconfig")
    c.set_defaults(func=_cluster)
    d = simsub.add_parser("delete", help="delete exactly the nodes of one simulated cluster (and their "
                                         "ResourceSlices)")
    d.add_argument("name")
    d.add_argument("--kubeconfig")
    d.set_defaults(func=_delete)
    m = simsub.add_parser("mig-manager", help="play NVIDIA's MIG manager and device plugin for simulated nodes")
    m.add_argument("--namespace", default="superpod-system", help="namespace of the mig-parted ConfigMap")
    m.add_argument("--configmap", default="superpod-mig-parted-config")
    m.add_argument("--delay", type=float, default=2.0, help="seconds a reconfiguration takes")
    m.add_argument("--kubeconfig")
    m.set_defaults(func=_mig_manager)
    cd = simsub.add_parser("compute-domains", help="play the ComputeDomain controller of NVIDIA's DRA driver for "
                                                   "simulated nodes (serves the kind; makes each domain's channel "
                                                   "template; lists the nodes that joined)")
    cd.add_argument("--kubeconfig")
    cd.set_defaults(func=_compute_domains)
    plugin = simsub.add_parser("device-plugin", help="a SIMULATED NVIDIA device plugin for real kubelets (kind): "
                                                     "fake nvidia.com/gpu devices, no GPU touched")
    plugin.add_argument("--gpus", type=int, default=8, help="number of fake GPUs to advertise (default: 8)")
    plugin.add_argument("--node-name", help="node name in the device IDs (default: $NODE_NAME, else the hostname)")
    plugin.add_argument("--plugin-dir", help="the kubelet's device-plugin folder, with kubelet.sock "
                                         "(default: /var/lib/kubelet/device-plugins/)")
    plugin.add_argument("--resource", help="extended resource name to register (default: nvidia.com/gpu)")
    plugin.set_defaults(func=_device_plugin)
    ls = simsub.add_parser("list", help="simulated clusters and their node counts; the presets")
    ls.add_argument("--kubeconfig")
    ls.set_defaults(func=_list)


def _cluster(args) -> int:
    if args.nodes is not None and not 1 <= args.nodes <= 12_500:
        print("error: --nodes must be between 1 and 12500", file=sys.stderr)
        return 2
    objs = presets.preset_nodes(args.preset, args.nodes, args.name)
    started = time.monotonic()
    created = nodes.create_nodes(load(args.kubeconfig), objs, dra=args.dra, dra_only=args.dra_only)
    gpus = sum(int(o["status"]["capacity"]["nvidia.com/gpu"]) for o in objs)
    published = ", through DRA only" if args.dra_only else ", ResourceSlices published" if args.dra else ""
    print(f"{args.name or args.preset}: {len(objs)} nodes, {gpus} GPUs ({created} created{published}) "
          f"in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


def _delete(args) -> int:
    count = nodes.delete_cluster(load(args.kubeconfig), args.name)
    print(f"{args.name}: {count} nodes deleted", file=sys.stderr)
    return 0


def _mig_manager(args) -> int:
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = _stopped_by_signals()
    print("simulated MIG manager running (a stand-in for NVIDIA's, for simulated nodes)", file=sys.stderr)
    SimMigManager(load(args.kubeconfig), args.namespace, args.configmap, args.delay).run(stop)
    return 0


def _compute_domains(args) -> int:
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = _stopped_by_signals()
    print("simulated ComputeDomain controller running (a stand-in for NVIDIA's DRA driver)", file=sys.stderr)
    SimComputeDomains(load(args.kubeconfig)).run(stop)
    return 0


def _stopped_by_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _device_plugin(args) -> int:
    if args.gpus < 1:
        print("error: --gpus must be at least 1", file=sys.stderr)
        return 2
    from superpod.hardware import deviceplugin  # needs grpc: the `sim` extra

    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = _stopped_by_signals()
    plugin = deviceplugin.SimDevicePlugin(args.gpus, args.node_name, args.plugin_dir or deviceplugin.PLUGIN_DIR,
                                          args.resource or deviceplugin.RESOURCE)
    plugin.run(stop)
    return 0


def _list(args) -> int:
    out = {"clusters": nodes.list_clusters(load(args.kubeconfig)),
           "presets": {k: v[1] for k, v in presets.PRESETS.items()}}
    print(json.dumps(out, indent=2))
    return 0
