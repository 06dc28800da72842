"""Helpers for tests that run the operator (`superpod run`, a real subprocess) against the real API server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from superpod.hardware import nodes, presets
from tests.integration.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION = "superpod.dev", "v1alpha1"
TOPOLOGY = {
    "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterTopology", "metadata": {"name": "default"},
    "spec": {"levels": [{"name": "spine", "nodeLabel": "superpod.dev/spine"},
                        {"name": "leaf", "nodeLabel": "superpod.dev/leaf"},
                        {"name": "nvlink", "nodeLabel": "nvidia.com/gpu.clique"},
                        {"name": "node", "nodeLabel": "kubernetes.io/hostname"}]},
}


class OperatorProcess:
    """`superpod run` as a child process that a test can kill at any instant and start again."""

    def __init__(self, kubeconfig: Path, log: Path, metrics_port: int = 0, args: tuple[str, ...] = (
            "run", "--namespace", "superpod-system", "--mig-timeout", "20", "--log-level", "INFO")) -> None:
        self.kubeconfig, self.log, self.metrics_port, self.args, self.proc = kubeconfig, log, metrics_port, args, None

    def start(self) -> None:
        out = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "superpod.cli", *self.args,
             *(["--metrics-port", str(self.metrics_port)] if self.args[0] == "run" else [])],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        out.close()

    def kill(self) -> None:
        """SIGKILL: no cleanup, as a crash or an OOM kill would leave it."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LEAF_LABEL, CLIQUE_LABEL = "superpod.dev/leaf", "nvidia.com/gpu.clique"
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def sim_cluster(api: client.ApiClient, preset: str, count: int, own_leaves: bool = False, dra: bool = False,
                dra_only: bool = False, **shape: int) -> tuple[str, list[dict]]:
    """A simulated cluster of its own (unique node names), all nodes Ready and their not-ready taint lifted;
    `own_leaves`: its leaves' and NVLink cliques' names its own too (otherwise every test's cluster shares the
    preset's, so a domain spans them all); `dra`: its nodes publish their ResourceSlices; `dra_only`: and advertise
    no nvidia.com/gpu."""
    name = f"t{uuid.uuid4().hex[:6]}"
    objs = presets.preset_nodes(preset, count, name, **shape)
    if own_leaves:
        for obj in objs:
            labels = obj["metadata"]["labels"]
            for label in (LEAF_LABEL, CLIQUE_LABEL):
                if label in labels:
                    labels[label] = f"{name}-{labels[label]}"
    nodes.create_nodes(api, objs, dra=dra, dra_only=dra_only)
    core = client.CoreV1Api(api)

    def ready():  # and the controller-manager's not-ready taint lifted: until then no job may use the node
        items = core.list_node(label_selector=f"{presets.SIM_LABEL}={name}").items
        return len(items) == count and all(not any(t.key in NOT_READY_TAINTS for t in n.spec.taints or []) and any(
            c.type == "Ready" and c.status == "True" for c in n.status.conditions or []) for n in items)
    wait_for(ready, 60, f"{count} simulated nodes Ready and untainted")
    return name, objs


def training_job(name: str, cluster: str, replicas: int, gpus: int | None = None, mig: str | None = None,
                 annotations: dict | None = None, **spec) -> dict:
    resources = {"gpus": gpus} if gpus else {"migProfile": mig}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {"replicas": replicas, "resources": resources, **spec, "template": {
            "metadata": {"annotations": annotations or {}},
            "spec": {"nodeSelector": {presets.SIM_LABEL: cluster},
                     "containers": [{"name": "main", "image": "trainer", "command": ["torchrun", "train.py"]}]}}},
    }


class Jobs:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.ns = namespace

    def create(self, body: dict) -> dict:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "trainingjobs", body)

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "trainingjobs", name)

    def patch(self, name: str, body: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, "trainingjobs", name, body)

    def status(self, name: str) -> dict:
        return self.get(name).get("status") or {}

    def phase(self, name: str) -> str | None:
        return self.status(name).get("phase")

    def wait_phase(self, name: str, phase: str, timeout: float = 60) -> dict:
        wait_for(lambda: self.phase(name) == phase, timeout, f"{name} {phase} (status {self.status(name)})")
        return self.status(name)

    def wait_message(self, name: str, text: str, timeout: float = 30) -> str:
        """The status message of job `name` once it contains `text`; on timeout, the last message is in the error."""
        said: list[str] = [""]

        def found():
            said[0] = self.status(name).get("message") or ""
            return text in said[0] and said[0]
        try:
            return wait_for(found, timeout, f"a message on {name} naming {text!r}")
        except AssertionError as e:
            raise AssertionError(f"{e}; its last message: {said[0]!r}") from None

    def pods(self, name: str, live: bool = True) -> list:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"superpod.dev/job-name={name}").items
        return [p for p in pods if not (live and p.metadata.deletion_timestamp)]

    def wait_event(self, name: str, reason: str, text: str = "", timeout: float = 30) -> str:
        """The message of the first Event on job `name` with `reason` (and containing `text`)."""
        def found():
            return next((m for r, m in self.events(name) if r == reason and text in (m or "")), None)
        return wait_for(found, timeout, f"event {reason} on {name} (have {self.events(name)})")

    def events(self, name: str) -> list[tuple[str, str]]:
        evs = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        return [(e.reason, e.message) for e in evs]


def service_account_client(api: client.ApiClient, namespace: str, name: str) -> tuple[str, client.ApiClient]:
    """A token of ServiceAccount namespace/name from the TokenRequest API (asked as `api`'s user), and a client that
    authenticates with it alone: the API server decides what it may do by RBAC, as for any workload or user."""
    request = {"spec": {"expirationSeconds": 3600}}
    token = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request).status.token
    base, config = api.configuration, client.Configuration()
    config.host, config.ssl_ca_cert = base.host, base.ssl_ca_cert
    config.api_key = {"authorization": f"Bearer {token}"}
    return token, client.ApiClient(config)


def once_allowed(call):
    """`call`'s answer, or None while RBAC refuses it (aggregation and new bindings take effect within moments)."""
    try:
        return call()
    except ApiException as e:
        assert e.status == 403, e.body
        return None


def ensure_topology(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    try:
        custom.create_cluster_custom_object(GROUP, VERSION, "clustertopologies", TOPOLOGY)
    except ApiException as e:
        if e.status != 409:
            raise
