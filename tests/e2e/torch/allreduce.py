"""Joins the gang through the environment the operator sets (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) with the
gloo backend, all-reduces each rank's number and checks the sum. Exit 0 only when every rank agrees."""

import os
import socket

import torch
import torch.distributed as dist


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    print(f"rank {rank}/{world} on {socket.gethostname()}: joining {os.environ['MASTER_ADDR']}:"
          f"{os.environ['MASTER_PORT']} (gpus {os.environ.get('NVIDIA_VISIBLE_DEVICES', 'none')})", flush=True)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) / 2
    print(f"rank {rank}/{world}: all_reduce sum = {value.item():g} (expected {expected:g}) torch {torch.__version__}",
          flush=True)
    dist.destroy_process_group()
    raise SystemExit(0 if value.item() == expected else 1)


if __name__ == "__main__":
    main()
