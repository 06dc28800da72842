"""The Helm chart on the real API server with RBAC on: lint and template clean; install (CRDs established, the
Deployment's pods run as simulated pods); the operator, authenticated as the chart's ServiceAccount, runs a gang
scenario (the ClusterRole is sufficient) and is refused what it must not do; upgrade and uninstall."""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.operator_env import (
    REPO,
    Jobs,
    OperatorProcess,
    once_allowed,
    service_account_client,
    sim_cluster,
    training_job,
)
from tests.integration.wait import wait_for

CHART = str(REPO / "charts" / "superpod-scheduler")
NS = "superpod-helm"
RELEASE = "superpod-scheduler"


def test_lint_and_template_are_clean(cluster, built_tools):
    lint = cluster.helm("lint", CHART, "--strict")
    assert "0 chart(s) failed" in lint.stdout
    out = cluster.helm("template", RELEASE, CHART, "-n", NS, "--kube-version", "1.37.2",
                       "--set", "topology.create=true", "--set", "metrics.serviceMonitor.enabled=true",
                       "--set", "grafana.dashboard.enabled=true").stdout
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out) if d)
    assert kinds == sorted(["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
                            "Deployment", "ClusterTopology", "ServiceMonitor", "ConfigMap", "ClusterRole",
                            "ClusterRole", "ClusterRole", "ValidatingAdmissionPolicy",
                            "ValidatingAdmissionPolicyBinding"])
    board = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "ConfigMap")
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["superpod-scheduler.json"])["uid"] == "superpod-scheduler"
    roles = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d and d["kind"] == "ClusterRole"}
    for role in roles.values():
        assert not any("*" in r["verbs"] or "*" in r["resources"] for r in role["rules"]), "no wildcards"

    def grants(name: str) -> dict[str, set[str]]:
        return {resource: set(r["verbs"]) for r in roles[name]["rules"] for resource in r["resources"]}

    def aggregates_to(name: str) -> set[str]:
        prefix = "rbac.authorization.k8s.io/aggregate-to-"
        return {k.removeprefix(prefix) for k, v in roles[name]["metadata"]["labels"].items()
                if k.startswith(prefix) and v == "true"}
    # the tenants' pod policy leaves alone whoever may write a TrainingJob's status: so the operator's own pods pass
    policy = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "ValidatingAdmissionPolicy")
    exempt = " ".join(c["expression"] for c in policy["spec"]["matchConditions"])
    assert "resource('trainingjobs').subresource('status')" in exempt and "check('update')" in exempt
    assert "update" in grants(RELEASE)["trainingjobs/status"]
    # tenants: TrainingJobs through the built-in roles, never their status (what the operator decided)
    assert aggregates_to(f"{RELEASE}-edit") == {"admin", "edit"}
    assert grants(f"{RELEASE}-edit") == {"trainingjobs": {"get", "list", "watch", "create", "update", "patch",
                                                          "delete", "deletecollection"}}
    assert aggregates_to(f"{RELEASE}-view") == {"view"}
    assert grants(f"{RELEASE}-view") == {"trainingjobs": {"get", "list", "watch"}}
    # cluster-scoped reads, bound by an admin: aggregated nowhere
    assert aggregates_to(f"{RELEASE}-tenant") == set()
    assert grants(f"{RELEASE}-tenant") == {"gpuqueues": {"get", "list", "watch"},
                                           "clustertopologies": {"get", "list", "watch"}}
    bare = cluster.helm("template", RELEASE, CHART, "-n", NS, "--kube-version", "1.37.2",
                        "--set", "tenantRoles.create=false", "--set", "tenantPolicy.enabled=false").stdout
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(bare) if d and d["kind"] == "ClusterRole"] == [RELEASE]
    assert not [d for d in yaml.safe_load_all(bare) if d and d["kind"].startswith("ValidatingAdmission")]
    deploy = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Deployment")
    sc = deploy["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"] and sc["capabilities"]["drop"] == ["ALL"]
    assert deploy["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--replace-deadline=300" in args and not [a for a in args if a.startswith("--failure-condition")]
    assert not [a for a in args if a.startswith("--spares")]
    tuned = cluster.helm("template", RELEASE, CHART, "-n", NS, "--kube-version", "1.37.2",
                         "--set", "replaceDeadlineSeconds=120", "--set", "spares=leaf=1",
                         "--set-json", 'failureConditions=["GpuUnhealthy=True","example.com/Xid=True"]').stdout
    deploy = next(d for d in yaml.safe_load_all(tuned) if d and d["kind"] == "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--replace-deadline=120" in args and "--spares=leaf=1" in args
    assert [a for a in args if a.startswith("--failure-condition")] == [
        "--failure-condition=GpuUnhealthy=True", "--failure-condition=example.com/Xid=True"]


def token_kubeconfig(cluster, tmp_path) -> tuple:
    token, as_sa = service_account_client(cluster.api, NS, RELEASE)
    base = cluster.api.configuration
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
           "clusters": [{"name": "c", "cluster": {"server": base.host, "certificate-authority": base.ssl_ca_cert}}],
           "users": [{"name": "sa", "user": {"token": token}}],
           "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}]}
    path = tmp_path / "sa.kubeconfig"
    path.write_text(json.dumps(cfg))
    return path, as_sa


@pytest.fixture
def installed(cluster, crds, operator, built_tools):
    sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)  # somewhere for the Deployment's pods to run
    cluster.helm("install", RELEASE, CHART, "-n", NS, "--create-namespace", "--wait", "--timeout", "120s")
    operator.stop()  # the admin-credentialled test operator steps aside: only the chart's identity schedules
    yield
    operator.start()
    cluster.helm("uninstall", RELEASE, "-n", NS, check=False)


def test_install_run_as_the_chart_service_account_upgrade_uninstall(cluster, installed, jobs, tmp_path):
    apps = client.AppsV1Api(cluster.api)
    ext = client.ApiextensionsV1Api(cluster.api)
    for crd in ("trainingjobs.superpod.dev", "clustertopologies.superpod.dev", "gpuqueues.superpod.dev",
                "gpuusages.superpod.dev"):
        conds = {c.type: c.status for c in ext.read_custom_resource_definition(crd).status.conditions}
        assert conds["Established"] == "True"
    assert apps.read_namespaced_deployment(RELEASE, NS).status.ready_replicas == 2

    kubeconfig, as_sa = token_kubeconfig(cluster, tmp_path)
    op = OperatorProcess(kubeconfig, tmp_path / "sa-operator.log",
                         args=("run", "--namespace", NS, "--log-level", "INFO"))
    op.start()
    try:
        sim, _ = sim_cluster(cluster.api, "dgx-h100", 2, nodes_per_unit=2)
        run = {"sim.superpod.dev/run-for": "3s"}
        jobs.create(training_job("rbac-a", sim, 2, gpus=8, annotations=run, topology={"required": "leaf"}))
        jobs.wait_phase("rbac-a", "Running", 60)
        jobs.create(training_job("rbac-b", sim, 2, gpus=8, annotations=run, topology={"required": "leaf"}))
        jobs.wait_event("rbac-b", "NoRoom", "inside one leaf")
        jobs.wait_phase("rbac-a", "Succeeded", 60)
        jobs.wait_phase("rbac-b", "Succeeded", 60)
        lease = client.CoordinationV1Api(cluster.api).read_namespaced_lease("superpod-scheduler", NS)
        assert lease.spec.holder_identity
    finally:
        op.stop()
    log = (tmp_path / "sa-operator.log").read_text()
    # RBAC denials read 'User "system:serviceaccount:<ns>:<name>" cannot ...' (other 403s, e.g. writes into a
    # namespace being deleted by another test, are not about the role)
    assert f'"system:serviceaccount:{NS}:{RELEASE}" cannot' not in log, log[-3000:]

    # a tenant: the built-in `edit` role bound in its namespace, and nothing else, runs TrainingJobs there
    core, rbac = client.CoreV1Api(cluster.api), client.RbacAuthorizationV1Api(cluster.api)
    core.create_namespaced_service_account(jobs.ns, {"metadata": {"name": "researcher"}})
    rbac.create_namespaced_role_binding(jobs.ns, {
        "metadata": {"name": "researcher-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "researcher", "namespace": jobs.ns}]})
    _, as_tenant = service_account_client(cluster.api, jobs.ns, "researcher")
    tenant_jobs, tenant_custom = Jobs(as_tenant, jobs.ns), client.CustomObjectsApi(as_tenant)

    wait_for(lambda: once_allowed(lambda: tenant_jobs.create(training_job("by-tenant", sim, 1, gpus=8))), 30,
             "a TrainingJob created by a ServiceAccount bound to the built-in edit role")
    tenant_jobs.patch("by-tenant", {"spec": {"maxRestarts": 1}})
    listed = tenant_custom.list_namespaced_custom_object("superpod.dev", "v1alpha1", jobs.ns, "trainingjobs")
    assert "by-tenant" in [j["metadata"]["name"] for j in listed["items"]]
    tenant_refused = {
        "write a job's status": lambda: tenant_custom.patch_namespaced_custom_object_status(
            "superpod.dev", "v1alpha1", jobs.ns, "trainingjobs", "by-tenant", {"status": {"phase": "Running"}}),
        "read GPUQueues (cluster-scoped: no RoleBinding grants them)": lambda: tenant_custom.list_cluster_custom_object(
            "superpod.dev", "v1alpha1", "gpuqueues"),
        "create jobs in another namespace": lambda: Jobs(as_tenant, NS).create(training_job("x", sim, 1, gpus=8)),
    }
    for what, call in tenant_refused.items():
        with pytest.raises(ApiException) as e:
            call()
        assert e.value.status == 403, what
    binding = f"{jobs.ns}-researcher-tenant"
    rbac.create_cluster_role_binding({
        "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{RELEASE}-tenant"},
        "subjects": [{"kind": "ServiceAccount", "name": "researcher", "namespace": jobs.ns}]})
    try:  # bound by an admin, the tenant role reads the queues and the fabric's levels
        wait_for(lambda: once_allowed(lambda: tenant_custom.list_cluster_custom_object(
            "superpod.dev", "v1alpha1", "gpuqueues")), 30, "GPUQueues listed through the tenant ClusterRole")
        tenant_custom.get_cluster_custom_object("superpod.dev", "v1alpha1", "clustertopologies", "default")
    finally:
        rbac.delete_cluster_role_binding(binding)
    tenant_custom.delete_namespaced_custom_object("superpod.dev", "v1alpha1", jobs.ns, "trainingjobs", "by-tenant")

    refused = {
        "read Secrets": lambda: client.CoreV1Api(as_sa).list_namespaced_secret(NS),
        "delete Nodes": lambda: client.CoreV1Api(as_sa).delete_node(jobs.pods("rbac-a", live=False)[0].spec.node_name),
        "write ConfigMaps elsewhere": lambda: client.CoreV1Api(as_sa).create_namespaced_config_map(
            jobs.ns, {"metadata": {"name": "x"}}),
        "read other ConfigMaps": lambda: client.CoreV1Api(as_sa).read_namespaced_config_map("kube-root-ca.crt", NS),
        "change a job's spec": lambda: client.CustomObjectsApi(as_sa).patch_namespaced_custom_object(
            "superpod.dev", "v1alpha1", jobs.ns, "trainingjobs", "rbac-a", {"spec": {"priority": 5}}),
        "delete jobs": lambda: client.CustomObjectsApi(as_sa).delete_namespaced_custom_object(
            "superpod.dev", "v1alpha1", jobs.ns, "trainingjobs", "rbac-a"),
        "create Deployments": lambda: client.AppsV1Api(as_sa).create_namespaced_deployment(jobs.ns, {
            "metadata": {"name": "x"}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
    }
    for what, call in refused.items():
        with pytest.raises(ApiException) as e:
            call()
        assert e.value.status == 403, what

    cluster.helm("upgrade", RELEASE, CHART, "-n", NS, "--set", "replicaCount=1", "--set", "logLevel=DEBUG",
                 "--wait", "--timeout", "120s")
    deploy = apps.read_namespaced_deployment(RELEASE, NS)
    assert deploy.spec.replicas == 1 and "--log-level=DEBUG" in deploy.spec.template.spec.containers[0].args

    cluster.helm("uninstall", RELEASE, "-n", NS, "--wait")
    left = {
        "Deployment": [d.metadata.name for d in apps.list_namespaced_deployment(NS).items],
        "ServiceAccount": [s.metadata.name for s in core.list_namespaced_service_account(NS).items
                           if s.metadata.name != "default"],
        "Service": [s.metadata.name for s in core.list_namespaced_service(NS).items],
        "Role": [r.metadata.name for r in rbac.list_namespaced_role(NS).items],
        "RoleBinding": [r.metadata.name for r in rbac.list_namespaced_role_binding(NS).items],
        "ClusterRole": [r.metadata.name for r in rbac.list_cluster_role().items
                        if r.metadata.name == RELEASE or r.metadata.name.startswith(f"{RELEASE}-")],
        "ClusterRoleBinding": [r.metadata.name for r in rbac.list_cluster_role_binding().items
                               if r.metadata.name == RELEASE],
    }
    assert not any(left.values()), left
    wait_for(lambda: not client.CoreV1Api(cluster.api).list_namespaced_pod(NS).items, 60, "operator pods gone")
    assert ext.read_custom_resource_definition("trainingjobs.superpod.dev"), "CRDs stay (Helm's crds/ rule)"
