"""A multi-node GB200 gang on the real control plane: the operator creates the job's ComputeDomain, the driver's
controller (a stand-in: hardware/compute_domains.py) makes its channel template, and the gang is placed across trays
of one NVLink clique, each pod's IMEX channel allocated by kube-scheduler on the tray the operator chose."""

from __future__ import annotations

from kubernetes import client

from superpod.api.compute_domain import CHANNEL_CLAIM, channel_template
from tests.integration.operator_env import sim_cluster, training_job
from tests.integration.wait import wait_for

CLIQUE, DOMAINS = "nvidia.com/gpu.clique", ("resource.nvidia.com", "v1beta1")


def tray_job(name: str, sim: str, replicas: int, **spec) -> dict:
    """A TrainingJob whose replicas each claim a whole tray's 4 GPUs through DRA (template `tray`)."""
    body = training_job(name, sim, replicas, **spec)
    body["spec"]["resources"] = {}
    pod = body["spec"]["template"]["spec"]
    pod["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "tray"}]
    pod["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return body


def test_a_gb200_gang_gets_its_compute_domain_and_stays_in_one_clique(cluster, operator, compute_domains, jobs,
                                                                      namespace):
    # Two racks of 3 trays (4 GPUs each) under one leaf. A one-tray job takes a tray of the first rack: then only
    # the second rack's clique holds the 3-tray gang whole, while its leaf (5 free trays) would hold it across both.
    sim, objs = sim_cluster(cluster.api, "gb200-nvl72", 6, own_leaves=True, dra=True, trays_per_rack=3)
    clique_of = {o["metadata"]["name"]: o["metadata"]["labels"][CLIQUE] for o in objs}
    assert len(set(clique_of.values())) == 2 and len({o["metadata"]["labels"]["superpod.dev/leaf"] for o in objs}) == 1
    custom = client.CustomObjectsApi(cluster.api)
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "tray"},
        "spec": {"spec": {"devices": {"requests": [request]}}}})
    taken = sorted(clique_of)[0]
    one = tray_job("one", sim, 1)
    one["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] = taken
    jobs.create(one)
    jobs.wait_phase("one", "Running")

    job = jobs.create(tray_job("nvl", sim, 3, topology={"required": "nvlink"}, computeDomain={}))
    jobs.wait_phase("nvl", "Running", timeout=90)
    domain = custom.get_namespaced_custom_object(*DOMAINS, namespace, "computedomains", "nvl")
    assert [o["uid"] for o in domain["metadata"]["ownerReferences"]] == [job["metadata"]["uid"]]
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == channel_template(job)
    placed = {p.metadata.name: (p.spec.node_name, p.metadata.uid, p) for p in jobs.pods("nvl")}
    nodes = sorted(node for node, _, _ in placed.values())
    print(f"\nGB200 gang nvl (3 trays x 4 GPUs, ComputeDomain, nvlink required) with {taken} taken: "
          f"{', '.join(f'{n} ({clique_of[n]})' for n in nodes)}")
    assert len(set(nodes)) == 3 and len({clique_of[n] for n in nodes}) == 1, "three trays of one clique"
    assert clique_of[taken] not in {clique_of[n] for n in nodes}, "the rack with room for all three"
    for name, (node, uid, pod) in sorted(placed.items()):
        made = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses or ()}
        claim = custom.get_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims",
                                                    made[CHANNEL_CLAIM])
        results = claim["status"]["allocation"]["devices"]["results"]
        print(f"  {name} -> {node}: {made}: {[(r['driver'], r['device']) for r in results]}")
        assert [(r["driver"], r["pool"], r["device"]) for r in results] == [
            ("compute-domain.nvidia.com", node, "channel-0")], "the IMEX channel of its own tray"
        assert [(r["name"], r["uid"]) for r in claim["status"]["reservedFor"]] == [(name, uid)]
        gpus = custom.get_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims", made["gpus"])
        assert {(r["driver"], r["pool"]) for r in gpus["status"]["allocation"]["devices"]["results"]} == {
            ("gpu.nvidia.com", node)} and len(gpus["status"]["allocation"]["devices"]["results"]) == 4

    def joined():
        status = custom.get_namespaced_custom_object(*DOMAINS, namespace, "computedomains", "nvl").get("status") or {}
        return status.get("status") == "Ready" and status["nodes"]
    members = wait_for(joined, 30, "the ComputeDomain's nodes")
    assert sorted(m["name"] for m in members) == nodes and {m["cliqueID"] for m in members} == {clique_of[nodes[0]]}

    jobs.custom.delete_namespaced_custom_object("superpod.dev", "v1alpha1", namespace, "trainingjobs", "nvl")

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(*DOMAINS, namespace, "computedomains", "nvl")
        except client.ApiException as e:
            return e.status == 404
        return False
    wait_for(gone, 60, "the ComputeDomain gone with its job")
