"""The DRA allocator against kube-scheduler on many random cases (the agreement test, tests/integration/
test_dra_agreement.py, runs 100): prints the counts, the disagreements, and writes each disagreeing case's objects.

    .venv/bin/python bench/bench_dra_agreement.py [--cases 1000] [--seed 0] [--nodes 12] [--out disagreements.json]

Uses the cluster KUBECONFIG names, else starts the local control plane on its own ports and state folder and wipes
it afterwards."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.dra_agreement import Agreement, report  # noqa: E402

from superpod.k8s.client import load  # noqa: E402
from superpod.localcluster.cluster import LocalCluster, Ports, state_dir  # noqa: E402

PORTS = Ports(etcd=13579, etcd_peer=13580, apiserver=17643, controller_manager=21457, scheduler=21459, kwok=21447)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=12, help="node pairs: cases per batch")
    parser.add_argument("--out", default="dra-disagreements.json")
    args = parser.parse_args()
    local = None
    if os.environ.get("KUBECONFIG"):
        api = load(Path(os.environ["KUBECONFIG"]))
    else:
        local = LocalCluster(state_dir().parent / "cluster-bench-dra", PORTS)
        local.wipe()
        local.up(local.build(quiet=True))
        api = load(local.kubeconfig)
    namespace = f"dra-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    agreement = Agreement(api, namespace, nodes=args.nodes)
    started = time.perf_counter()
    try:
        agreement.setup()
        for batch in range(-(-args.cases // args.nodes)):
            agreement.run(args.seed, batch)
    finally:
        agreement.teardown()
        client.CoreV1Api(api).delete_namespace(namespace)
        if local is not None:
            local.wipe()
    print(f"seed {args.seed}, {time.perf_counter() - started:.0f} s: {report(agreement.outcome)}")
    Path(args.out).write_text(json.dumps(agreement.outcome.disagreements, indent=1))


if __name__ == "__main__":
    main()
