"""Found by review: a served replica's GPUs are held by kube-scheduler's extended claim, which DraStore.owned_by
leaves out, so preemption (preemption.py: devices_of -> owned_by) frees no device by evicting it: a job claiming
those devices through DRA can never preempt a lower-priority classic job on a served node."""

from __future__ import annotations

from tests.unit.dra.test_one_pool import claiming_job
from tests.unit.dra.test_served_gpus import held, kube_scheduler_binds, served_cluster
from tests.unit.memory_cluster import training_job


def test_a_claiming_job_preempts_a_classic_replica_on_a_served_node():
    c = served_cluster()
    c.submit(training_job("low", 1, gpus=8, priority=0))
    c.settle(3)
    kube_scheduler_binds(c, "low")
    c.settle(3)
    assert c.decided("low")["phase"] == "Running"
    assert len(held(c, "low-a1-0-extended-resources-x")) == 8, "the victim's extended claim holds the node"
    c.tick(300)
    c.submit(claiming_job("urgent", 100))
    c.settle(6)
    assert c.decided("low")["phase"] == "Queued", (c.decided("low")["phase"], c.decided("urgent"))
