"""Other controllers' pods as gangs, on the real control plane with the real kube-controller-manager: Indexed Jobs,
a StatefulSet and a JobSet (its own controller and webhooks) create pods with spec.schedulerName:
superpod-scheduler; the operator binds each gang whole through pods/binding, inside one leaf, ranks in index order,
and tells the pods of a gang that cannot start why in PodScheduled=False."""

from __future__ import annotations

import uuid

from kubernetes import client

from superpod.api.podgang import GANG_LABEL, GANG_SIZE, TOPOLOGY
from superpod.hardware.presets import SIM_LABEL
from tests.integration.operator_env import sim_cluster
from tests.integration.wait import wait_for

SCHEDULER = "superpod-scheduler"
LEAF = "superpod.dev/leaf"


def pod_template(gang: str | None, size: int | None, sim: str, gpus: int = 8, required: str | None = "leaf",
                 resource: str = "nvidia.com/gpu") -> dict:
    labels = {GANG_LABEL: gang} if gang else {}
    notes = {**({GANG_SIZE: str(size)} if size else {}), **({TOPOLOGY["required"]: required} if required else {})}
    return {"metadata": {"labels": labels, "annotations": notes},
            "spec": {"schedulerName": SCHEDULER, "restartPolicy": "Never", "nodeSelector": {SIM_LABEL: sim},
                     "containers": [{"name": "main", "image": "trainer",
                                     "resources": {"limits": {resource: str(gpus)}}}]}}


def indexed_job(name: str, parallelism: int, template: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"completionMode": "Indexed", "completions": parallelism, "parallelism": parallelism,
                     "backoffLimit": 0, "template": template}}


class Pods:
    def __init__(self, api, namespace: str) -> None:
        self.core, self.batch, self.ns = client.CoreV1Api(api), client.BatchV1Api(api), namespace
        self.leaves = {n.metadata.name: (n.metadata.labels or {}).get(LEAF) for n in self.core.list_node().items}

    def of(self, selector: str) -> list:
        return [p for p in self.core.list_namespaced_pod(self.ns, label_selector=selector).items
                if not p.metadata.deletion_timestamp]

    def bound(self, selector: str) -> dict[str, str]:
        return {p.metadata.name: p.spec.node_name for p in self.of(selector) if p.spec.node_name}

    def said(self, name: str) -> str:
        pod = self.core.read_namespaced_pod(name, self.ns)
        cond = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        return f"{cond.status} {cond.reason}: {cond.message}" if cond else ""

    def wait_said(self, name: str, text: str, timeout: float = 60) -> str:
        return wait_for(lambda: text in self.said(name) and self.said(name), timeout,
                        f"pod {name} saying {text!r} (says {self.said(name)!r})")

    def leaf(self, node: str) -> str:
        if node not in self.leaves:
            self.leaves = {n.metadata.name: (n.metadata.labels or {}).get(LEAF) for n in self.core.list_node().items}
        return self.leaves[node]


def test_an_indexed_job_is_bound_whole_in_one_leaf_with_ranks_in_index_order(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 32, nodes_per_unit=16)  # two leaves of 16 nodes
    pods = Pods(cluster.api, namespace)
    pods.batch.create_namespaced_job(namespace, indexed_job("train", 16, pod_template("train", 16, sim)))
    bound = wait_for(lambda: len(b := pods.bound("job-name=train")) == 16 and b, 120, "16 pods of train bound")
    by_index = {int(p.metadata.annotations["batch.kubernetes.io/job-completion-index"]): p.spec.node_name
                for p in pods.of("job-name=train")}
    print("\nIndexed Job train (16 x 8 GPUs, leaf required) bindings, index -> node (leaf):")
    for index, node in sorted(by_index.items()):
        print(f"  {index:2d} -> {node} ({pods.leaf(node)})")
    assert len({pods.leaf(node) for node in bound.values()}) == 1, "one leaf"
    nodes = [by_index[i] for i in range(16)]
    assert nodes == sorted(nodes) and len(set(nodes)) == 16, "ranks in index order, one per node"
    wait_for(lambda: all(p.status.phase == "Running" for p in pods.of("job-name=train")), 60, "all 16 Running")


def test_a_job_whose_pods_appear_one_by_one_is_bound_when_the_last_appears(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4)
    pods = Pods(cluster.api, namespace)
    job = indexed_job("grow", 1, pod_template("grow", 4, sim, required=None))
    job["spec"]["completions"] = 4
    pods.batch.create_namespaced_job(namespace, job)
    for parallelism in (1, 2, 3):
        if parallelism > 1:
            pods.batch.patch_namespaced_job("grow", namespace, {"spec": {"parallelism": parallelism}})
        wait_for(lambda n=parallelism: len(pods.of("job-name=grow")) == n, 60, f"{parallelism} pods of grow")
        first = sorted(p.metadata.name for p in pods.of("job-name=grow"))[0]
        pods.wait_said(first, "waiting for all 4 pods of the gang to exist")
        assert not pods.bound("job-name=grow"), "nothing bound before the last pod exists"
    pods.batch.patch_namespaced_job("grow", namespace, {"spec": {"parallelism": 4}})
    wait_for(lambda: len(pods.bound("job-name=grow")) == 4, 60, "all 4 bound once the last appeared")


def test_two_gangs_compete_one_is_bound_the_other_waits_whole(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4)
    pods = Pods(cluster.api, namespace)
    for name in ("first", "second"):
        pods.batch.create_namespaced_job(namespace, indexed_job(name, 3, pod_template(name, 3, sim, required=None)))
    wait_for(lambda: sorted(len(pods.bound(f"job-name={n}")) for n in ("first", "second")) == [0, 3], 90,
             "one gang bound whole, none of the other")
    waiting = next(n for n in ("first", "second") if not pods.bound(f"job-name={n}"))
    running = "second" if waiting == "first" else "first"
    name = sorted(p.metadata.name for p in pods.of(f"job-name={waiting}"))[0]
    pods.wait_said(name, "False Unschedulable: needs 3 nodes with 8 free")
    pods.batch.delete_namespaced_job(running, namespace, propagation_policy="Background")
    wait_for(lambda: len(pods.bound(f"job-name={waiting}")) == 3, 90, f"{waiting} bound once {running} is gone")


def test_a_statefulset_is_one_gang(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 8, nodes_per_unit=4)
    pods = Pods(cluster.api, namespace)
    template = pod_template("ranks", 4, sim)
    template["metadata"]["labels"]["app"] = "ranks"
    template["spec"]["restartPolicy"] = "Always"
    client.AppsV1Api(cluster.api).create_namespaced_stateful_set(namespace, {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "ranks"},
        "spec": {"replicas": 4, "podManagementPolicy": "Parallel", "serviceName": "ranks",
                 "selector": {"matchLabels": {"app": "ranks"}}, "template": template}})
    bound = wait_for(lambda: len(b := pods.bound("app=ranks")) == 4 and b, 90, "4 StatefulSet pods bound")
    assert len({pods.leaf(node) for node in bound.values()}) == 1
    assert [bound[f"ranks-{i}"] for i in range(4)] == sorted(bound.values()), "ordinals in node order"


def test_bad_gangs_say_why_and_nothing_else_stalls(cluster, operator, namespace):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 4)
    pods = Pods(cluster.api, namespace)
    core = pods.core

    def bare(name: str, template: dict) -> None:
        core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, **template["metadata"]}, "spec": template["spec"]})

    bare("lonely", pod_template(None, None, sim, required=None))  # no gang label: a gang of one
    bare("nolabel", pod_template(None, 2, sim, required=None))  # a gang's size, but no gang label
    # The liar's pods are held by a scheduling gate until all four exist: else three may be bound as a gang of three
    # before the controller makes the fourth.
    liar_template = pod_template("liar", 3, sim, required=None)
    liar_template["spec"]["schedulingGates"] = [{"name": "superpod.dev/test-hold"}]
    pods.batch.create_namespaced_job(namespace, indexed_job("liar", 4, liar_template))
    bare("fpga", pod_template(None, None, sim, gpus=1, required=None, resource="example.com/fpga"))
    pods.batch.create_namespaced_job(namespace, indexed_job("good", 2, pod_template("good", 2, sim, required=None)))
    wait_for(lambda: len(pods.of("job-name=liar")) == 4, 60, "the liar's four pods")
    for pod in pods.of("job-name=liar"):
        core.patch_namespaced_pod(pod.metadata.name, namespace, [{"op": "remove", "path": "/spec/schedulingGates"}])
    wait_for(lambda: len(pods.bound("job-name=good")) == 2, 60, "the good gang bound")
    wait_for(lambda: pods.bound(f"{GANG_LABEL}!=x").get("lonely"), 60, "the lone pod bound")
    liar = sorted(p.metadata.name for p in pods.of("job-name=liar"))[0]
    said = {"nolabel": pods.wait_said("nolabel", "missing, though superpod.dev/gang-size says 2"),
            "liar": pods.wait_said(liar, "says 3, but 4 of its pods exist"),
            "fpga": pods.wait_said("fpga", "requests example.com/fpga, which no node advertises")}
    print("\nPodScheduled on the bad gangs:")
    for name, text in said.items():
        print(f"  {name}: {text}")
    assert not pods.bound("job-name=liar")
    assert not {"fpga", "nolabel"} & set(pods.bound(f"{GANG_LABEL}!=x"))


def test_a_jobset_of_four_jobs_of_two_pods_is_one_gang_in_one_leaf(cluster, operator, namespace, jobset_controller):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 16, nodes_per_unit=8)
    pods = Pods(cluster.api, namespace)
    name = f"js{uuid.uuid4().hex[:4]}"
    template = pod_template(name, 8, sim)
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 4, "template": {"spec": {
                "parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 0,
                "template": template}}}]}})
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    bound = wait_for(lambda: len(b := pods.bound(selector)) == 8 and b, 120, "8 JobSet pods bound")
    print(f"\nJobSet {name} (4 jobs x 2 pods, 8 GPUs each, leaf required) bindings:")
    for pod in sorted(pods.of(selector), key=lambda p: p.metadata.name):
        print(f"  {pod.metadata.name} -> {pod.spec.node_name} ({pods.leaf(pod.spec.node_name)})")
    assert len({pods.leaf(node) for node in bound.values()}) == 1


def test_a_kubeflow_trainjob_with_coscheduling_is_one_gang_by_its_podgroup(cluster, operator, namespace,
                                                                           trainer_controller):
    """Unchanged coscheduling: the Trainer makes a PodGroup (minMember) and labels the pods with it; a runtime of the
    user's own names this scheduler."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 16, nodes_per_unit=8)
    pods = Pods(cluster.api, namespace)
    custom = client.CustomObjectsApi(cluster.api)
    node = {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"schedulerName": SCHEDULER,
                                           "containers": [{"name": "node", "image": "pytorch/pytorch"}]}}}}
    custom.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", namespace, "trainingruntimes", {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
        "metadata": {"name": "torch-superpod", "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
                 "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": 300}},
                 "template": {"spec": {"replicatedJobs": [{"name": "node", "template": node}]}}}})
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "llama"},
        "spec": {"runtimeRef": {"name": "torch-superpod", "kind": "TrainingRuntime"},
                 "trainer": {"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
                 "podTemplateOverrides": [{"targetJobs": [{"name": "node"}],
                                           "metadata": {"annotations": {TOPOLOGY["required"]: "leaf"}},
                                           "spec": {"nodeSelector": {SIM_LABEL: sim}}}]}}

    def created() -> bool:
        """The Trainer's webhook refuses a TrainJob until its cache has seen the runtime just created."""
        try:
            custom.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs",
                                                   trainjob)
        except client.ApiException as e:
            if e.status == 403 and "must be created before the TrainJob" in (e.body or ""):
                return False
            raise
        return True
    wait_for(created, 30, "the Trainer webhook to know the runtime")
    group = wait_for(lambda: custom.list_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", namespace,
                                                                  "podgroups")["items"], 60, "the Trainer's PodGroup")
    selector = "scheduling.x-k8s.io/pod-group=llama"
    bound = wait_for(lambda: len(b := pods.bound(selector)) == 4 and b, 120, "the TrainJob's 4 pods bound")
    print(f"\nTrainJob llama (PodGroup minMember {group[0]['spec'].get('minMember')}) bindings:")
    for pod in sorted(pods.of(selector), key=lambda p: p.metadata.name):
        print(f"  {pod.metadata.name} -> {pod.spec.node_name} ({pods.leaf(pod.spec.node_name)})")
    assert len({pods.leaf(node) for node in bound.values()}) == 1


def test_a_pytorchjob_unchanged_is_one_gang_when_the_training_operator_names_this_scheduler(
        cluster, operator, namespace, training_operator):
    """--gang-scheduler-name=superpod-scheduler: the Training Operator sets the scheduler name on the pods, makes a
    PodGroup (minMember: every replica) and labels the pods with it. The manifest names neither."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 8, nodes_per_unit=4)
    pods = Pods(cluster.api, namespace)

    def replica(count: int) -> dict:
        return {"replicas": count, "restartPolicy": "OnFailure", "template": {
            "metadata": {"annotations": {TOPOLOGY["required"]: "leaf"}},
            "spec": {"nodeSelector": {SIM_LABEL: sim}, "containers": [
                {"name": "pytorch", "image": "pytorch/pytorch", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object("kubeflow.org", "v1", namespace,
                                                                         "pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "resnet"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}}})
    selector = "training.kubeflow.org/job-name=resnet"
    bound = wait_for(lambda: len(b := pods.bound(selector)) == 4 and b, 120, "the PyTorchJob's 4 pods bound")
    print("\nPyTorchJob resnet (1 master + 3 workers, 8 GPUs each, leaf required) bindings:")
    for pod in sorted(pods.of(selector), key=lambda p: p.metadata.name):
        print(f"  {pod.metadata.name} -> {pod.spec.node_name} ({pods.leaf(pod.spec.node_name)}), "
              f"schedulerName {pod.spec.scheduler_name}")
    assert len({pods.leaf(node) for node in bound.values()}) == 1


def test_a_high_priority_job_preempts_a_low_priority_job_gang_whole(cluster, operator, namespace):
    """Two Indexed Jobs by PriorityClass: the high one evicts the low one's whole gang as kube-scheduler evicts
    (DisruptionTarget, then a graceful delete); the Job controller makes the pods again, and they wait as a gang."""
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 2)
    pods = Pods(cluster.api, namespace)
    scheduling = client.SchedulingV1Api(cluster.api)
    classes = {"low": f"{namespace}-low", "high": f"{namespace}-high"}
    for level, value in (("low", 1), ("high", 1000)):
        scheduling.create_priority_class({"metadata": {"name": classes[level]}, "value": value})
    try:
        for name, count in (("low", 2), ("high", 2)):
            job = indexed_job(name, count, pod_template(name, count, sim, required=None))
            job["spec"]["template"]["spec"]["priorityClassName"] = classes[name]
            job["spec"]["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [
                {"type": "DisruptionTarget"}]}]}
            pods.batch.create_namespaced_job(namespace, job)
            first = wait_for(lambda n=name, k=count: len(b := pods.bound(f"job-name={n}")) == k and b, 90,
                             f"{name} bound whole")
            if name == "low":
                evicted = set(first)
        high = first
        assert not evicted & set(pods.bound("job-name=low")), "every pod of the low gang went"
        events = pods.core.list_namespaced_event(namespace, field_selector="reason=Preempted").items
        assert any("gang" in e.message and classes["high"] not in e.message for e in events), events
        # The Job controller backs off 10 s per failed pod, doubling: 20 s for 2 (ignored failures included).
        again = wait_for(lambda: [p.metadata.name for p in pods.of("job-name=low") if p.metadata.name not in evicted],
                         120, "the Job's pods made again")
        pods.wait_said(sorted(again)[0], "needs 2 nodes")
        print(f"\nhigh bound on {sorted(high.values())}; low's {len(evicted)} pods evicted, {len(again)} made again "
              f"and waiting: {pods.said(sorted(again)[0])}")
    finally:
        for name in classes.values():
            scheduling.delete_priority_class(name)


def test_a_jobset_pod_its_owner_makes_again_after_a_lost_node_lands_in_the_gangs_leaf(cluster, operator, namespace,
                                                                                       jobset_controller):
    sim, _ = sim_cluster(cluster.api, "dgx-h100", 10, nodes_per_unit=5)  # two leaves of 5: a node to spare in each
    pods = Pods(cluster.api, namespace)
    name = f"jr{uuid.uuid4().hex[:4]}"
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {
                "parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 2,
                "template": pod_template(name, 4, sim)}}}]}})
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    before = wait_for(lambda: len(b := pods.bound(selector)) == 4 and b, 120, "4 JobSet pods bound")
    leaf = pods.leaf(next(iter(before.values())))
    uids = {p.metadata.name: p.metadata.uid for p in pods.of(selector)}
    victim = sorted(before)[1]
    pods.core.delete_node(before[victim])  # the node is lost; the pod GC deletes its pod, its Job makes it again
    pods.core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)
    after = wait_for(lambda: len(b := pods.bound(selector)) == 4 and victim not in b and b, 120,
                     "the Job's new pod bound")
    made = next(pod for pod in after if pod not in before)
    print(f"\nJobSet {name}: {victim} lost with {before[victim]}; {made} bound to {after[made]} (leaf {leaf})")
    assert pods.leaf(after[made]) == leaf and after[made] != before[victim]
    kept = {p.metadata.name: p.metadata.uid for p in pods.of(selector) if p.metadata.name != made}
    assert kept == {pod: uid for pod, uid in uids.items() if pod != victim}, "the others run on untouched"
    assert {pod: after[pod] for pod in kept} == {pod: before[pod] for pod in kept}
