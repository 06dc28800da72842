"""The e2e tests: the operator installed by its chart, from its own image, on a kind cluster with real kubelets
(hack/kind-up.sh: private Docker engine, node image built here, simulated NVIDIA device plugin). Skipped where
Docker cannot run (not root, or no apt-get to install it). The cluster and the engine stop when the e2e tests end,
before the other tests run; SUPERPOD_KEEP_KIND=1 keeps them."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from superpod.k8s.client import load
from tests.integration.operator_env import REPO, Jobs
from tests.integration.wait import wait_for

RELEASE, OPERATOR_NAMESPACE = "superpod-scheduler", "superpod-system"
TORCH_VERSION = "2.15.0"


REPORTED: list[str] = []


def report(line: str) -> None:
    """A figure the run should show: printed in pytest's summary (output is captured until then)."""
    REPORTED.append(f"{time.strftime('%H:%M:%S')} {line}")


def pytest_terminal_summary(terminalreporter):
    if REPORTED:
        terminalreporter.section("e2e on kind: timings and what the pods printed")
        for line in REPORTED:
            terminalreporter.write_line(line)


@dataclass
class Kind:
    kubeconfig: Path
    env: dict
    api: client.ApiClient

    @property
    def operator_image(self) -> str:
        return self.env["SUPERPOD_OPERATOR_IMAGE"]

    def run(self, *command: str, check: bool = True, timeout: float = 600, input: str | None = None):
        out = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout, input=input)
        if check and out.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return out

    def kubectl(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.run("kubectl", *args, **kwargs)

    def helm(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.run("helm", *args, "--namespace", OPERATOR_NAMESPACE, **kwargs)


def timed(what: str, *command: str, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run a command in its own process group (on timeout the whole group is killed: builds, docker, kind)."""
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise AssertionError(f"{what} took longer than {timeout:.0f}s") from None
    for line in stderr.splitlines():
        if re.match(r"\[(docker|node-image|kind-up|dra-example-driver) ", line):
            report(line)
    report(f"{what}: {time.monotonic() - started:.0f}s")
    if process.returncode != 0:
        raise AssertionError(f"{what} failed:\n{stdout[-3000:]}\n{stderr[-6000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.fixture(scope="package")
def kind():
    if os.geteuid() != 0 or not (shutil.which("dockerd") or shutil.which("apt-get")):
        pytest.skip("kind needs a Docker engine: root and Debian's docker.io (hack/docker.sh installs it)")
    bin_dir = subprocess.run(["bash", "hack/build.sh", "--kind"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    try:
        up = timed("hack/kind-up.sh", "bash", "hack/kind-up.sh", env=env)
        exports = dict(re.findall(r"(\w+)=(\S+)", up.stdout.strip().splitlines()[-1]))
        env.update(exports)
        yield Kind(Path(exports["KUBECONFIG"]), env, load(exports["KUBECONFIG"]))
    finally:
        if not os.environ.get("SUPERPOD_KEEP_KIND"):
            try:
                timed("kind cluster deleted", "bash", "hack/kind-up.sh", "down", env=env)
            finally:
                timed("Docker engine stopped", "bash", "hack/docker.sh", "down", env=env)


DRA_DRIVER = "gpu.example.com"


@pytest.fixture(scope="package")
def dra_example_driver(kind) -> dict[str, list[str]]:
    """The DRA example driver's kubelet plugin on every kind worker (hack/kind/dra-example-driver.sh), its
    ResourceSlices published: each worker's gpu.example.com device names. Package scope, as `kind` is."""
    timed("DRA example driver installed", "bash", "hack/kind/dra-example-driver.sh", env=kind.env, timeout=300)
    slices = client.ResourceV1Api(kind.api).list_resource_slice(field_selector=f"spec.driver={DRA_DRIVER}").items
    return {item.spec.node_name: sorted(device.name for device in item.spec.devices) for item in slices}


@dataclass
class Torch:
    """PyTorch and the test programs in the workers' shared folder (/shared): a pod of the operator's image runs them
    with `pod_spec`. No 6 GB image is copied into each node, as on a cluster with a shared filesystem."""
    python_path: str
    programs: str

    def pod_spec(self, command: list[str], image: str) -> dict:
        return {"containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "command": command,
                                "env": [{"name": "PYTHONPATH", "value": self.python_path}],
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                "volumeMounts": [{"name": "shared", "mountPath": "/shared", "readOnly": True}]}],
                "volumes": [{"name": "shared", "hostPath": {"path": "/shared", "type": "Directory"}}],
                "terminationGracePeriodSeconds": 2}


@pytest.fixture(scope="package")
def torch(kind) -> Torch:
    """torch from PyPI installed once into the shared folder by the image's own Python (kept between runs, like the
    build cache), and this run's programs copied beside it."""
    shared = Path(kind.env["SUPERPOD_KIND_SHARED"])
    target = shared / f"torch-{TORCH_VERSION}"
    if not (target / "torch").is_dir():
        partial = shared / f"torch-{TORCH_VERSION}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        timed(f"torch {TORCH_VERSION} installed into the workers' shared folder", "docker", "run", "--rm",
              "--volume", f"{shared}:/shared", "python:3.11-slim", "pip", "install", "--quiet", "--no-cache-dir",
              "--disable-pip-version-check", "--root-user-action=ignore", "--target", f"/shared/{partial.name}",
              f"torch=={TORCH_VERSION}", "numpy", env=kind.env)
        partial.rename(target)
    programs = shared / "e2e"
    shutil.rmtree(programs, ignore_errors=True)
    shutil.copytree(REPO / "tests/e2e/torch", programs)
    return Torch(python_path=f"/shared/{target.name}", programs="/shared/e2e")


E2E_LABEL = "superpod.dev/e2e"


@pytest.fixture(scope="package")
def namespace(kind):
    """One namespace for the whole run, so the last test can audit every pod the operator bound. A kept cluster
    (SUPERPOD_KEEP_KIND) may still hold an earlier run's: its gangs would hold the GPUs, so it goes first."""
    core = client.CoreV1Api(kind.api)
    for stale in core.list_namespace(label_selector=E2E_LABEL).items:
        core.delete_namespace(stale.metadata.name)
    wait_for(lambda: not core.list_namespace(label_selector=E2E_LABEL).items, 180, "earlier e2e namespaces gone")
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": {E2E_LABEL: "true"}}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def jobs(kind, namespace) -> Jobs:
    return Jobs(kind.api, namespace)
