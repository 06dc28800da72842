"""What `kubectl apply` of bad TrainingJobs tells the user: the CRD schema and CEL rules, on the real API server.
These run before any file that starts the operator (pytest takes files in name order): an operator running beside
them would write the statuses they set by hand."""

from __future__ import annotations

import pytest
import yaml

CONTAINERS = {"containers": [{"name": "main", "image": "trainer"}]}


def job(**spec) -> str:
    body = {"replicas": 4, "resources": {"gpus": 8}, "template": {"spec": CONTAINERS}}
    body.update(spec)
    return yaml.safe_dump({"apiVersion": "superpod.dev/v1alpha1", "kind": "TrainingJob",
                           "metadata": {"name": "bad"}, "spec": body})


BAD = [
    (job(resources={"gpus": 8, "migProfile": "3g.40gb"}), "set exactly one of resources.gpus"),
    (job(resources={}), "set exactly one of resources.gpus"),
    (job(replicas=6, topology={"sliceSize": 4, "sliceRequired": "nvlink"}),
     "replicas must be a multiple of topology.sliceSize"),
    (job(topology={"sliceSize": 2}), "topology.sliceSize and topology.sliceRequired must be set together"),
    (job(topology={"required": "node", "sliceSize": 2, "sliceRequired": "leaf"}),
     "topology.required must not be a finer level than topology.sliceRequired"),
    (job(topology={"required": "leaf", "preferred": "spine"}),
     "topology.preferred must be a level at or inside topology.required"),
    (job(template={"spec": {"nodeName": "n1", **CONTAINERS}}), "template.spec.nodeName must not be set"),
    (job(template={"spec": {"schedulerName": "default-scheduler", **CONTAINERS}}),
     "template.spec.schedulerName must not be set"),
    (job(template={"spec": {"restartPolicy": "Always", **CONTAINERS}}), "template.spec.restartPolicy must be Never"),
    (job(template={"spec": {"containers": [{"name": "m", "image": "x",
                                            "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}),
     "containers must not request nvidia.com/gpu or nvidia.com/mig-* resources"),
    (job(template={"spec": {**CONTAINERS, "initContainers": [{"name": "i", "image": "x", "resources": {
        "requests": {"nvidia.com/mig-1g.10gb": 1}, "limits": {"nvidia.com/mig-1g.10gb": 1}}}]}}),
     "containers must not request nvidia.com/gpu or nvidia.com/mig-* resources"),
    (job(template={"spec": {"containers": [{"name": "m", "image": "x", "resources": {"requests": {"rdma/ib": 1}}}]}}),
     "an extended resource (a name with a '/', e.g. rdma/ib) requested without a limit"),
    (job(template={"spec": {"containers": []}}), "template.spec.containers must list at least one container"),
    (job(resources={"migProfile": "3g"}), "spec.resources.migProfile in body should match"),
    (job(replicas=0), "spec.replicas in body should be greater than or equal to 1"),
    (job(priority=2_000_000_000), "spec.priority in body should be less than or equal to 1000000000"),
]


@pytest.mark.parametrize(("manifest", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_spec_is_refused_at_apply_with_a_clear_message(crds, namespace, manifest, message):
    out = crds.kubectl("apply", "-n", namespace, "-f", "-", input=manifest, check=False)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_good_spec_is_accepted_with_defaults(crds, namespace):
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=job(topology={"required": "leaf"}))
    got = yaml.safe_load(crds.kubectl("get", "tj", "bad", "-n", namespace, "-o", "yaml").stdout)
    assert got["spec"]["maxRestarts"] == 3 and got["spec"]["startupTimeoutSeconds"] == 600
    assert got["spec"]["priority"] == 0


def test_network_operator_resources_can_be_requested(crds, namespace):
    """Defect: CEL refused every nvidia.com/* container resource, so GPUDirect RDMA devices could not be asked for."""
    rdma = {"nvidia.com/hostdev": 1, "nvidia.com/rdma_shared_device_a": 1, "rdma/ib": 1}
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=job(template={"spec": {"containers": [
        {"name": "m", "image": "x", "resources": {"requests": rdma, "limits": rdma}}]}}))
    got = yaml.safe_load(crds.kubectl("get", "tj", "bad", "-n", namespace, "-o", "yaml").stdout)
    assert got["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == rdma


def test_the_gang_and_what_it_was_admitted_with_cannot_change_while_it_runs(crds, namespace):
    """Defects: a spec edit on a running job was half-applied (new pods from the new spec beside the old ones); a
    tenant moved a running job out of its queue's limit (spec.queue), or made borrowed GPUs unreclaimable
    (spec.serviceClass: reserved, a long spec.minRuntimeSeconds)."""
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=job(queue="team-a"))
    admitted = {"queue": '"nowhere"', "serviceClass": '"reserved"', "priority": "5", "minRuntimeSeconds": "2592000"}
    for field, value in admitted.items():  # while Queued, every one may change
        crds.kubectl("patch", "tj", "bad", "-n", namespace, "--type=merge", "-p", f'{{"spec": {{"{field}": {value}}}}}')
    crds.kubectl("patch", "tj", "bad", "-n", namespace, "--subresource=status", "--type=merge",
                 "-p", '{"status": {"phase": "Running"}}')
    for patch in ('{"spec": {"replicas": 8}}', '{"spec": {"template": {"spec": {"containers": [{"name": "main", '
                  '"image": "other"}]}}}}', '{"spec": {"topology": {"required": "leaf"}}}'):
        out = crds.kubectl("patch", "tj", "bad", "-n", namespace, "--type=merge", "-p", patch, check=False)
        assert out.returncode != 0 and "define the gang and cannot change while it is Starting or Running" in \
            out.stderr, out.stderr
    changed = {"queue": '"elsewhere"', "serviceClass": '"spot"', "priority": "6", "minRuntimeSeconds": "0"}
    removed = {"queue": "null", "minRuntimeSeconds": "null"}  # an optional field dropped is a change too
    for field, value in [*changed.items(), *removed.items()]:
        out = crds.kubectl("patch", "tj", "bad", "-n", namespace, "--type=merge",
                           "-p", f'{{"spec": {{"{field}": {value}}}}}', check=False)
        assert out.returncode != 0 and f"spec.{field} cannot change while the job is Starting or Running" in \
            out.stderr, (field, value, out.stderr)
    crds.kubectl("patch", "tj", "bad", "-n", namespace, "--type=merge", "-p", '{"spec": {"maxRestarts": 5}}')


def test_status_times_must_be_rfc3339(crds, namespace):
    """Defect: a status.notBefore of "soon" made every scheduling cycle fail; the API server now refuses it."""
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=job())
    out = crds.kubectl("patch", "tj", "bad", "-n", namespace, "--subresource=status", "--type=merge",
                       "-p", '{"status": {"notBefore": "soon"}}', check=False)
    assert out.returncode != 0 and "notBefore in body must be of type date-time" in out.stderr, out.stderr


def test_explain_describes_every_topology_field(crds):
    out = crds.kubectl("explain", "trainingjob.spec.topology").stdout
    for field in ("required", "preferred", "sliceSize", "sliceRequired"):
        assert field in out
    assert "ClusterTopology level name" in out


def gpu_queue(name: str, **spec) -> str:
    return yaml.safe_dump({"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name},
                           "spec": spec})


BAD_QUEUES = [
    (gpu_queue("twice", resources=[{"flavor": "*", "guaranteed": 8}, {"flavor": "*", "guaranteed": 4}]),
     "each flavor at most once in resources"),
    (gpu_queue("low", resources=[{"flavor": "*", "guaranteed": 8, "limit": 4}]),
     "a resource's limit must not be below its guarantee"),
    (gpu_queue("lender", resources=[{"flavor": "*", "guaranteed": 8, "lendingLimit": 9}]),
     "a resource's lendingLimit must not exceed its guarantee"),
    (gpu_queue("weightless", weight=0), "spec.weight in body should be greater than 0"),
    (gpu_queue("forever", budget={"gpuHours": 10, "period": "a month"}), "spec.budget.period in body should match"),
    (gpu_queue("instant", budget={"gpuHours": 10, "period": "0h"}), "budget.period must be longer than 0"),
    (gpu_queue("instants", budget={"gpuHours": 10, "period": "0h0m0.0s"}), "budget.period must be longer than 0"),
]


@pytest.mark.parametrize(("manifest", "message"), BAD_QUEUES, ids=[m for _, m in BAD_QUEUES])
def test_bad_gpu_queue_is_refused_at_apply(crds, manifest, message):
    out = crds.kubectl("apply", "-f", "-", input=manifest, check=False)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr


def test_gpu_queue_is_accepted_with_defaults_and_listed_with_its_columns(crds):
    crds.kubectl("apply", "-f", "-", input=gpu_queue("team-a", namespaces=["team-a"], budget={"gpuHours": 100},
                                                     resources=[{"flavor": "*", "guaranteed": 32, "limit": 64}]))
    try:
        got = yaml.safe_load(crds.kubectl("get", "gq", "team-a", "-o", "yaml").stdout)
        assert got["spec"]["weight"] == 1 and got["spec"]["budget"] == {"gpuHours": 100, "period": "720h",
                                                                          "onExhausted": "Hold"}
        header = crds.kubectl("get", "gq").stdout.splitlines()[0].split()
        assert header == ["NAME", "GUARANTEED", "ALLOCATED", "BORROWED", "PENDING", "SHARE", "BUDGET", "LEFT", "AGE"]
    finally:
        crds.kubectl("delete", "gq", "team-a", "--wait=false")


def test_a_usage_record_is_listed_and_cannot_change(crds):
    record = yaml.safe_dump({
        "apiVersion": "superpod.dev/v1alpha1", "kind": "GPUUsage", "metadata": {"name": "test-uid-a1"},
        "spec": {"queue": "team-a", "namespace": "team-a", "job": "llm", "jobUid": "test-uid", "attempt": 1,
                 "flavor": "*", "serviceClass": "spot", "gpus": 16, "start": "2026-11-30T10:00:00Z",
                 "end": "2026-11-30T11:00:00Z", "gpuSeconds": 57600}})
    crds.kubectl("apply", "-f", "-", input=record)
    try:
        row = crds.kubectl("get", "gu", "test-uid-a1").stdout.splitlines()
        assert row[0].split()[:6] == ["NAME", "QUEUE", "NAMESPACE", "JOB", "GPUS", "GPU-SECONDS"]
        assert row[1].split()[1:6] == ["team-a", "team-a", "llm", "16", "57600"]
        out = crds.kubectl("patch", "gu", "test-uid-a1", "--type=merge", "-p", '{"spec": {"gpuSeconds": 1}}',
                           check=False)
        assert out.returncode != 0 and "a usage record does not change once written" in out.stderr, out.stderr
    finally:
        crds.kubectl("delete", "gu", "test-uid-a1", "--wait=false")
