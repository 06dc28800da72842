"""A SIMULATED NVIDIA device plugin: a hardware stand-in for kind clusters, whose real kubelets have no GPUs.

It is a real kubelet device-plugin gRPC server (API v1beta1) that advertises `nvidia.com/gpu` with fake device IDs
(`SIM-GPU-<node>-<index>`, all Healthy), so the kubelet admits GPU pods. No GPU, driver or device node is touched:
Allocate only sets environment variables (NVIDIA_VISIBLE_DEVICES with the fake IDs, SUPERPOD_SIMULATED_GPU=1) and
mounts nothing. Never run it beside NVIDIA's real device plugin.

Lifecycle: serve on a unix socket in the kubelet's device-plugin folder, register through kubelet.sock there, then
poll: when the kubelet restarts it deletes plugin sockets and recreates kubelet.sock, and the plugin serves and
registers again. On stop the socket is removed."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from superpod.hardware.deviceplugin_api import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
RESOURCE = "nvidia.com/gpu"
PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET = "kubelet.sock"
SOCKET_NAME = "superpod-sim-gpu.sock"
HEALTHY = "Healthy"
MAX_ID_LENGTH = 63  # the API's limit on a device ID
SIMULATED_ENV = "SUPERPOD_SIMULATED_GPU"


def default_node_name() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


def device_ids(node_name: str, count: int) -> list[str]:
    """SIM-GPU-<node>-<index>; the node part is cut so each ID fits the API's 63 characters (IDs are per node)."""
    room = MAX_ID_LENGTH - len(f"SIM-GPU--{max(count - 1, 0)}")
    return [f"SIM-GPU-{node_name[:room]}-{index}" for index in range(count)]


class SimDevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    """The DevicePlugin service for one serving of the socket; `close()` ends its ListAndWatch streams."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.rank = {device_id: index for index, device_id in enumerate(ids)}
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()

    def GetDevicePluginOptions(self, request: api_pb2.Empty, context: grpc.ServicerContext):
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: api_pb2.Empty, context: grpc.ServicerContext) -> Iterator:
        yield api_pb2.ListAndWatchResponse(
            devices=[api_pb2.Device(ID=device_id, health=HEALTHY) for device_id in self.ids])
        # The devices never change: hold the stream open until this serving ends or the kubelet hangs up.
        while context.is_active() and not self.closed.wait(1.0):
            pass

    def GetPreferredAllocation(self, request: api_pb2.PreferredAllocationRequest, context: grpc.ServicerContext):
        return api_pb2.PreferredAllocationResponse(container_responses=[
            api_pb2.ContainerPreferredAllocationResponse(deviceIDs=self.preferred(container))
            for container in request.container_requests])

    def preferred(self, container: api_pb2.ContainerPreferredAllocationRequest) -> list[str]:
        """The must-include devices, then the first available ones in device order, until the size; sorted."""
        by_rank = sorted(set(container.available_deviceIDs), key=self.sort_key)
        chosen = list(dict.fromkeys(container.must_include_deviceIDs))
        chosen += [device_id for device_id in by_rank if device_id not in chosen]
        return sorted(chosen[:max(container.allocation_size, len(container.must_include_deviceIDs))],
                      key=self.sort_key)

    def sort_key(self, device_id: str) -> tuple[int, str]:
        return self.rank.get(device_id, len(self.ids)), device_id

    def Allocate(self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext):
        responses = []
        for container in request.container_requests:
            unknown = [device_id for device_id in container.devices_ids if device_id not in self.rank]
            if unknown:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown simulated devices: {', '.join(unknown)}")
            # Environment only: no device nodes, no mounts, nothing that needs real hardware.
            envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(container.devices_ids), SIMULATED_ENV: "1"}
            responses.append(api_pb2.ContainerAllocateResponse(envs=envs))
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: api_pb2.PreStartContainerRequest, context: grpc.ServicerContext):
        return api_pb2.PreStartContainerResponse()


def file_identity(path: Path) -> tuple[int, int] | None:
    """(inode, ctime) of a file, or None: tells a recreated kubelet.sock from the one registered with."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_ctime_ns


class SimDevicePlugin:
    """Serves the simulated devices and keeps them registered with the kubelet until `stop` is set."""

    def __init__(self, gpus: int = 8, node_name: str | None = None, plugin_dir: str | Path = PLUGIN_DIR,
                 resource: str = RESOURCE, poll_interval: float = 1.0) -> None:
        self.node_name = node_name or default_node_name()
        self.ids = device_ids(self.node_name, gpus)
        self.plugin_dir = Path(plugin_dir).resolve()
        self.socket_path = self.plugin_dir / SOCKET_NAME
        self.kubelet_socket = self.plugin_dir / KUBELET_SOCKET
        self.resource = resource
        self.poll_interval = poll_interval
        self.server: grpc.Server | None = None
        self.servicer: SimDevicePluginServicer | None = None
        self.registered_with: tuple[int, int] | None = None  # identity of the kubelet.sock registered through
        self.last_error = ""

    def run(self, stop: threading.Event) -> None:
        log.info("SIMULATED NVIDIA device plugin (a hardware stand-in; no GPU is touched): %d fake %s devices on "
                 "node %s, socket %s", len(self.ids), self.resource, self.node_name, self.socket_path)
        try:
            while not stop.is_set():
                self.step()
                stop.wait(self.poll_interval)
        finally:
            self.stop_serving()
            log.info("simulated device plugin stopped")

    def step(self) -> None:
        """One poll: serve again after a kubelet restart, register when not registered."""
        kubelet = file_identity(self.kubelet_socket)
        if self.server is not None and not self.socket_path.exists():
            log.info("plugin socket %s was removed (kubelet restart?): serving and registering again", self.socket_path)
            self.stop_serving()
        elif self.registered_with is not None and kubelet != self.registered_with:
            log.info("%s was recreated (kubelet restart): serving and registering again", self.kubelet_socket)
            self.stop_serving()
        if self.server is None:
            self.serve()
        if self.registered_with is None and kubelet is not None:
            self.register(kubelet)

    def serve(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)  # left by an earlier run
        self.servicer = SimDevicePluginServicer(self.ids)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.servicer, self.server)
        self.server.add_insecure_port(f"unix://{self.socket_path}")
        self.server.start()

    def stop_serving(self) -> None:
        self.registered_with = None
        if self.servicer is not None:
            self.servicer.close()
        if self.server is not None:
            self.server.stop(grace=None).wait()
        self.server, self.servicer = None, None
        self.socket_path.unlink(missing_ok=True)

    def register(self, kubelet: tuple[int, int]) -> None:
        request = api_pb2.RegisterRequest(
            version=API_VERSION, endpoint=SOCKET_NAME, resource_name=self.resource,
            options=api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True))
        try:
            with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
                api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=5)
        except grpc.RpcError as error:
            message = f"{error.code().name}: {error.details()}"
            if message != self.last_error:  # a kubelet that is down would repeat it every poll
                log.warning("registering with %s failed, will retry: %s", self.kubelet_socket, message)
            self.last_error = message
            return
        self.registered_with, self.last_error = kubelet, ""
        log.info("registered %s (%d simulated devices) with the kubelet", self.resource, len(self.ids))
