"""A real Kubernetes control plane on this machine: etcd, kube-apiserver (RBAC, service-account tokens),
kube-controller-manager, kube-scheduler and the KWOK controller for the simulated GPU nodes.

Binaries come from hack/build.sh (built from Go modules, cached by version). State, logs and the kubeconfig live in
one folder, `SUPERPOD_CLUSTER_DIR` or ~/.local/state/superpod/cluster."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from superpod.localcluster import certs

REPO = Path(__file__).resolve().parents[3]
KWOK_NODE_SELECTOR = "type=kwok"
# A long node lease keeps heartbeat writes low at 10,000 nodes (renewed every quarter); the controller-manager's
# grace period is set above it so healthy simulated nodes never flip to NotReady.
NODE_LEASE_SECONDS = 600
# More parallel stage workers than KWOK's default 4: thousands of nodes become Ready in seconds.
KWOK_OPTIONS = """apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodePlayStageParallelism: 16
  podPlayStageParallelism: 16
  nodeLeaseParallelism: 8
---
"""
# The API server's own record of who wrote what, when (logs/audit.log): the writes the operator makes, at Metadata
# level (user agent, verb, object, times, response code). Tests and benchmarks read it (localcluster/audit.py).
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
  resources:
  - {group: "", resources: [pods, pods/binding, services, configmaps, nodes, events]}
  - {group: coordination.k8s.io, resources: [leases]}
  - {group: superpod.dev, resources: [trainingjobs, trainingjobs/status, gpuqueues/status, gpuusages]}
- level: None
"""


@dataclass(frozen=True)
class Ports:
    etcd: int = int(os.environ.get("SUPERPOD_ETCD_PORT", 12379))
    etcd_peer: int = int(os.environ.get("SUPERPOD_ETCD_PEER_PORT", 12380))
    apiserver: int = int(os.environ.get("SUPERPOD_APISERVER_PORT", 16443))
    controller_manager: int = int(os.environ.get("SUPERPOD_KCM_PORT", 20257))
    scheduler: int = int(os.environ.get("SUPERPOD_SCHEDULER_PORT", 20259))
    kwok: int = int(os.environ.get("SUPERPOD_KWOK_PORT", 20247))

    def all(self) -> dict[str, int]:
        return dict(self.__dict__)


# The client rate of kube-controller-manager and kube-scheduler: their shipped 50/s would make either the slowest
# writer of a benchmark (kube-scheduler binds the pods of Kueue's jobs, one binding and one Event a pod).
CLIENT_RATE = ("--kube-api-qps=500", "--kube-api-burst=1000")
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def state_dir() -> Path:
    default = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local/state")) / "superpod/cluster"
    return Path(os.environ.get("SUPERPOD_CLUSTER_DIR", default))


class ClusterError(RuntimeError):
    pass


class LocalCluster:
    def __init__(self, root: Path | None = None, ports: Ports | None = None) -> None:
        self.root = root or state_dir()
        self.ports = ports or Ports()
        self.pki = self.root / "pki"
        self.logs = self.root / "logs"
        self.run = self.root / "run"
        self.kubeconfig = self.root / "kubeconfig"

    # ---- binaries -------------------------------------------------------------------------------------------
    def build(self, quiet: bool = False, for_tests: bool = False) -> Path:
        """Run hack/build.sh (a no-op when the cache has this version) and return the folder of binaries: what the
        control plane runs, and with `for_tests` what the tests run beside it (Helm, JobSet, Kubeflow)."""
        script = REPO / "hack" / "build.sh"
        if not script.exists():
            raise ClusterError(f"{script} not found: run from a checkout of superpod-scheduler")
        if shutil.which("go") is None and not os.environ.get("SUPERPOD_BIN"):
            raise ClusterError("Go is not installed: hack/build.sh needs it to build the Kubernetes components")
        flags = [] if for_tests else ["--control-plane"]
        out = subprocess.run(["bash", str(script), *flags], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL if quiet else None, text=True)
        if out.returncode != 0:
            raise ClusterError(f"hack/build.sh failed with exit code {out.returncode}")
        return Path(out.stdout.strip().splitlines()[-1])

    # ---- lifecycle ------------------------------------------------------------------------------------------
    def up(self, bin_dir: Path | None = None, timeout: float = 120) -> None:
        if self.running():
            if self.healthy():
                return
            self.down()
        bin_dir = bin_dir or Path(os.environ.get("SUPERPOD_BIN") or self.build())
        missing = [c for c in (*COMPONENTS, "kubectl") if not (bin_dir / c).exists()]
        if missing:
            raise ClusterError(f"{', '.join(missing)} missing in {bin_dir}: run hack/build.sh")
        for port in self.ports.all().values():
            if _port_in_use(port):
                raise ClusterError(f"port {port} is in use; `superpod cluster down` or set SUPERPOD_*_PORT")
        for d in (self.logs, self.run):
            d.mkdir(parents=True, exist_ok=True)
        certs.ensure(self.pki)
        self._write_kubeconfig()
        self._write_kwok_config()
        (self.root / "audit-policy.yaml").write_text(AUDIT_POLICY)
        try:
            self._start_all(bin_dir, time.monotonic() + timeout)
        except BaseException:
            self.down()
            raise

    def _start_all(self, bin_dir: Path, deadline: float) -> None:
        self._start("etcd", bin_dir, self._etcd_args())
        self._wait(lambda: self.http_ok(f"http://127.0.0.1:{self.ports.etcd}/health"), "etcd", deadline)
        self._start("kube-apiserver", bin_dir, self._apiserver_args())
        self._wait(lambda: self._api_ok("/readyz"), "kube-apiserver", deadline)
        self._start("kube-controller-manager", bin_dir, self._controller_manager_args())
        self._start("kube-scheduler", bin_dir, self._scheduler_args())
        self._release_node_leases()
        self._start("kwok", bin_dir, self._kwok_args())
        self._wait(lambda: self._https_ok(self.ports.controller_manager), "kube-controller-manager", deadline)
        self._wait(lambda: self._https_ok(self.ports.scheduler), "kube-scheduler", deadline)
        self._wait(lambda: self.http_ok(f"http://127.0.0.1:{self.ports.kwok}/healthz"), "kwok", deadline)
        self._wait(self._default_service_account, "the default ServiceAccount", deadline)

    def down(self, timeout: float = 20) -> None:
        """Stop every component (newest first), and whatever else was started beside them (the demo's operator),
        and leave no process or bound port behind."""
        extras = sorted({f.stem for f in self.run.glob("*.pid")} - set(COMPONENTS)) if self.run.exists() else []
        for name in [*extras, *reversed(COMPONENTS)]:
            pid = self.pid(name)
            if pid is not None:
                _kill(pid, timeout)
            (self.run / f"{name}.pid").unlink(missing_ok=True)
        deadline = time.monotonic() + timeout
        while any(_port_in_use(p) for p in self.ports.all().values()) and time.monotonic() < deadline:
            time.sleep(0.2)

    def wipe(self) -> None:
        """Stop and delete all state (etcd data, certificates, logs)."""
        self.down()
        shutil.rmtree(self.root, ignore_errors=True)

    def status(self) -> dict[str, dict]:
        out = {}
        for name in COMPONENTS:
            pid = self.pid(name)
            out[name] = {"pid": pid, "running": pid is not None and _alive(pid)}
        out["kube-apiserver"]["ready"] = self._api_ok("/readyz")
        return out

    def running(self) -> bool:
        return any(v["running"] for v in self.status().values())

    def healthy(self) -> bool:
        st = self.status()
        return all(v["running"] for v in st.values()) and st["kube-apiserver"]["ready"]

    # ---- arguments ------------------------------------------------------------------------------------------
    def _etcd_args(self) -> list[str]:
        p = self.ports
        return [
            f"--data-dir={self.root / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{p.etcd}",
            f"--advertise-client-urls=http://127.0.0.1:{p.etcd}",
            f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
            f"--initial-cluster=default=http://127.0.0.1:{p.etcd_peer}",
            "--quota-backend-bytes=8589934592",
            "--unsafe-no-fsync",  # a throwaway dev cluster: speed over durability
            "--log-level=warn",
        ]

    def _apiserver_args(self) -> list[str]:
        pki = self.pki
        return [
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports.apiserver}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=Node,RBAC",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            "--max-requests-inflight=800",
            "--max-mutating-requests-inflight=400",
            "--endpoint-reconciler-type=none",
            f"--audit-policy-file={self.root / 'audit-policy.yaml'}",
            f"--audit-log-path={self.logs / 'audit.log'}",
            "--audit-log-format=json",
            "--audit-log-maxsize=0",
            "--v=1",
        ]

    def _client_component_args(self, port: int) -> list[str]:
        """What the controller-manager and the scheduler share: credentials, a local secure port, no election."""
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            "--v=1",
        ]

    def _controller_manager_args(self) -> list[str]:
        return [
            *self._client_component_args(self.ports.controller_manager),
            f"--service-account-private-key-file={self.pki / 'sa.key'}",
            f"--root-ca-file={self.pki / 'ca.crt'}",
            "--use-service-account-credentials=true",
            "--controllers=*,-node-ipam-controller",
            f"--node-monitor-grace-period={NODE_LEASE_SECONDS + 60}s",
            *CLIENT_RATE,
        ]

    def _scheduler_args(self) -> list[str]:
        return [*self._client_component_args(self.ports.scheduler), *CLIENT_RATE]

    def _kwok_args(self) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self.root / 'kwok.yaml'}",
            f"--manage-nodes-with-label-selector={KWOK_NODE_SELECTOR}",
            f"--server-address=127.0.0.1:{self.ports.kwok}",
            f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            "--cidr=10.244.0.0/16",
            "--node-ip=127.0.0.1",  # simulated nodes: nothing ever connects to them
        ]

    # ---- helpers --------------------------------------------------------------------------------------------
    def _write_kubeconfig(self) -> None:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "superpod-local", "cluster": {
                "server": f"https://127.0.0.1:{self.ports.apiserver}",
                "certificate-authority": str(self.pki / "ca.crt")}}],
            "users": [{"name": "superpod-admin", "user": {
                "client-certificate": str(self.pki / "admin.crt"),
                "client-key": str(self.pki / "admin.key")}}],
            "contexts": [{"name": "superpod-local",
                          "context": {"cluster": "superpod-local", "user": "superpod-admin"}}],
            "current-context": "superpod-local",
        }
        self.kubeconfig.write_text(json.dumps(cfg, indent=2))
        self.kubeconfig.chmod(0o600)

    def _write_kwok_config(self) -> None:
        stages = resources.files("superpod.localcluster").joinpath("kwok-stages.yaml").read_text()
        (self.root / "kwok.yaml").write_text(KWOK_OPTIONS + stages)

    def _start(self, name: str, bin_dir: Path, args: list[str]) -> None:
        self.start_process(name, [str(bin_dir / name), *args])

    def start_process(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start a detached process that `down` stops; its output goes to logs/<name>.log."""
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        log.close()
        (self.run / f"{name}.pid").write_text(str(proc.pid))

    def pid(self, name: str) -> int | None:
        f = self.run / f"{name}.pid"
        try:
            pid = int(f.read_text())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def _wait(self, check, what: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            if check():
                return
            for name in COMPONENTS:
                f = self.run / f"{name}.pid"
                if f.exists() and self.pid(name) is None:
                    raise ClusterError(f"{name} exited; see {self.logs / (name + '.log')}")
            time.sleep(0.25)
        raise ClusterError(f"timed out waiting for {what}; logs in {self.logs}")

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def admin_ssl(self) -> ssl.SSLContext:
        """TLS as the cluster's admin (system:masters): for the API server's own endpoints such as /debug/pprof."""
        return self._ssl(client=True)

    def _ssl(self, client: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        if client:
            ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _api_ok(self, path: str) -> bool:
        if not (self.pki / "admin.crt").exists():
            return False
        return self.http_ok(f"https://127.0.0.1:{self.ports.apiserver}{path}", self._ssl(client=True))

    def _https_ok(self, port: int) -> bool:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # self-signed serving certificate of a local component
        return self.http_ok(f"https://127.0.0.1:{port}/healthz", ctx)

    def _release_node_leases(self) -> None:
        """KWOK takes a node over only through its Lease, under a new random identity each start: after a restart
        the old leases would keep every existing node unmanaged until they expire. Only simulated nodes live here."""
        req = urllib.request.Request(
            f"https://127.0.0.1:{self.ports.apiserver}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            method="DELETE")
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._ssl(client=True)):
                pass
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise ClusterError(f"could not release node leases: {e}") from e

    def _default_service_account(self) -> bool:
        return self._api_ok("/api/v1/namespaces/default/serviceaccounts/default")

    @staticmethod
    def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def _kill(pid: int, timeout: float) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False
