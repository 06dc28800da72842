"""A real Kubernetes control plane for the integration tests: the one KUBECONFIG names (kind, a real cluster), or
the local one from superpod.localcluster, started for this session on its own ports and state folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from superpod.k8s.client import load
from superpod.localcluster.cluster import LocalCluster, Ports, state_dir

BUILDING = "SUPERPOD_BUILDING"  # set by hack/test.sh while it builds what the later tests run, in the background
BUILD_CONFIGS_WAIT = 600.0  # seconds a background build may take to copy the configurations it starts with
TEST_PORTS = Ports(etcd=12479, etcd_peer=12480, apiserver=16543, controller_manager=20357, scheduler=20359, kwok=20347)


@dataclass
class Cluster:
    kubeconfig: Path
    kubectl_path: str
    api: client.ApiClient
    local: LocalCluster | None

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        out = subprocess.run([self.kubectl_path, f"--kubeconfig={self.kubeconfig}", *args], capture_output=True,
                             text=True, input=input, timeout=120)
        if check and out.returncode:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
        return out

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        helm = shutil.which("helm") if self.local is None else str(Path(self.kubectl_path).parent / "helm")
        out = subprocess.run([helm, f"--kubeconfig={self.kubeconfig}", *args], capture_output=True, text=True,
                             timeout=300)
        if check and out.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
        return out


@pytest.fixture(scope="session")
def cluster():
    if os.environ.get("KUBECONFIG"):
        kubeconfig = Path(os.environ["KUBECONFIG"])
        kubectl = shutil.which("kubectl") or str(LocalCluster().build(quiet=True) / "kubectl")
        yield Cluster(kubeconfig, kubectl, load(kubeconfig), None)
        return
    if shutil.which("go") is None and not os.environ.get("SUPERPOD_BIN"):
        pytest.skip("Go is not installed: the local control plane is built from Go modules (or set KUBECONFIG)")
    local = LocalCluster(state_dir().parent / "cluster-test", TEST_PORTS)
    local.wipe()
    bin_dir = local.build()
    local.up(bin_dir)
    try:
        yield Cluster(local.kubeconfig, str(bin_dir / "kubectl"), load(local.kubeconfig), local)
    finally:
        local.down()


@pytest.fixture(scope="session")
def built_tools(cluster) -> None:
    """What the tests run beside the control plane (Helm, JobSet, Kubeflow's controllers), built into the control
    plane's folder: the test command builds them in the background while the tests that need none run first
    (tests/conftest.py orders them), and this waits for that build."""
    if cluster.local is not None:
        cluster.local.build(for_tests=True)


def podgroup_crd(cluster: Cluster) -> Path:
    """The coscheduling PodGroup CRD: copied before the background build compiles anything (hack/build.sh), so
    waited for briefly; built here when no build is under way."""
    from tests.integration.workload_controllers import PODGROUP_CRD

    path = Path(cluster.kubectl_path).parent / PODGROUP_CRD
    deadline = time.monotonic() + BUILD_CONFIGS_WAIT
    while not path.exists() and os.environ.get(BUILDING) and time.monotonic() < deadline:
        time.sleep(2)
    if not path.exists():
        cluster.local.build(for_tests=True)
    return path


@pytest.fixture
def namespace(cluster):
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(cluster.api)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def crds(cluster):
    from tests.integration.operator_env import REPO, ensure_topology

    cluster.kubectl("apply", "-f", str(REPO / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/trainingjobs.superpod.dev",
                    "crd/clustertopologies.superpod.dev", "crd/gpuqueues.superpod.dev",
                    "crd/gpuusages.superpod.dev", "--timeout=60s")
    ensure_topology(cluster.api)
    if cluster.local is not None:  # before the operator starts: it watches PodGroups where they are served
        from tests.integration.workload_controllers import apply_crd

        apply_crd(cluster, podgroup_crd(cluster))
    return cluster


@pytest.fixture(scope="session")
def jobset_controller(crds, built_tools, tmp_path_factory):
    """JobSet's own controller and webhooks, beside the local control plane; yielded once its webhooks answer (its
    readiness probe can pass before they are served: a JobSet created then was refused with a 404 from them)."""
    import yaml

    from tests.integration.wait import wait_for
    from tests.integration.workload_controllers import JOBSET, running

    probe = yaml.safe_dump({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                            "metadata": {"name": "probe", "namespace": "default"}, "spec": {"replicatedJobs": [
                                {"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {
                                    "restartPolicy": "Never", "containers": [{"name": "c", "image": "probe"}]}}}}}]}})
    with running(crds, tmp_path_factory.mktemp("controllers"), JOBSET) as controller:
        wait_for(lambda: crds.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False).returncode
                 == 0, 60, "JobSet's webhooks answering")
        yield controller


@pytest.fixture(scope="session")
def training_operator(crds, built_tools, tmp_path_factory):
    """The Kubeflow Training Operator (v1), run with --gang-scheduler-name=superpod-scheduler."""
    from tests.integration.workload_controllers import TRAINING_OPERATOR, running

    with running(crds, tmp_path_factory.mktemp("controllers"), TRAINING_OPERATOR) as controller:
        yield controller


@pytest.fixture(scope="session")
def trainer_controller(jobset_controller, tmp_path_factory):
    """The Kubeflow Trainer's controller and webhooks (its TrainJobs run as JobSets)."""
    from tests.integration.workload_controllers import TRAINER, running

    with running(jobset_controller.cluster, tmp_path_factory.mktemp("controllers"), TRAINER) as controller:
        yield controller


@pytest.fixture(scope="session")
def operator(crds, tmp_path_factory):
    from tests.integration.operator_env import OperatorProcess, free_port

    op = OperatorProcess(crds.kubeconfig, tmp_path_factory.mktemp("operator") / "operator.log", free_port())
    op.start()
    yield op
    op.stop()


@pytest.fixture
def jobs(cluster, namespace):
    from tests.integration.operator_env import Jobs

    return Jobs(cluster.api, namespace)


@pytest.fixture(scope="session")
def mig_manager(crds, tmp_path_factory):
    """The simulated NVIDIA MIG manager (a hardware stand-in from superpod.hardware), as its own process."""
    from tests.integration.operator_env import OperatorProcess

    sim = OperatorProcess(crds.kubeconfig, tmp_path_factory.mktemp("mig") / "mig-manager.log",
                          args=("hardware", "mig-manager", "--delay", "1"))
    sim.start()
    yield sim
    sim.stop()


@pytest.fixture(scope="session")
def compute_domains(crds, tmp_path_factory):
    """The simulated ComputeDomain controller of NVIDIA's DRA driver (a stand-in from superpod.hardware), as its own
    process; the ComputeDomain kind is served once it returns."""
    from kubernetes import client

    from tests.integration.operator_env import OperatorProcess
    from tests.integration.wait import wait_for

    sim = OperatorProcess(crds.kubeconfig, tmp_path_factory.mktemp("compute-domains") / "compute-domains.log",
                          args=("hardware", "compute-domains"))
    sim.start()
    extensions = client.ApiextensionsV1Api(crds.api)

    def served() -> bool:
        try:
            crd = extensions.read_custom_resource_definition("computedomains.resource.nvidia.com")
        except client.ApiException:
            return False
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or ())
    wait_for(served, 60, "the ComputeDomain kind served")
    yield sim
    sim.stop()
