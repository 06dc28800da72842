"""--spares on the real API server: a replacement takes the spare of the gang's leaf before the leaf's other free
node, a gang placed in the other leaf leaves that leaf's spare free, and only a short job may take it."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.operator_env import LEAF_LABEL, OperatorProcess, free_port, sim_cluster, training_job
from tests.integration.wait import wait_for


@pytest.fixture(scope="module")
def sparing(crds, operator, tmp_path_factory):
    """The operator keeping one spare node per leaf, in place of the session's for this module."""
    operator.stop()
    op = OperatorProcess(crds.kubeconfig, tmp_path_factory.mktemp("spares") / "operator.log", free_port(), (
        "run", "--namespace", "superpod-system", "--log-level", "INFO", "--spares", "leaf=1"))
    op.start()
    yield op
    op.stop()
    operator.start()


def test_a_replacement_takes_the_leafs_spare_first_and_a_waiting_gang_leaves_it(cluster, sparing, jobs):
    core = client.CoreV1Api(cluster.api)
    sim, objs = sim_cluster(cluster.api, "dgx-h100", 36, own_leaves=True, nodes_per_unit=18)  # two leaves of 18 nodes
    jobs.create(training_job("big", sim, 16, gpus=8, topology={"required": "leaf"}, nodeFailure="Replace"))
    st = jobs.wait_phase("big", "Running", 90)
    leaf = st["domain"].removeprefix("leaf ")
    in_leaf = sorted(o["metadata"]["name"] for o in objs if o["metadata"]["labels"][LEAF_LABEL] == leaf)
    spare, other = in_leaf[-1], in_leaf[-2]
    assert spare not in st["placement"] and other not in st["placement"]
    jobs.create(training_job("fill", sim, 17, gpus=8, topology={"required": "leaf"}))  # the other leaf, but its spare
    st = jobs.wait_phase("fill", "Running", 90)
    other_leaf = sorted(o["metadata"]["name"] for o in objs if o["metadata"]["labels"][LEAF_LABEL] != leaf)
    assert sorted(st["placement"]) == other_leaf[:-1], "no waiting job is placed on a spare"
    victim = jobs.pods("big")[3]
    core.delete_node(victim.spec.node_name)
    wait_for(lambda: jobs.status("big").get("replacements") == 1 and jobs.status("big").get("phase") == "Running"
             and not jobs.status("big").get("replacing"), 90, "the lost replica made again and running")
    st = jobs.status("big")
    assert [(r["lostNode"], r["node"]) for r in st["replaced"]] == [(victim.spec.node_name, spare)], \
        "the leaf's spare, taken first"
    assert st["attempt"] == 1 and st["interruptions"] == 0
    # each leaf's last free node is its spare now (the replacement took the first): a job its limit ends soon may
    # borrow one, a longer one waits
    jobs.create(training_job("long", sim, 1, gpus=8, maxRuntimeSeconds=3600))
    message = jobs.wait_message("long", "kept spare for replacing lost nodes and for jobs whose maxRuntimeSeconds is "
                                "at most 256", 60)  # the count is the control plane's: other tests' nodes keep theirs
    jobs.create(training_job("short", sim, 1, gpus=8, maxRuntimeSeconds=240))
    st = jobs.wait_phase("short", "Running", 90)
    assert list(st["placement"])[0] in (other, other_leaf[-1]), st["placement"]
    assert jobs.status("long")["phase"] == "Queued", message
