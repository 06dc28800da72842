"""Why a job waits is one closed set of codes: every code the operator can give a waiting job is documented (the CRD,
`kubectl explain`, the guide), and each code the core decides with is one of them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from superpod.core.phases import WAITING, WAITING_CAUSES, Cause, Reason

REPO = Path(__file__).resolve().parents[2]
NOT_WAITING = {Reason.INVALID, Reason.INTERNAL_ERROR}  # a decision that ends as phase Invalid, or as a fault


def test_every_waiting_code_is_in_the_crd_and_the_guide():
    crd = yaml.safe_load((REPO / "crds" / "superpod.dev_trainingjobs.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    guide = (REPO / "docs" / "guides" / "waiting.md").read_text()
    for code, meaning in WAITING_CAUSES.items():
        assert f"{code} ({meaning})" in status["reason"]["description"], code
        assert f"| `{code}` | {meaning} |" in guide, code
    assert {"reservation", "blockedBy"} <= status.keys()


def test_every_cause_the_operator_decides_with_is_a_waiting_code():
    """Read from the source: each `Cause(Reason.X, ...)` the operator builds names a code of WAITING (or one that
    never reaches a waiting status)."""
    made = set()
    for path in (REPO / "operator" / "superpod").rglob("*.py"):
        made.update(re.findall(r"Cause\(Reason\.(\w+)", path.read_text()))
    assert made, "the dangerous moment: causes are built somewhere"
    assert {Reason[name] for name in made} <= WAITING | NOT_WAITING, made
    assert {Reason[name] for name in made} >= WAITING, "every code is given somewhere"
    assert Cause(Reason.NO_ROOM, "x").code in WAITING
