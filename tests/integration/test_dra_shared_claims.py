"""A ResourceClaim a gang's pods share by name, on the real control plane: the operator allocates it once, on the one
node the whole gang goes to (a node's own devices serve it), and reserves it for every pod of the gang; a gang that
shares a claim already allocated goes to the node it is allocated on and is added to its consumers; a TrainingJob's
shared claim is allocated by kube-scheduler on the node the operator chose for all its replicas."""

from __future__ import annotations

from kubernetes import client

from superpod.api.podgang import GANG_SIZE
from superpod.hardware.presets import SIM_LABEL
from tests.integration.operator_env import sim_cluster
from tests.integration.test_dra_gangs import GROUP, VERSION, claim_template, claiming_job
from tests.integration.test_pod_gangs import SCHEDULER, Pods, indexed_job
from tests.integration.wait import wait_for

H100 = "NVIDIA H100 80GB HBM3"


def shared_claim(custom: client.CustomObjectsApi, namespace: str, name: str, count: int) -> None:
    request = {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}}})


def sharing_pods(gang: str, size: int, sim: str, claim: str, template: str | None = None,
                 node: str | None = None) -> dict:
    claims = [{"name": "shared", "resourceClaimName": claim}]
    if template:
        claims.append({"name": "own", "resourceClaimTemplateName": template})
    selector = {SIM_LABEL: sim, **({"kubernetes.io/hostname": node} if node else {})}
    return {"metadata": {"labels": {"superpod.dev/gang": gang}, "annotations": {GANG_SIZE: str(size)}},
            "spec": {"schedulerName": SCHEDULER, "restartPolicy": "Never", "nodeSelector": selector,
                     "resourceClaims": claims,
                     "containers": [{"name": "main", "image": "trainer",
                                     "resources": {"claims": [{"name": c["name"]} for c in claims]}}]}}


def served(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name)


def test_a_claim_a_gang_shares_is_allocated_once_on_its_one_node_and_a_later_gang_goes_where_it_is(
        cluster, operator, namespace):
    sim, objs = sim_cluster(cluster.api, "dgx-h100", 4, own_leaves=True, dra=True, nodes_per_unit=2)
    custom, pods = client.CustomObjectsApi(cluster.api), Pods(cluster.api, namespace)
    template = claim_template(custom, namespace, H100, 2)
    shared_claim(custom, namespace, "together", 2)
    last = objs[-1]["metadata"]["name"]  # (the node a gang free to go anywhere would be placed on last)
    pods.batch.create_namespaced_job(namespace, indexed_job("three", 3, sharing_pods("three", 3, sim, "together",
                                                                                     template, node=last)))
    bound = wait_for(lambda: len(b := pods.bound("job-name=three")) == 3 and b, 120, "3 pods of three bound")
    [node] = set(bound.values())
    assert node == last
    claim = served(custom, namespace, "together")
    results = claim["status"]["allocation"]["devices"]["results"]
    uids = {p.metadata.name: p.metadata.uid for p in pods.of("job-name=three")}
    print(f"\nIndexed Job three (3 pods x 2 H100s of their own, sharing a claim of 2): all on {node}; shared claim "
          f"on {sorted(r['device'] for r in results)}, reserved for {len(claim['status']['reservedFor'])} pods")
    assert {r["pool"] for r in results} == {node} and len(results) == 2, "allocated once, on the gang's node"
    assert sorted(c["uid"] for c in claim["status"]["reservedFor"]) == sorted(uids.values()), "reserved for all 3"
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    own = {(r["pool"], r["device"]) for p in pods.of("job-name=three") for s in p.status.resource_claim_statuses
           if s.name == "own" for r in served(custom, namespace, s.resource_claim_name)["status"]["allocation"][
               "devices"]["results"]}
    assert len(own) == 6 and not own & {(r["pool"], r["device"]) for r in results}, "no device given twice"
    wait_for(lambda: all(p.status.phase == "Running" for p in pods.of("job-name=three")), 60, "all 3 Running")

    # A second gang sharing the claim, free to go anywhere, goes to the node where it is allocated.
    others = [o["metadata"]["name"] for o in objs if o["metadata"]["name"] != node]
    pods.batch.create_namespaced_job(namespace, indexed_job("two", 2, sharing_pods("two", 2, sim, "together")))
    later = wait_for(lambda: len(b := pods.bound("job-name=two")) == 2 and b, 120, "2 pods of two bound")
    print(f"Indexed Job two (2 pods sharing it, no node asked): bound {later}; {len(others)} other nodes were free")
    assert set(later.values()) == {node}, "where the claim is allocated"
    claim = served(custom, namespace, "together")
    assert claim["status"]["allocation"]["devices"]["results"] == results, "its allocation untouched"
    assert len(claim["status"]["reservedFor"]) == 5, "the later gang's pods added to its consumers"
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"], "still protected"
    wait_for(lambda: all(p.status.phase == "Running" for p in pods.of("job-name=two")), 60, "both Running")


def test_a_gang_whose_shared_claim_is_allocated_on_a_full_node_waits_and_says_why(cluster, operator, namespace):
    sim, objs = sim_cluster(cluster.api, "dgx-h100", 2, own_leaves=True, dra=True, nodes_per_unit=2)
    custom, pods = client.CustomObjectsApi(cluster.api), Pods(cluster.api, namespace)
    first = objs[1]["metadata"]["name"]
    eight = claim_template(custom, namespace, H100, 6)
    shared_claim(custom, namespace, "pinned", 2)
    pods.batch.create_namespaced_job(namespace, indexed_job("one", 1, sharing_pods("one", 1, sim, "pinned", eight,
                                                                                   node=first)))
    wait_for(lambda: pods.bound("job-name=one"), 120, "one bound")
    pods.batch.create_namespaced_job(namespace, indexed_job("more", 1, sharing_pods("more", 1, sim, "pinned", eight)))
    waiting = wait_for(lambda: (p := pods.of("job-name=more")) and p[0].metadata.name, 60, "the pod of more")
    said = pods.wait_said(waiting, "not where the ResourceClaim its pods share is allocated")
    print(f"\n{waiting}: {said}")
    assert not pods.bound("job-name=more")


def test_a_trainingjob_sharing_a_claim_runs_all_its_replicas_on_one_node_kube_scheduler_allocates_it_there(
        cluster, operator, jobs, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4, own_leaves=True, dra=True, nodes_per_unit=2)
    custom, pods = client.CustomObjectsApi(cluster.api), Pods(cluster.api, namespace)
    template = claim_template(custom, namespace, H100, 2)
    shared_claim(custom, namespace, "job-shared", 2)
    job = claiming_job("sharing", sim, 3, template)
    job["spec"]["template"]["spec"]["resourceClaims"].append({"name": "shared", "resourceClaimName": "job-shared"})
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"].append({"name": "shared"})
    jobs.create(job)
    status = jobs.wait_phase("sharing", "Running", 120)
    bound = {p.metadata.name: p.spec.node_name for p in pods.of("superpod.dev/job-name=sharing")}
    claim = served(custom, namespace, "job-shared")
    print(f"\nTrainingJob sharing (3 x 2 H100s each, sharing a claim of 2): placement {status['placement']}, "
          f"bound {bound}, shared claim reserved for {len(claim['status']['reservedFor'])}")
    assert len(set(bound.values())) == 1 and set(bound.values()) == set(status["placement"]), "one node, as placed"
    assert {r["pool"] for r in claim["status"]["allocation"]["devices"]["results"]} == set(bound.values())
    uids = {p.metadata.uid for p in pods.of("superpod.dev/job-name=sharing")}
    assert {c["uid"] for c in claim["status"]["reservedFor"]} == uids
