"""The controller's stateful test (tests/unit/controller/test_controller_machine.py) at scale: many more examples and
steps than CI runs, and what they reached — the invariants checked, the faults that landed where they hurt most.

    .venv/bin/python bench/state_machine.py [--examples 2000] [--steps 60] [--tenants]

--tenants runs the two-tenant machine (tests/unit/tenancy/test_tenant_machine.py: hostile edits, forged nominations,
queue limits) instead.

Exit code 1 (with hypothesis' shrunk counterexample) if any invariant breaks."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).resolve().parents[1])]
from bench_cluster import machine  # noqa: E402
from tests.unit.controller.test_controller_machine import SEEN, ControllerMachine  # noqa: E402
from tests.unit.tenancy.test_tenant_machine import TenantMachine  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=2000)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--tenants", action="store_true", help="the two-tenant machine")
    args = ap.parse_args()
    machine_class = TenantMachine if args.tenants else ControllerMachine
    print(f"machine: {machine()}")
    started = time.monotonic()
    failed = None
    try:
        run_state_machine_as_test(machine_class, settings=settings(
            max_examples=args.examples, stateful_step_count=args.steps, deadline=None, database=None,
            suppress_health_check=list(HealthCheck)))
    except (AssertionError, ExceptionGroup) as e:  # (hypothesis groups distinct failures)
        failed = e
    print(f"{SEEN['examples']} examples, {SEEN['steps']} steps (at most {args.steps} rules each) in "
          f"{time.monotonic() - started:.0f}s")
    for what, n in sorted(SEEN.items()):
        if what not in ("examples", "steps"):
            print(f"  {n:8d}  {what}")
    if failed:
        for error in getattr(failed, "exceptions", (failed,)):
            print(f"FAILED: {error}")
            for note in getattr(error, "__notes__", ()):  # hypothesis' shrunk steps
                print(note)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
