"""Why a job waits is one closed set of codes: every code the operator can give a waiting job is documented (the CRD,
`kubectl explain`, the guide), and each code the core decides with is one of them."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path

import yaml

from superpod.controller.decide import wait_plans
from superpod.controller.podgangs import GangView
from superpod.core.cycle import Decision
from superpod.core.gang_key import POD_GANG, GangKey
from superpod.core.phases import WAITING, WAITING_CAUSES, Cause, Reason
from superpod.core.request import make_request
from superpod.k8s.api import TRAININGJOBS
from tests.unit.memory_cluster import MemoryCluster, run, training_job

REPO = Path(__file__).resolve().parents[3]
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


def test_a_job_that_stops_waiting_keeps_no_reservation_nor_blocked_by():
    """Found by review: a job made Invalid while it held a reservation (c) or was blocked by one (d) kept
    status.reservation and status.blockedBy, and `superpod top` listed the reservation of a job no longer waiting."""
    c = MemoryCluster(nodes=8, nodes_per_unit=4)
    for name, replicas, topology in (("a", 4, {"required": "leaf"}), ("b", 3, {"required": "leaf"}),
                                     ("c", 4, {"required": "leaf"}), ("d", 1, {})):
        c.submit(training_job(name, replicas, 8, topology=topology))
    c.cycle()
    c.tick(1)
    c.cycle()
    assert c.status("c")["reservation"]["nodeCount"] == 4 and c.status("c")["reason"] == Reason.NO_ROOM
    assert c.status("d")["reason"] == Reason.RESERVED_FOR_OTHERS, "the dangerous moment: both carry details"
    assert c.status("d")["blockedBy"] == [{"kind": "TrainingJob", "namespace": "team-a", "name": "c"}]
    for name in ("c", "d"):
        edited = copy.deepcopy(c.job(name))
        edited["spec"]["resources"]["gpus"] = 1000
        edited.pop("status", None)
        run(c.admin.replace(TRAININGJOBS, edited))
    c.tick(1)
    c.cycle()
    for name in ("c", "d"):
        status = c.status(name)
        assert status["phase"] == "Invalid" and "reservation" not in status and "blockedBy" not in status, status


def test_a_passed_pod_gang_whose_rewrite_failed_is_rewritten():
    """Found by review: a pod gang's pods say no code (their reason is Unschedulable), so a passed-over gang whose
    rewrite failed was taken at its word (`said`) and kept the old sentence for good; its pods' sentence is compared
    with the one said."""
    def pod(name: str, message: str) -> dict:
        return {"metadata": {"name": name, "namespace": "team-b", "uid": f"u-{name}"}, "spec": {},
                "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                           "message": message}]}}
    key = GangKey("team-b", "g", POD_GANG)
    view = GangView(key, (pod("p0", "queue x is at its limit"), pod("p1", "queue x is at its limit")))
    job = replace(make_request("team-b", "g", 2, {"nvidia.com/gpu": 8}), kind=POD_GANG)
    cause = Cause(Reason.NO_ROOM, "needs 2 nodes with 8 free GPUs; the cluster has room for 1")
    said = {key: (100.0, "NoRoom", hash(cause.message))}  # planned last cycle; its write failed
    plans, _ = wait_plans([Decision(job, None, cause)], {key: view}, {}, {}, 101.0, said, None, frozenset({key}))
    assert [p.key for p in plans] == [key]
    written = GangView(key, (pod("p0", cause.message), pod("p1", cause.message)))
    moved = cause._replace(message="needs 2 nodes with 8 free GPUs; the cluster has room for 0")
    plans, _ = wait_plans([Decision(job, None, moved)], {key: written}, {}, {}, 200.0, said, None, frozenset({key}))
    assert plans == [], "written as said: a passed gang is not rewritten for its counts"
