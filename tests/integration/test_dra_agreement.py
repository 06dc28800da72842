"""The DRA allocator (core/dra) agrees with kube-scheduler's, a node at a time: on random ResourceSlices,
DeviceClasses and ResourceClaims, it allocates exactly when kube-scheduler does, and what it allocates
kube-scheduler accepts as it is (tests/integration/dra_agreement.py says how). SUPERPOD_DRA_SEED picks the cases;
bench/bench_dra_agreement.py runs many more."""

from __future__ import annotations

import json
import os

from kubernetes import client

from tests.integration.dra_agreement import (
    GROUP,
    PROBE_NODE,
    VERSION,
    Agreement,
    blocker_class,
    blocker_spec,
    pod,
    report,
    slices_for,
)
from tests.integration.wait import wait_for

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


def test_claims_are_made_from_templates_and_allocated(cluster, namespace):
    """Beside the allocator, what pods with templates need: kube-controller-manager's resource-claim controller makes
    the pod's claim from its ResourceClaimTemplate, and kube-scheduler allocates it."""
    custom, core = client.CustomObjectsApi(cluster.api), client.CoreV1Api(cluster.api)
    agreement = Agreement(cluster.api, namespace, nodes=0)  # its probe node only
    agreement.setup()
    node, batch = PROBE_NODE, f"{namespace}-template"
    try:
        for body in [blocker_class(batch), *slices_for(node, batch, [{
                "driver": "gpu.nvidia.com", "slices": [[{"attributes": {"model": "A"}, "capacity": {}}]], "count": 1,
                "placement": "name", "stale": False, "duplicate": False, "split": False, "obsolete": False}])]:
            plural = "deviceclasses" if body["kind"] == "DeviceClass" else "resourceslices"
            custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
        spec = blocker_spec(batch, [("gpu.nvidia.com", "p0-d0")])
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaimtemplates", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpu"},
            "spec": {"spec": spec}})
        body = pod("templated", node, batch, [])
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
        body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        core.create_namespaced_pod(namespace, body)
        bound = wait_for(lambda: core.read_namespaced_pod("templated", namespace).spec.node_name, 60, "the pod bound")
        statuses = core.read_namespaced_pod("templated", namespace).status.resource_claim_statuses
        made = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims",
                                                   statuses[0].resource_claim_name)
        assert bound == node
        assert made["status"]["allocation"]["devices"]["results"][0]["device"] == "d0"
    finally:
        agreement.teardown()
