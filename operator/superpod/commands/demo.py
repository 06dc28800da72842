"""`superpod demo`: the local control plane with simulated DGX H100, GB200 NVL72 and rental-pool nodes, the
operator (and the simulated MIG manager) running beside it, the sample jobs applied, and where each one landed or
why it waits. `superpod cluster down` stops everything."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kubernetes import client

from superpod.api.podgang import GANG_LABEL
from superpod.core.phases import FINISHED, Phase, Reason
from superpod.hardware import nodes, presets
from superpod.k8s.client import load
from superpod.localcluster.cluster import REPO, LocalCluster

PRESETS = ("dgx-h100", "gb200-nvl72", "rental-mixed")
SETTLED = (Phase.RUNNING, *FINISHED, Phase.INVALID)


def _settled(st: dict) -> bool:
    """Running or done, or waiting with a reason that is not a MIG reconfiguration still under way."""
    waiting = st.get("phase") == Phase.QUEUED and bool(st.get("message"))
    return st.get("phase") in SETTLED or (waiting and st.get("reason") != Reason.MIG_RECONFIGURING)


def _pod_gangs(api) -> None:
    """The gangs of other controllers' pods (samples/indexed-job-gang.yaml): how many of their pods are bound, where."""
    gangs: dict[str, list] = {}
    for pod in client.CoreV1Api(api).list_pod_for_all_namespaces(label_selector=GANG_LABEL).items:
        gangs.setdefault(f"{pod.metadata.namespace}/{pod.metadata.labels[GANG_LABEL]}", []).append(pod)
    for gang, pods in sorted(gangs.items()):
        nodes = sorted({p.spec.node_name for p in pods if p.spec.node_name})
        print(f"{gang:<22} pod gang: {sum(bool(p.spec.node_name) for p in pods)}/{len(pods)} pods bound"
              f"{' on ' + ', '.join(nodes[:4]) if nodes else ''}{' ...' if len(nodes) > 4 else ''}")


def register(sub) -> None:
    p = sub.add_parser("demo", help="local cluster + simulated SuperPOD + operator + sample jobs, and the outcome")
    p.add_argument("--wait", type=float, default=60, help="seconds to wait for the jobs to settle")
    p.set_defaults(func=run)


def run(args) -> int:
    local = LocalCluster()
    started = time.monotonic()
    local.up()
    bin_dir = local.build(quiet=True)
    print(f"control plane up in {time.monotonic() - started:.0f}s; export KUBECONFIG={local.kubeconfig}")
    api = load(local.kubeconfig)
    for preset in PRESETS:
        objs = presets.preset_nodes(preset)
        nodes.create_nodes(api, objs)
        gpus = sum(int(o["status"]["capacity"]["nvidia.com/gpu"]) for o in objs)
        print(f"simulated {preset}: {len(objs)} nodes, {gpus} GPUs")

    def kubectl(*a: str) -> str:
        cmd = [str(bin_dir / "kubectl"), f"--kubeconfig={local.kubeconfig}", *a]
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout

    kubectl("apply", "-f", str(REPO / "crds"))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    env = {**os.environ, "KUBECONFIG": str(local.kubeconfig)}
    if local.pid("operator") is None:
        local.start_process("operator", [sys.executable, "-m", "superpod.cli", "run", "--metrics-port", "18080"], env)
        print(f"operator started (logs {local.logs / 'operator.log'}, metrics http://127.0.0.1:18080/metrics)")
    if local.pid("mig-manager") is None:
        local.start_process("mig-manager", [sys.executable, "-m", "superpod.cli", "hardware", "mig-manager"], env)
        print("simulated MIG manager started (a stand-in for NVIDIA's, for the simulated nodes)")
    kubectl("apply", "-f", str(REPO / "samples"))
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + args.wait
    while True:
        items = custom.list_cluster_custom_object("superpod.dev", "v1alpha1", "trainingjobs")["items"]
        settled = [j for j in items if _settled(j.get("status") or {})]
        if len(settled) == len(items) or time.monotonic() > deadline:
            break
        time.sleep(1)
    print()
    for j in sorted(items, key=lambda j: j["metadata"]["name"]):
        st = j.get("status") or {}
        where = st.get("domain") or (f"{len(st['placement'])} nodes" if st.get("placement") else "")
        print(f"{j['metadata']['name']:<22} {st.get('phase') or 'Pending':<10} {st.get('gpus') or '':<16} {where}")
        if st.get("phase") in (Phase.QUEUED, Phase.INVALID, Phase.FAILED):
            print(f"{'':<22} why: {st.get('message')}")
    _pod_gangs(api)
    print("\nkubectl get tj -A; kubectl describe tj <name>; superpod top; `superpod cluster down` stops it all")
    return 0
