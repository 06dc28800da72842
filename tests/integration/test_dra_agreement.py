"""The DRA allocator (core/dra) agrees with kube-scheduler's, a node at a time: on random ResourceSlices,
DeviceClasses and ResourceClaims, it allocates exactly when kube-scheduler does, and what it allocates
kube-scheduler accepts as it is (tests/integration/dra_agreement.py says how). SUPERPOD_DRA_SEED picks the cases;
bench/bench_dra_agreement.py runs many more."""

from __future__ import annotations

import json
import os

from tests.integration.dra_agreement import Agreement, report

SEED = int(os.environ.get("SUPERPOD_DRA_SEED", "0"))
NODES, BATCHES = 10, 10  # 100 cases


def test_allocations_agree_with_kube_scheduler(cluster, namespace, tmp_path):
    agreement = Agreement(cluster.api, namespace, nodes=NODES)
    agreement.setup()
    try:
        for batch in range(BATCHES):
            agreement.run(SEED, batch)
    finally:
        agreement.teardown()
    outcome = agreement.outcome
    print(f"seed {SEED}: {report(outcome)}")
    dump = tmp_path / "dra-disagreements.json"
    dump.write_text(json.dumps(outcome.disagreements, indent=1))
    assert not outcome.disagreements, f"{report(outcome)}\nthe objects of each case: {dump}"
    assert outcome.both_allocated and outcome.neither, "the cases should include both outcomes"
