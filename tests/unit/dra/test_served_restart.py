"""Found by review: Node.served was set in the snapshot build (cycle step 5), but the judge (step 3) renders the
replicas it makes again through judge.replica_pod, which reads Node.served: on a new leader's first cycle a replica
made for a served node was rendered bound by spec.nodeName, and the kubelet would run it without its GPUs."""

from __future__ import annotations

from superpod.controller.controller import Turn
from superpod.controller.judge import replica_pod
from tests.unit.dra.test_served_gpus import served_cluster
from tests.unit.memory_cluster import training_job

NODE = "dgx-su01-n01"


def test_a_new_leader_renders_a_replica_for_a_served_node_for_kube_scheduler_before_its_first_snapshot():
    c = served_cluster()
    c.submit(training_job("classic", 1, gpus=8))
    c.settle(3)
    c.start("op-2")  # a new leader: its cache filled by a full list
    assert not c.state.nodes[NODE].node.served, "the dangerous moment: not served before its first cycle"
    c.controller._observe(Turn(c.now, set()))  # cycle step 1; the judge (step 3) comes before the snapshot
    [view] = [v for k, v in c.controller.reader.by_key.items() if k.name == "classic"]
    body = replica_pod(c.state, view, 1, 0, NODE, c.controller.settings)
    assert not body["spec"].get("nodeName"), (
        f"rendered bound by name to {body['spec'].get('nodeName')} ({body['spec']['schedulerName']})")
