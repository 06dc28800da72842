"""The simulated device plugin against a fake kubelet: registration, the DevicePlugin service as the kubelet calls it,
and registering again after a kubelet restart (its socket deleted, kubelet.sock recreated)."""

from __future__ import annotations

import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from superpod.hardware.deviceplugin import SOCKET_NAME, SimDevicePlugin, device_ids
from superpod.hardware.deviceplugin_api import api_pb2, api_pb2_grpc

WAIT = 3.0  # seconds for anything the plugin does on its own (it polls every 0.05 s here)
IDS = [f"SIM-GPU-node-a-{index}" for index in range(8)]


class FakeKubelet(api_pb2_grpc.RegistrationServicer):
    """The kubelet's Registration service on <folder>/kubelet.sock; keeps each RegisterRequest."""

    def __init__(self, folder: Path) -> None:
        self.requests: queue.Queue[api_pb2.RegisterRequest] = queue.Queue()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{folder / 'kubelet.sock'}")
        self.server.start()

    def Register(self, request: api_pb2.RegisterRequest, context: grpc.ServicerContext) -> api_pb2.Empty:
        self.requests.put(request)
        return api_pb2.Empty()

    def next_request(self) -> api_pb2.RegisterRequest:
        try:
            return self.requests.get(timeout=WAIT)
        except queue.Empty:
            pytest.fail(f"the plugin did not register within {WAIT}s")

    def stop(self) -> None:
        self.server.stop(grace=None).wait()


@pytest.fixture
def folder() -> Iterator[Path]:
    # Short on purpose: a unix socket path must fit in 107 bytes, which pytest's tmp_path may not.
    with tempfile.TemporaryDirectory(prefix="sim-dp-") as name:
        yield Path(name)


@pytest.fixture
def plugin_running(folder: Path) -> Iterator[tuple[FakeKubelet, SimDevicePlugin]]:
    kubelet = FakeKubelet(folder)
    plugin = SimDevicePlugin(gpus=8, node_name="node-a", plugin_dir=folder, poll_interval=0.05)
    stop = threading.Event()
    thread = threading.Thread(target=plugin.run, args=(stop,), daemon=True)
    thread.start()
    yield kubelet, plugin
    stop.set()
    thread.join(timeout=WAIT)
    kubelet.stop()
    assert not thread.is_alive()
    assert not (folder / SOCKET_NAME).exists(), "the plugin socket is removed on stop"


def plugin_stub(folder: Path) -> tuple[grpc.Channel, api_pb2_grpc.DevicePluginStub]:
    channel = grpc.insecure_channel(f"unix://{folder / SOCKET_NAME}")
    return channel, api_pb2_grpc.DevicePluginStub(channel)


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def stream_ended(stream: Iterator[api_pb2.ListAndWatchResponse]) -> bool:
    """True if the stream ends (closed or cancelled by the plugin) rather than sending more or running out of time."""
    try:
        next(stream)
    except StopIteration:
        return True
    except grpc.RpcError as error:
        return error.code() != grpc.StatusCode.DEADLINE_EXCEEDED
    return False


def assert_register_request(request: api_pb2.RegisterRequest) -> None:
    assert request.version == "v1beta1"
    assert request.endpoint == SOCKET_NAME
    assert request.resource_name == "nvidia.com/gpu"
    assert request.options.get_preferred_allocation_available
    assert not request.options.pre_start_required


def test_serves_the_kubelet_and_registers_again_after_a_restart(folder, plugin_running):
    kubelet, _plugin = plugin_running
    assert_register_request(kubelet.next_request())
    channel, stub = plugin_stub(folder)
    with channel:
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=WAIT)
        assert options.get_preferred_allocation_available and not options.pre_start_required

        stream = stub.ListAndWatch(api_pb2.Empty(), timeout=20)
        first = next(stream)
        assert [device.ID for device in first.devices] == IDS
        assert {device.health for device in first.devices} == {"Healthy"}
        time.sleep(0.2)
        assert not stream.done(), "ListAndWatch keeps the stream open"

        allocated = stub.Allocate(api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=[IDS[3], IDS[5]])]), timeout=WAIT)
        (container,) = allocated.container_responses
        assert dict(container.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{IDS[3]},{IDS[5]}", "SUPERPOD_SIMULATED_GPU": "1"}
        assert not container.mounts and not container.devices and not container.cdi_devices

        def preferred(available: list[str]) -> list[str]:
            request = api_pb2.PreferredAllocationRequest(container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=[IDS[6]], allocation_size=3)])
            (answer,) = stub.GetPreferredAllocation(request, timeout=WAIT).container_responses
            return list(answer.deviceIDs)

        assert preferred([IDS[7], IDS[6], IDS[2], IDS[4]]) == [IDS[2], IDS[4], IDS[6]]
        assert preferred([IDS[4], IDS[2], IDS[6], IDS[7]]) == [IDS[2], IDS[4], IDS[6]]

        assert stub.PreStartContainer(api_pb2.PreStartContainerRequest(), timeout=WAIT) == \
            api_pb2.PreStartContainerResponse()

        # A kubelet restart deletes the plugin sockets: the plugin must serve again and register again.
        (folder / SOCKET_NAME).unlink()
        assert_register_request(kubelet.next_request())
        assert stream_ended(stream), "the old serving, and its ListAndWatch stream, ended"
    assert (folder / SOCKET_NAME).exists()
    channel, stub = plugin_stub(folder)
    with channel:
        assert [device.ID for device in next(stub.ListAndWatch(api_pb2.Empty(), timeout=WAIT)).devices] == IDS


def test_registers_with_a_recreated_kubelet_socket(folder, plugin_running):
    kubelet, plugin = plugin_running
    kubelet.next_request()
    # Let the plugin see the answer first: stopping the kubelet mid-call would fail the call and retry it anyway.
    wait_until(lambda: plugin.registered_with is not None)
    kubelet.stop()
    (folder / "kubelet.sock").unlink(missing_ok=True)
    restarted = FakeKubelet(folder)  # the plugin's socket is left in place: only kubelet.sock is new
    try:
        assert_register_request(restarted.next_request())
    finally:
        restarted.stop()


def test_allocate_refuses_unknown_devices(folder, plugin_running):
    plugin_running[0].next_request()
    channel, stub = plugin_stub(folder)
    with channel, pytest.raises(grpc.RpcError) as raised:
        stub.Allocate(api_pb2.AllocateRequest(container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=["GPU-real-one"])]), timeout=WAIT)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_device_ids_fit_the_api_limit():
    assert device_ids("node-a", 2) == ["SIM-GPU-node-a-0", "SIM-GPU-node-a-1"]
    long_ids = device_ids("n" * 200, 16)
    assert all(len(device_id) <= 63 for device_id in long_ids) and len(set(long_ids)) == 16
