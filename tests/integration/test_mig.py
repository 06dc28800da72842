"""Dynamic MIG end to end: a job asking for 3g.40gb slices on MIG-disabled, opted-in idle nodes; the operator plans
new geometries, writes the mig-parted ConfigMap and the nvidia.com/mig.config label; the simulated MIG manager
applies them; the job runs. A failed reconfiguration marks the node and the job is planned elsewhere."""

from __future__ import annotations

from collections import Counter

import yaml
from kubernetes import client

from tests.integration.operator_env import sim_cluster, training_job
from tests.integration.wait import wait_for

H100 = "NVIDIA-H100-80GB-HBM3"


def opted_in_h100(objs: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objs if o["metadata"]["labels"].get("superpod.dev/mig-dynamic") == "true"
            and o["metadata"]["labels"]["nvidia.com/gpu.product"] == H100]


def mig_job(name: str, sim: str, replicas: int) -> dict:
    body = training_job(name, sim, replicas, mig="3g.40gb")
    body["spec"]["resources"]["gpuProduct"] = H100
    return body


def test_mig_job_repartitions_idle_opted_in_nodes_then_runs(cluster, operator, mig_manager, jobs):
    sim, objs = sim_cluster(cluster.api, "rental-mixed", 12)
    candidates = opted_in_h100(objs)
    jobs.create(mig_job("slices", sim, 4))
    jobs.wait_event("slices", "MigReconfiguring", timeout=30)
    st = jobs.wait_phase("slices", "Running", 60)
    core = client.CoreV1Api(cluster.api)
    used = {p.spec.node_name for p in jobs.pods("slices")}
    assert used <= set(candidates), "only opted-in H100 nodes were repartitioned and used"
    for name in used:
        node = core.read_node(name)
        assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
        config = node.metadata.labels["nvidia.com/mig.config"]
        assert int(node.status.allocatable["nvidia.com/mig-3g.40gb"]) >= 2
    cm = core.read_namespaced_config_map("superpod-mig-parted-config", "superpod-system")
    doc = yaml.safe_load(cm.data["config.yaml"])
    assert doc["version"] == "v1" and config in doc["mig-configs"]
    entries = doc["mig-configs"][config]
    assert any(e["mig-enabled"] and e["mig-devices"].get("3g.40gb") for e in entries)
    untouched = [o["metadata"]["name"] for o in objs if o["metadata"]["name"] not in candidates]
    assert {core.read_node(n).metadata.labels["nvidia.com/mig.config"] for n in untouched} == {"all-disabled"}
    assert st["gpus"] == "4 x mig-3g.40gb"


def test_failed_reconfiguration_marks_the_node_and_replans_elsewhere(cluster, operator, mig_manager, jobs):
    sim, objs = sim_cluster(cluster.api, "rental-mixed", 12)
    candidates = opted_in_h100(objs)
    core = client.CoreV1Api(cluster.api)
    for name in candidates:
        core.patch_node(name, {"metadata": {"annotations": {"sim.superpod.dev/mig-fail": "true"}}})
    jobs.create(mig_job("retry", sim, 2))

    def requested():  # the first node the operator asked to repartition will fail; let the others succeed
        return [n for n in candidates if "superpod.dev/mig-expect" in (core.read_node(n).metadata.annotations or {})]
    victim = wait_for(requested, 30, "a reconfiguration request")[0]
    for name in set(candidates) - {victim}:
        core.patch_node(name, {"metadata": {"annotations": {"sim.superpod.dev/mig-fail": None}}})
    jobs.wait_event("retry", "MigFailed", "the MIG manager reported failed", timeout=60)
    assert "superpod.dev/mig-failed" in core.read_node(victim).metadata.annotations
    jobs.wait_phase("retry", "Running", 90)
    assert victim not in {p.spec.node_name for p in jobs.pods("retry")}


def test_a_node_that_publishes_its_devices_publishes_its_mig_devices_once_repartitioned(cluster, operator,
                                                                                       mig_manager, jobs, namespace):
    """With DRA, the simulated MIG manager republishes a repartitioned node's GPU slice as NVIDIA's driver does:
    MIG devices (by profile, with their memory slices) in place of their GPU, the pool's generation one up; and
    kube-scheduler allocates a claim for such a device on that node."""
    sim, objs = sim_cluster(cluster.api, "rental-mixed", 12, dra=True)
    jobs.create(mig_job("sliced", sim, 2))
    jobs.wait_phase("sliced", "Running", 60)
    custom, core = client.CustomObjectsApi(cluster.api), client.CoreV1Api(cluster.api)
    used = sorted({p.spec.node_name for p in jobs.pods("sliced")})
    for name in used:
        served = custom.get_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", f"{name}-gpu.nvidia.com")
        kinds = Counter(d["attributes"]["type"]["string"] for d in served["spec"]["devices"])
        profiles = Counter(d["attributes"]["profile"]["string"] for d in served["spec"]["devices"]
                           if d["attributes"]["type"]["string"] == "mig")
        allocatable = core.read_node(name).status.allocatable
        print(f"\n{name}: pool generation {served['spec']['pool']['generation']}, devices {dict(kinds)}, "
              f"MIG {dict(profiles)}")
        assert served["spec"]["pool"]["generation"] >= 2
        assert kinds["gpu"] == int(allocatable.get("nvidia.com/gpu", 0))
        assert profiles == {p.removeprefix("nvidia.com/mig-"): int(n) for p, n in allocatable.items()
                            if p.startswith("nvidia.com/mig-")}
    selector = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"}}
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "slice"},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": {
            "deviceClassName": "mig.nvidia.com", "selectors": [selector]}}]}}})
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": used[0]}, "terminationGracePeriodSeconds": 0,
                 "resourceClaims": [{"name": "mig", "resourceClaimName": "slice"}],
                 "containers": [{"name": "main", "image": "probe", "resources": {"claims": [{"name": "mig"}]}}]}})
    wait_for(lambda: core.read_namespaced_pod("probe", namespace).spec.node_name, 60, "the probe bound")
    results = custom.get_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims", "slice")[
        "status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"].split("-mig-")[1].split("-")[0]) for r in results] == [(used[0], "3g40gb")]
