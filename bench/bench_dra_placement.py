"""Placement with DRA devices beside the same cluster with extended resources: dgx-h100 nodes publishing their eight
GPUs as NVIDIA-style ResourceSlices (claims of 8 GPUs by productName per pod) or as nvidia.com/gpu (8 per pod), or
both (DRA pooled: the same claims on nodes whose nvidia.com/gpu and devices are one pool, core/model.Snapshot._pool).
Prints, per cluster size, the medians over --repeats of: building the device book from the slices, one placement of
a 16-pod gang on the empty cluster, and a cycle that places and books --gangs such gangs one after another; and the
same for one-node gangs of 4 pods, each claiming 1 GPU of its own and all sharing a claim of 4, beside 4 pods each
claiming 2 GPUs with one node required (--gangs x 16 of each, so as many GPUs as the 16-pod gangs take). Then,
for DRA, what the cache pays to count GPUs (core/dra/units.py): storing every slice (read, device shapes), counting
each node's GPUs for the queues' capacity once after the slices changed, and what the claim is worth.

    .venv/bin/python bench/bench_dra_placement.py [--nodes 1000,10000] [--gangs 40] [--repeats 3]"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from superpod.api.convert import node_from_k8s  # noqa: E402
from superpod.core.dra.book import DeviceBook  # noqa: E402
from superpod.core.dra.model import read_claim_spec, read_classes, read_slices  # noqa: E402
from superpod.core.model import Level, Snapshot, Topology  # noqa: E402
from superpod.core.placement import place  # noqa: E402
from superpod.core.request import make_request  # noqa: E402
from superpod.hardware import dra_slices, presets  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
CLAIM = read_claim_spec({"devices": {"requests": [{"name": "gpus", "exactly": {
    "deviceClassName": "gpu.nvidia.com", "count": 8, "selectors": [
        {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName == '{H100}'"}}]}}]}}, "bench")


def cluster(count: int):
    objs = presets.preset_nodes("dgx-h100", count)
    nodes = [replace(node_from_k8s(obj), ready=True) for obj in objs]
    slice_objs = [s for obj in objs for s in dra_slices.node_slices(obj)]
    labels = {obj["metadata"]["name"]: obj["metadata"]["labels"] for obj in objs}
    return nodes, slice_objs, labels


def topology() -> Topology:
    return Topology((Level("spine", "superpod.dev/spine"), Level("leaf", "superpod.dev/leaf"),
                     Level("node", "kubernetes.io/hostname")))


def claim(count: int):
    return read_claim_spec({"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "count": count}}]}}, "bench")


MODES = ("extended", "DRA", "DRA pooled", "DRA shared", "DRA node")


def request(mode: str, i: int):
    """Gang `i` of a mode: 16 pods of 8 GPUs in one leaf; or 4 pods on one node, sharing a claim of 4 GPUs beside
    their own 1 (DRA shared), or each claiming 2 (DRA node)."""
    if mode == "extended":
        return make_request("ns", f"g{i}", 16, {"pods": 1, "nvidia.com/gpu": 8}, required="leaf")
    if mode in ("DRA", "DRA pooled"):
        return make_request("ns", f"g{i}", 16, {"pods": 1}, required="leaf", claims=(CLAIM,), claimed_gpus=8)
    if mode == "DRA shared":
        return make_request("ns", f"g{i}", 4, {"pods": 1}, claims=(claim(1),), claimed_gpus=1, shared=(claim(4),),
                            shared_gpus=4)
    return make_request("ns", f"g{i}", 4, {"pods": 1}, required="node", claims=(claim(2),), claimed_gpus=2)


def run(nodes, slice_objs, labels, mode: str, gangs: int) -> tuple[float, float, float]:
    """(book seconds, first placement seconds, seconds to place and book `gangs` gangs)."""
    dra = mode != "extended"
    start = time.perf_counter()
    classes, _ = read_classes(dra_slices.device_classes())
    if dra:
        slices, _ = read_slices(slice_objs)
        book = DeviceBook(slices, classes, set(), labels)
        gpu_free = [replace(n, allocatable={k: v for k, v in n.allocatable.items() if k != "nvidia.com/gpu"})
                    for n in nodes] if mode != "DRA pooled" else nodes  # (pooled: nvidia.com/gpu too, one pool)
    booked = time.perf_counter()
    snap = Snapshot(gpu_free if dra else nodes, topology())
    if dra:
        snap.set_devices(book)

    def job(i: int):
        return request(mode, i)

    if mode in ("DRA shared", "DRA node") and gangs:
        gangs *= 16
    start_place = time.perf_counter()
    first = place(snap, job(0))
    placed_once = time.perf_counter()
    snap.assume(job(0), first.assignments)
    for i in range(1, gangs):
        found = place(snap, job(i))
        if found is not None:
            snap.assume(job(i), found.assignments)
    done = time.perf_counter()
    return booked - start, placed_once - start_place, done - start_place


def counting(slice_objs) -> tuple[float, float, float]:
    """(seconds to store every slice in a DraStore, to count each node's GPUs, to price the claim's request)."""
    from superpod.controller.state.dra import DraStore

    dra = DraStore(lambda key: None)
    for body in dra_slices.device_classes():
        dra.kind_store("deviceclasses").store(body["metadata"]["name"], body, 0)
    start = time.perf_counter()
    store = dra.kind_store("resourceslices")
    for body in slice_objs:
        store.store(body["metadata"]["name"], body, 0)
    stored = time.perf_counter()
    units = dra.node_units(slice_objs[0]["spec"]["nodeName"])
    counted = time.perf_counter()
    worth = dra.worth(CLAIM.requests[0].alternatives[0])
    priced = time.perf_counter()
    assert units["*"] == 8 and worth == 1.0
    return stored - start, counted - stored, priced - counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", default="1000,10000")
    parser.add_argument("--gangs", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'nodes':>6} {'resources':>10} {'book s':>8} {'1 gang s':>9} {'gangs s':>9}")
    for count in (int(n) for n in args.nodes.split(",")):
        nodes, slice_objs, labels = cluster(count)
        for mode in MODES:
            runs = [run(nodes, slice_objs, labels, mode, args.gangs) for _ in range(args.repeats)]
            medians = [statistics.median(r[i] for r in runs) for i in range(3)]
            print(f"{count:>6} {mode:>10} {medians[0]:>8.3f} {medians[1]:>9.3f} {medians[2]:>9.3f}", flush=True)
        runs = [counting(slice_objs) for _ in range(args.repeats)]
        store, count_units, price = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{count:>6} GPU counting: store the slices {store:.3f} s, count nodes' GPUs {count_units:.3f} s, "
              f"price a request {price * 1000:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
