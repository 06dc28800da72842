"""Node failures in the replay: a failed node's replica replaced while its gang runs on, or the gang restarted, each
resuming from its last checkpoint; the failures drawn the same way for the same seed."""

from __future__ import annotations

import json

import pytest

from superpod.core.baselines import POLICIES
from superpod.simulate import cli, workload
from superpod.simulate.engine import Simulation
from superpod.simulate.failures import FAILURE, FailureModel, NodeFailures
from superpod.simulate.runtime import RuntimeModel
from superpod.simulate.summary import policy_summary, steady_window
from superpod.simulate.trace import TraceJob
from tests.unit.simulate.test_simulate import TOPOLOGY, mixed_jobs, simulate_args, small_cluster

GANG = TraceJob(0.0, "gang", "team-a", 2, 8, 3600.0, "leaf")  # two nodes of one leaf for an hour


def fail_gang_node_at(at: float, mode: str, checkpoint: float | None = 600.0) -> tuple[Simulation, dict]:
    """The gang's second node fails at `at` seconds, and no other node ever fails."""
    nodes = small_cluster()
    runtime = RuntimeModel.of(TOPOLOGY, nodes)

    def replay(failures: FailureModel | None, fail: str = "") -> Simulation:
        simulation = Simulation(nodes, TOPOLOGY, [GANG], POLICIES["superpod"](7), runtime, failures=failures,
                                node_failure=mode)
        if fail:
            simulation.failures.events = [(at, FAILURE, fail)]
        simulation.run()
        return simulation

    placed = replay(None).records["team-a/gang"].attempts[0].nodes  # the replay is deterministic
    simulation = replay(FailureModel(mtbf=1e12, repair=7200.0, checkpoint=checkpoint), sorted(placed)[1])
    return simulation, policy_summary(simulation, runtime, steady_window([GANG]))


def test_a_replaced_replica_lets_its_gang_run_on_from_its_last_checkpoint():
    simulation, result = fail_gang_node_at(1000.0, "Replace")
    record = result["jobs"]["team-a/gang"]
    assert [a["outcome"] for a in record["attempts"]] == ["Succeeded"], "one attempt: the gang ran on"
    # 1000 s ran, the checkpoint at 600 s kept: 400 s are run again once the replica runs elsewhere (at once here)
    assert record["end"] == pytest.approx(3600.0 + 400.0)
    assert len(record["nodes"]) == 2 and record["leaves"] == 1
    assert result["failures"] == {"node_failures": 1, "replacements": 1, "restarts": 0,
                                  "redone_gpu_hours": pytest.approx(16 * 400 / 3600, abs=1e-3),
                                  "stalled_gpu_hours": 0.0}
    assert simulation.records["team-a/gang"].replacements == 1


def test_a_restarted_gang_starts_a_new_attempt_from_its_last_checkpoint():
    _, result = fail_gang_node_at(1000.0, "RestartGang")
    record = result["jobs"]["team-a/gang"]
    first, second = record["attempts"]
    assert first["outcome"] == "Interrupted" and first["work"] == pytest.approx(600.0)
    assert second["outcome"] == "Succeeded" and second["work"] == pytest.approx(3000.0)
    assert record["end"] == pytest.approx(second["start"] + 3000.0)
    assert result["failures"]["restarts"] == 1 and result["failures"]["replacements"] == 0


def test_without_checkpoints_a_stopped_gang_starts_over():
    _, result = fail_gang_node_at(1000.0, "RestartGang", checkpoint=None)
    second = result["jobs"]["team-a/gang"]["attempts"][1]
    assert second["work"] == pytest.approx(3600.0) and second["end"] - second["start"] == pytest.approx(3600.0)
    assert result["failures"]["redone_gpu_hours"] == pytest.approx(16 * 1000 / 3600, abs=1e-3)


def test_failures_are_drawn_per_node_the_same_for_the_same_seed_and_each_node_comes_back():
    model = FailureModel(mtbf=86_400.0, repair=3600.0, seed=5)
    one, two = NodeFailures(model, ["n1", "n2", "n3"]), NodeFailures(model, ["n3", "n2", "n1"])
    assert one.events == two.events
    first = one.next_time()
    [(what, node)] = one.due(first)
    assert what == FAILURE and any(event == (first + 3600.0, "repair", node) for event in one.events)
    with pytest.raises(ValueError, match="MTBF"):
        FailureModel(mtbf=0.0)


def test_a_replay_with_node_failures_is_the_same_twice_and_bad_failure_flags_are_refused(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    workload.write_jobs_csv(mixed_jobs(30), trace)
    outputs = []
    for run in ("first", "second"):
        args = simulate_args("--nodes", "16", "--trace", str(trace), "--load", "0.9", "--policy", "superpod",
                             "--node-mtbf", "1d", "--checkpoint", "30m", "--node-failure", "Replace",
                             "--out", str(tmp_path / run))
        assert cli.run(args) == 0
        outputs.append((tmp_path / run / "summary.json").read_bytes())
    assert outputs[0] == outputs[1]
    failures = json.loads(outputs[0])["policies"]["superpod"]["failures"]
    assert failures["node_failures"] > 0 and failures["replacements"] > 0
    bad = simulate_args("--nodes", "16", "--trace", str(trace), "--node-mtbf", "soon", "--out", str(tmp_path / "x"))
    assert cli.run(bad) == 2
    assert "--node-mtbf: 'soon' is not a duration" in capsys.readouterr().err
