"""A training loop under torchrun's elastic agent (c10d rendezvous, gloo): each step all-reduces every rank's number
and checks the sum. Each pod keeps the step it reached on its own disk, so a group formed again (a worker lost and
its replacement joined) resumes from the furthest step a member reached. Exit 0 when the last step is done."""

import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist

STEPS = int(os.environ.get("STEPS", "40"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "1"))
CHECKPOINT = "/tmp/step"


def saved_step() -> int:
    try:
        with open(CHECKPOINT) as file:
            return int(file.read())
    except FileNotFoundError:
        return 0


def save_step(step: int) -> None:
    with open(CHECKPOINT, "w") as file:
        file.write(str(step))


def main() -> None:
    host = socket.gethostname()
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))  # a lost peer fails a step within 30 s
    rank, world = dist.get_rank(), dist.get_world_size()
    start = torch.tensor([saved_step()])
    dist.all_reduce(start, op=dist.ReduceOp.MAX)
    print(f"{host}: rank {rank}/{world}, restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}, "
          f"resuming at step {int(start.item())}", flush=True)
    expected = world * (world + 1) / 2
    for step in range(int(start.item()), STEPS):
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        if value.item() != expected:
            raise SystemExit(f"{host}: step {step}: all_reduce sum = {value.item():g}, expected {expected:g}")
        save_step(step + 1)
        print(f"{host}: step {step} all_reduce sum = {value.item():g} world {world}", flush=True)
        time.sleep(STEP_SECONDS)
    dist.destroy_process_group()
    print(f"{host}: done, {STEPS} steps", flush=True)


if __name__ == "__main__":
    main()
