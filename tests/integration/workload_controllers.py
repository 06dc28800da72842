"""Other projects' workload controllers (built by hack/build.sh at the versions it pins) beside the local control
plane: JobSet's, the Kubeflow Trainer's (v2) and the Kubeflow Training Operator's (v1). Each gets its CRDs; JobSet
and the Trainer serve their webhooks on 127.0.0.1 with the local CA's certificate (the API server's own, which names
127.0.0.1), and have the webhook configurations from their modules pointed there. The Training Operator's webhooks
only validate, and its certificate rotator makes certificates for a Service name only (which the local control
plane cannot route to), so they are not registered: its jobs are not validated by it here."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from superpod.localcluster.cluster import LocalCluster
from tests.integration.operator_env import free_port
from tests.integration.wait import wait_for

# Each controller: its config file's apiVersion, its CRD files, its Configuration, where it reads its certificate.
JOBSET = {"name": "jobset", "config": "config.jobset.x-k8s.io/v1alpha1", "crds": ["jobset.x-k8s.io_jobsets.yaml"]}
TRAINER = {"name": "trainer", "config": "config.trainer.kubeflow.org/v1alpha1",
           "crds": ["trainer.kubeflow.org_trainjobs.yaml", "trainer.kubeflow.org_trainingruntimes.yaml",
                    "trainer.kubeflow.org_clustertrainingruntimes.yaml"]}
TRAINING_OPERATOR = {"name": "training-operator", "crds": ["kubeflow.org_pytorchjobs.yaml"]}
PODGROUP_CRD = "trainer-config/scheduling.x-k8s.io_podgroups.yaml"  # scheduler-plugins' coscheduling PodGroup
POD_SELECTOR = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}


class WorkloadController:
    def __init__(self, cluster, workdir: Path, spec: dict) -> None:
        self.cluster, self.workdir, self.spec = cluster, workdir / spec["name"], spec
        self.bin = Path(cluster.kubectl_path).parent
        self.files = self.bin / f"{spec['name']}-config"
        self.proc: subprocess.Popen | None = None
        self.webhooks: list[tuple[str, str]] = []  # (kind, name) applied, for teardown

    def start(self) -> None:
        pki, name = self.cluster.local.pki, self.spec["name"]
        certs = self.workdir / "k8s-webhook-server" / "serving-certs"  # controller-runtime's default, under TMPDIR
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copy(pki / "apiserver.crt", certs / "tls.crt")
        shutil.copy(pki / "apiserver.key", certs / "tls.key")
        webhook, health = free_port(), free_port()
        for crd in self.spec["crds"]:
            apply_crd(self.cluster, self.files / crd)
        env = {**os.environ, "TMPDIR": str(self.workdir), "KUBECONFIG": str(self.cluster.kubeconfig)}
        if name == "training-operator":  # flags, not a config file; it makes PodGroups for superpod-scheduler
            self.cluster.kubectl("create", "namespace", "kubeflow", check=False)  # its Secret, as its release makes it
            self.cluster.kubectl("create", "secret", "generic", "training-operator-webhook-cert", "-n", "kubeflow",
                                 check=False)
            self._run([f"--health-probe-bind-address=127.0.0.1:{health}", "--metrics-bind-address=0",
                       f"--webhook-server-port={webhook}", "--enable-scheme=pytorchjob",
                       "--gang-scheduler-name=superpod-scheduler"], {**env, "MY_POD_NAMESPACE": "kubeflow"}, health,
                      self._mount_secret)
            return
        config = {"apiVersion": self.spec["config"], "kind": "Configuration", "leaderElection": {"leaderElect": False},
                  "webhook": {"port": webhook, "host": "127.0.0.1"}, "metrics": {"bindAddress": "0"},
                  "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}}
        config["internalCertManagement" if name == "jobset" else "certManagement"] = {"enable": False}
        if name == "jobset":
            config["webhook"]["certDir"] = str(certs)
        (self.workdir / "config.yaml").write_text(yaml.safe_dump(config))
        self._run([f"--config={self.workdir / 'config.yaml'}"], env, health)
        ca = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
        docs = [doc for doc in yaml.safe_load_all((self.files / "manifests.yaml").read_text()) if doc]
        for doc in docs:
            doc["metadata"]["name"] = f"{name}-{doc['metadata']['name']}"
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{webhook}{path}", "caBundle": ca}
                if "pods" in hook["rules"][0]["resources"]:  # only JobSet's own pods, as its release applies it
                    hook["objectSelector"] = POD_SELECTOR
            self.webhooks.append((doc["kind"], doc["metadata"]["name"]))
        self._kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def _run(self, args: list[str], env: dict, health: int, before_ready=None) -> None:
        name = self.spec["name"]
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen([str(self.bin / name), *args], stdout=log, stderr=log, env=env)
        log.close()
        if before_ready:
            before_ready()
        wait_for(lambda: LocalCluster.http_ok(f"http://127.0.0.1:{health}/readyz"), 90, f"the {name} controller ready")

    def _mount_secret(self) -> None:
        """What the kubelet's secret volume does in a pod: the certificate its rotator wrote into its Secret, as
        files where it waits for them (a fixed path under /tmp)."""
        def written() -> dict | None:
            out = self.cluster.kubectl("get", "secret", "training-operator-webhook-cert", "-n", "kubeflow", "-o",
                                       "json", check=False)
            data = (json.loads(out.stdout).get("data") or {}) if out.returncode == 0 else {}
            return data if data.get("tls.crt") and data.get("tls.key") else None

        data = wait_for(written, 60, "the Training Operator's certificate in its Secret")
        mounted = Path("/tmp/k8s-webhook-server/serving-certs")
        mounted.mkdir(parents=True, exist_ok=True)
        for key, value in data.items():
            (mounted / key).write_bytes(base64.b64decode(value))

    def stop(self) -> None:
        for kind, name in self.webhooks:
            self.cluster.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def _kubectl(self, *args: str, input: str | None = None) -> None:
        out = self.cluster.kubectl(*args, check=False, input=input)
        assert out.returncode == 0, f"kubectl {' '.join(args[:2])} failed: {out.stdout}{out.stderr}"


@contextlib.contextmanager
def running(cluster, workdir: Path, spec: dict):
    """The controller of `spec` running beside the local control plane (skipped on another cluster)."""
    if cluster.local is None:
        pytest.skip("other projects' controllers run beside the local control plane only")
    controller = WorkloadController(cluster, workdir, spec)
    try:
        controller.start()
        yield controller
    finally:
        controller.stop()


def apply_crd(cluster, path: Path) -> None:
    """Apply a CRD (server-side: some are too large for the last-applied annotation) and wait until it is served."""
    out = cluster.kubectl("apply", "--server-side", "-f", str(path), check=False)
    assert out.returncode == 0, f"applying {path.name} failed: {out.stdout}{out.stderr}"
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    established = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    wait_for(lambda: cluster.kubectl("get", f"crd/{name}", "-o", established, check=False).stdout == "True", 60,
             f"CRD {name} established")
