"""CPU seconds each process of a benchmark used (user + system, from /proc/<pid>/stat): where the machine's cores
went during a run. Processes are named; one that is gone counts what it used until its last reading."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of proc(5))


class CpuMeter:
    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self.start, self.started = self.read(), time.monotonic()

    def read(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def report(self, wall: float) -> str:
        """CPU seconds per process since the meter started, and the share of the machine's cores they filled."""
        now = self.read()
        used = {name: max(0.0, now[name] - self.start[name]) for name in self.pids}
        total = sum(used.values())
        parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(used.items(), key=lambda kv: -kv[1]))
        return f"CPU seconds {total:.1f} in {wall:.1f}s wall ({total / wall / os.cpu_count():.0%} of " \
               f"{os.cpu_count()} cores): {parts}"


class Profile:
    """py-spy sampling one process (the thread holding the GIL: where its CPU goes) into a collapsed-stack file
    while the `with` block runs; `hottest` reads it back."""

    def __init__(self, pid: int, path: str, rate: int = 50) -> None:
        self.pid, self.path, self.rate = pid, path, rate

    def __enter__(self) -> Profile:
        spy = Path(sys.executable).with_name("py-spy")
        self.proc = subprocess.Popen([str(spy), "record", "--pid", str(self.pid), "--format", "raw", "--gil",
                                      "--output", self.path, "--rate", str(self.rate), "--nonblocking"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *_) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)

    def hottest(self, top: int = 15) -> str:
        """The functions that were on the CPU most: share of samples in the function itself, and with its callees."""
        own, inclusive, total = Counter(), Counter(), 0
        try:
            lines = Path(self.path).read_text().splitlines()
        except OSError:
            return "no profile was written (py-spy needs ptrace rights)"
        for line in lines:
            stack, _, count = line.rpartition(" ")
            frames = [_short(frame) for frame in stack.split(";")[1:]]  # the first is the thread
            if not frames or not count.isdigit():
                continue
            samples = int(count)
            total += samples
            own[frames[-1]] += samples
            for frame in set(frames):
                inclusive[frame] += samples
        if not total:
            return "no samples"
        rows = [f"  {own[f] / total:6.1%} own {inclusive[f] / total:6.1%} with callees  {f}"
                for f, _ in own.most_common(top)]
        return f"{total} samples; hottest functions by own time:\n" + "\n".join(rows)


def _short(frame: str) -> str:
    """`fn (path/to/module.py:12)` -> `fn (module.py)`: the line left out, so a function's samples add up."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit('/', 1)[-1].split(':')[0]})" if where else name


class GoProfile:
    """The API server's own CPU profile (Go's pprof endpoint, on by default) over `seconds`, taken on a thread while
    the `with` block runs; `hottest` reads it with `go tool pprof`."""

    def __init__(self, url: str, ssl_context, path: str, seconds: int) -> None:
        self.url, self.ssl, self.path, self.seconds = url, ssl_context, path, seconds

    def __enter__(self) -> GoProfile:
        import threading
        import urllib.request

        def fetch() -> None:
            with urllib.request.urlopen(f"{self.url}/debug/pprof/profile?seconds={self.seconds}",
                                        context=self.ssl, timeout=self.seconds + 60) as answer:
                Path(self.path).write_bytes(answer.read())

        self.thread = threading.Thread(target=fetch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.thread.join(self.seconds + 60)

    def hottest(self, top: int = 25) -> str:
        """Functions by cumulative share (with callees): which requests and layers the API server spent its CPU on."""
        if not Path(self.path).exists():
            return "no API server profile was written"
        out = subprocess.run(["go", "tool", "pprof", "-top", "-cum", f"-nodecount={top}", self.path],
                             capture_output=True, text=True)
        return out.stdout or out.stderr
