"""The simulator: the operator's own controller on a virtual clock. Invariants at every simulated instant,
determinism of summary.json, the runtime model, and the baselines as policies of the same core."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from superpod.core.baselines import POLICIES
from superpod.hardware.presets import preset_nodes, topology
from superpod.k8s.api import NODES, PODS, TRAININGJOBS
from superpod.simulate import cli, workload
from superpod.simulate.engine import Simulation
from superpod.simulate.metrics import distribution, idle_while_waiting_share
from superpod.simulate.runtime import RuntimeModel
from superpod.simulate.summary import policy_summary, steady_window
from superpod.simulate.trace import TraceJob

TOPOLOGY = topology()


def small_cluster() -> list[dict]:
    return preset_nodes("dgx-h100", 16, nodes_per_unit=4)  # 4 leaves of 4 nodes, 128 GPUs


def simulate(jobs: list[TraceJob], policy: str = "superpod", nodes: list[dict] | None = None,
             check=None) -> tuple[Simulation, dict]:
    nodes = nodes or small_cluster()
    runtime = RuntimeModel.of(TOPOLOGY, nodes)
    simulation = Simulation(nodes, TOPOLOGY, jobs, POLICIES[policy](7), runtime)
    simulation.run(check)
    return simulation, policy_summary(simulation, runtime, steady_window(jobs))


def simulate_args(*argv: str) -> argparse.Namespace:
    """`superpod simulate` arguments as its own parser reads them (with --no-plots)."""
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["simulate", "--no-plots", *argv])


def mixed_jobs(count: int = 80, seed: int = 3) -> list[TraceJob]:
    """LLM-sized gangs and Philly-sized jobs, interleaved."""
    small = workload.generate(seed + 1, count, 2, "philly", "bursty", 300.0, 3600.0, 8)
    return workload.generate(seed, count, 3, "llm", "poisson", 900.0, 4 * 3600.0, 8) + [
        replace(job, name=f"small-{index}") for index, job in enumerate(small)]


def never_over_booked(simulation: Simulation):
    """A progress hook that checks every node at every simulated instant: GPUs of bound, unfinished pods never
    exceed what the node has."""
    seen = {"instants": 0, "busiest": 0}

    def check(now: float, ended: int) -> None:
        held: dict[str, int] = {}
        for pod in simulation.store.objects.get(PODS, {}).values():
            if pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                gpus = int(pod["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", 0))
                held[pod["spec"]["nodeName"]] = held.get(pod["spec"]["nodeName"], 0) + gpus
        for name, gpus in held.items():
            allocatable = int(simulation.store.objects[NODES][name]["status"]["allocatable"]["nvidia.com/gpu"])
            assert gpus <= allocatable, f"{name} booked {gpus} of {allocatable} GPUs at {now}"
        seen["instants"] += 1
        seen["busiest"] = max(seen["busiest"], sum(held.values()))
    return check, seen


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_no_gpu_is_over_booked_at_any_instant_and_every_job_takes_at_least_its_duration(policy):
    jobs = mixed_jobs()
    nodes = small_cluster()
    runtime = RuntimeModel.of(TOPOLOGY, nodes)
    simulation = Simulation(nodes, TOPOLOGY, jobs, POLICIES[policy](7), runtime)
    check, seen = never_over_booked(simulation)
    simulation.run(check)
    result = policy_summary(simulation, runtime, steady_window(jobs))
    assert seen["instants"] > len(jobs) and seen["busiest"] > 64, "the cluster was checked while it was busy"
    assert 0 < result["utilisation"] <= 1
    for key, job in result["jobs"].items():
        if job["start"] is None:  # larger than the cluster or its required domain: it waits for good, saying so
            assert "even when idle" in simulation.store.peek(TRAININGJOBS, key)["status"]["message"]
            continue
        assert job["end"] is not None, f"{key} never ended"
        assert job["end"] - job["submit"] >= job["duration"] - 1e-6, key
        assert sum(job["nodes"].values()) * 8 >= job["gpus"], key


def test_one_job_on_an_idle_cluster_takes_exactly_its_duration():
    for job in (TraceJob(0.0, "one", "team-a", 1, 8, 3600.0), TraceJob(5.0, "gang", "team-a", 4, 8, 7200.5, "leaf")):
        _, result = simulate([job])
        record = result["jobs"][f"team-a/{job.name}"]
        assert (record["start"], record["end"]) == (job.submit, job.submit + job.duration)
        assert record["leaves"] == record["fewest_leaves"] == 1


def test_a_gang_across_leaves_runs_slower_by_the_spine_factor():
    """The random baseline scatters a 4-node gang over leaves (seeded); superpod keeps it in one leaf."""
    gang = TraceJob(0.0, "gang", "team-a", 4, 8, 1000.0)
    _, superpod = simulate([gang], "superpod")
    _, scattered = simulate([gang], "random")
    assert superpod["jobs"]["team-a/gang"]["leaves"] == 1
    assert superpod["jobs"]["team-a/gang"]["end"] == pytest.approx(1000.0)
    assert scattered["jobs"]["team-a/gang"]["leaves"] > 1
    assert scattered["jobs"]["team-a/gang"]["end"] == pytest.approx(1000.0 * 1.1)


def test_a_failure_in_the_trace_restarts_the_gang_as_the_operator_would():
    job = TraceJob(0.0, "flaky", "team-a", 2, 8, 1000.0, "leaf", fail_after=100.0)
    _, result = simulate([job])
    record = result["jobs"]["team-a/flaky"]
    assert [a["outcome"] for a in record["attempts"]] == ["Failed", "Succeeded"]
    assert record["end"] - record["submit"] >= 1100.0 and result["metrics"]["restarts"] == 1


def test_the_runtime_model_charges_the_levels_a_placement_reaches_beyond_its_compact_one():
    nodes = small_cluster()
    model = RuntimeModel.of(TOPOLOGY, nodes)
    names = [node["metadata"]["name"] for node in nodes]
    one_node, two_nodes_one_leaf, two_leaves = names[:1], names[:2], [names[0], names[4]]
    assert model.factor(TraceJob(0, "a", "n", 1, 8, 1.0), one_node) == 1.0
    assert model.factor(TraceJob(0, "b", "n", 2, 8, 1.0), two_nodes_one_leaf) == 1.0  # its compact level: a leaf
    assert model.factor(TraceJob(0, "c", "n", 2, 8, 1.0), two_leaves) == pytest.approx(1.1)
    assert model.factor(TraceJob(0, "d", "n", 2, 4, 1.0), two_nodes_one_leaf) == pytest.approx(1.5)
    assert model.factor(TraceJob(0, "e", "n", 2, 4, 1.0), two_leaves) == pytest.approx(1.5 * 1.1)
    assert model.fewest_domains(TraceJob(0, "f", "n", 6, 8, 1.0), model.depth("leaf")) == 2


def test_the_same_command_twice_gives_byte_identical_summaries(tmp_path):
    trace = tmp_path / "trace.csv"
    workload.write_jobs_csv(mixed_jobs(30), trace)
    outputs = []
    for run in ("first", "second"):
        args = simulate_args("--nodes", "16", "--trace", str(trace), "--load", "0.9", "--seed", "5",
                             "--out", str(tmp_path / run))
        assert cli.run(args) == 0
        outputs.append((tmp_path / run / "summary.json").read_bytes())
    assert outputs[0] == outputs[1]
    assert b'"random"' in outputs[0] and b'"gang-spread"' in outputs[0]


def test_a_bad_trace_is_refused_with_its_line(tmp_path, capsys):
    trace = tmp_path / "bad.csv"
    trace.write_text("submit,name,namespace,replicas,gpus,required,priority,duration\n0,a,ns,1,eight,,0,10\n")
    args = simulate_args("--nodes", "4", "--trace", str(trace), "--policy", "superpod", "--out", str(tmp_path / "out"))
    assert cli.run(args) == 2
    assert "line 2" in capsys.readouterr().err


def test_a_cluster_dump_and_a_generated_trace_replay_from_the_command_line(tmp_path, capsys):
    """`superpod simulate generate`, then `superpod simulate --cluster dump.yaml` (Nodes and a ClusterTopology as
    kubectl prints them) with plots."""
    import yaml

    from superpod.cli import main

    pytest.importorskip("matplotlib")
    trace, dump = tmp_path / "llm.csv", tmp_path / "cluster.yaml"
    assert main(["simulate", "generate", "--sizes", "llm", "--jobs", "20", "--mean-duration", "3600",
                 "--out", str(trace)]) == 0
    dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*small_cluster(), TOPOLOGY]}))
    out = tmp_path / "out"
    assert main(["simulate", "--cluster", str(dump), "--trace", str(trace), "--policy", "superpod,gang-firstfit",
                 "--load", "0.7,0.9", "--out", str(out)]) == 0
    for load in ("0.7", "0.9"):
        written = sorted(path.name for path in (out / f"load-{load}").iterdir())
        assert written == ["fewest-leaves.png", "jct-cdf.png", "queueing-cdf.png", "summary.json",
                           "unusable-gpus.png", "utilisation.png"]
    assert (out / "jct-vs-load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "dump" in printed and "128 GPUs" in printed and "gang-firstfit" in printed


def test_under_gpu_queues_no_queue_goes_over_its_limit_at_any_instant_and_per_queue_figures_add_up():
    """Four tenants on 128 GPUs (guarantees 0/48/32/16, the first — the busiest — with a limit of 16): at every
    simulated instant no tenant holds more than its limit, and the per-queue figures agree with the job records."""
    jobs = workload.generate(3, 200, 4, "philly", "poisson", 20.0, 3600.0, 8)
    shapes = [(0, 16, 3), (48, None, 1), (32, None, 2), (16, None, 1)]
    queues = [{"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": f"q{rank}"},
               "spec": {"namespaces": [f"tenant-{rank}"], "weight": weight,
                        "resources": [{"flavor": "*", "guaranteed": guaranteed,
                                       **({"limit": limit} if limit is not None else {})}]}}
              for rank, (guaranteed, limit, weight) in enumerate(shapes)]
    nodes = small_cluster()
    runtime = RuntimeModel.of(TOPOLOGY, nodes)
    simulation = Simulation(nodes, TOPOLOGY, jobs, POLICIES["superpod"](0), runtime, queues=queues)
    peak = {"tenant-0": 0}

    def within_limits(now: float, ended: int) -> None:
        held: dict[str, int] = {}
        for pod in simulation.store.objects.get(PODS, {}).values():
            if pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                namespace = pod["metadata"]["namespace"]
                held[namespace] = held.get(namespace, 0) + int(
                    pod["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", 0))
        assert held.get("tenant-0", 0) <= 16, f"tenant-0 holds {held['tenant-0']} GPUs at {now}"
        peak["tenant-0"] = max(peak["tenant-0"], held.get("tenant-0", 0))

    simulation.run(within_limits)
    result = policy_summary(simulation, runtime, steady_window(jobs), queues)
    assert peak["tenant-0"] == 16, "the limit was reached, so it was tested"
    figures = result["queues"]
    assert set(figures) == {"q0", "q1", "q2", "q3"} and figures["q0"]["guaranteed"] == 0
    assert figures["q0"]["mean_held"] <= 16 and figures["q0"]["mean_borrowed"] == figures["q0"]["mean_held"]
    hours = result["metrics"]["gpu_hours"]
    window_hours = {rank: figures[f"q{rank}"]["gpu_hours"] for rank in range(4)}
    assert all(window_hours[rank] <= hours[f"tenant-{rank}"] + 1e-6 for rank in range(4))
    shares = [figure["surplus_share"] for figure in figures.values() if figure["surplus_share"] is not None]
    assert not shares or sum(shares) == pytest.approx(1.0)


def test_queue_figures_follow_the_job_records_exactly():
    """Queue a (guarantee 4) holds 8 GPUs over [0, 100] and waits with a 4-GPU job from 20; queue b (guarantee 0)
    waits until 50, then holds 8. Between 20 and 50 both want more: a borrows 4, b nothing, weights equal."""
    from superpod.simulate.tenants import queue_figures

    def gq(name: str, guaranteed: float) -> dict:
        return {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": name},
                "spec": {"namespaces": [name], "resources": [{"flavor": "*", "guaranteed": guaranteed}]}}

    done = "Succeeded"
    jobs = {"a/one": {"namespace": "a", "gpus": 8, "submit": 0.0, "end": 100.0,
                      "attempts": [{"start": 0.0, "end": 100.0, "outcome": done}]},
            "b/two": {"namespace": "b", "gpus": 8, "submit": 0.0, "end": 150.0,
                      "attempts": [{"start": 50.0, "end": 150.0, "outcome": done}]},
            "a/three": {"namespace": "a", "gpus": 4, "submit": 20.0, "end": None, "attempts": []}}
    figures = queue_figures(jobs, [gq("a", 4), gq("b", 0)], (0.0, 100.0), 200.0)
    a, b = figures["a"], figures["b"]
    assert (a["mean_held"], a["mean_borrowed"], a["below_guarantee_share"]) == (8.0, 4.0, 0.0)
    assert (b["mean_held"], b["mean_borrowed"], b["below_guarantee_share"]) == (4.0, 4.0, 0.0)
    assert (a["surplus_share"], b["surplus_share"], a["weight_share"], b["weight_share"]) == (1.0, 0.0, 0.5, 0.5)
    assert a["series"] == {"time": [0.0, 100.0], "held": [8, 0]} and a["gpu_hours"] == round(800 / 3600, 3)


def test_a_bad_queue_file_is_refused_with_what_is_wrong(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    workload.write_jobs_csv(mixed_jobs(4), trace)
    queues = tmp_path / "queues.yaml"
    queues.write_text("apiVersion: superpod.dev/v1alpha1\nkind: GPUQueue\nmetadata: {name: a}\n"
                      "spec: {namespaces: [a], weight: 0}\n")
    args = simulate_args("--nodes", "4", "--trace", str(trace), "--policy", "superpod", "--out", str(tmp_path / "out"),
                         "--queues", str(queues))
    assert cli.run(args) == 2
    assert "spec.weight" in capsys.readouterr().err


def test_preemption_shortens_the_wait_of_high_priority_gangs_and_counts_the_work_lost():
    """A full cluster of long low-priority jobs, then high-priority gangs: with preemption they start at once and
    the victims' work so far is counted lost; without, they wait for the long jobs to end."""
    low = [TraceJob(float(i), f"low-{i}", "batch", 4, 8, 10 * 3600.0) for i in range(4)]  # 128 GPUs, 10 h
    high = [TraceJob(3600.0 + i, f"high-{i}", "prod", 2, 8, 3600.0, priority=100) for i in range(2)]
    results = {policy: simulate(low + high, policy)[1]["metrics"] for policy in ("superpod", "superpod-nopreempt")}
    on, off = results["superpod"], results["superpod-nopreempt"]
    assert on["queueing_by_priority"]["100"]["p99"] < 60 < 8 * 3600 <= off["queueing_by_priority"]["100"]["p99"]
    assert on["preempted"]["attempts"] == 1 and 31 < on["preempted"]["gpu_hours_lost"] <= 32, "one 32-GPU gang, 1 h"
    assert off["preempted"] == {"attempts": 0, "gpu_hours_lost": 0.0}
    assert on["never_ended"] == off["never_ended"] == 0, "the victims ran again to the end"


def test_queues_come_from_the_cluster_dump_when_no_queue_file_is_given(tmp_path):
    import yaml

    dump = tmp_path / "dump.yaml"
    queue = {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": "a"},
             "spec": {"namespaces": ["a"], "resources": [{"flavor": "*", "guaranteed": 8}]}}
    dump.write_text(yaml.safe_dump_all([*small_cluster()[:2], queue]))
    assert [q["metadata"]["name"] for q in cli.load_queues(str(dump), required=False)] == ["a"]
    dump.write_text(yaml.safe_dump_all(small_cluster()[:2]))
    assert cli.load_queues(str(dump), required=False) == []


def test_per_size_class_figures_and_idle_gpu_time_of_a_replay_computed_by_hand():
    """Two 8-GPU nodes. A 16-GPU gang runs [0, 100]; a 1-GPU, an 8-GPU and a 4-GPU job queue behind it and start
    at 100; a second 16-GPU gang (submitted at 40) waits until the 4-GPU job ends at 300, while 3 GPUs are free
    over [100, 130), 11 over [130, 150) and 12 over [150, 300)."""
    jobs = [TraceJob(0.0, "gang-1", "team", 2, 8, 100.0), TraceJob(10.0, "one", "team", 1, 1, 50.0),
            TraceJob(20.0, "eight", "team", 1, 8, 30.0), TraceJob(30.0, "four", "team", 1, 4, 200.0),
            TraceJob(40.0, "gang-2", "team", 2, 8, 10.0)]
    nodes = preset_nodes("dgx-h100", 2, nodes_per_unit=2)
    runtime = RuntimeModel.of(TOPOLOGY, nodes)
    simulation = Simulation(nodes, TOPOLOGY, jobs, POLICIES["superpod"](0), runtime)
    simulation.run()
    metrics = policy_summary(simulation, runtime, (0.0, 400.0))["metrics"]
    figures = metrics["size_classes"]

    def both(jct: list[float], wait: list[float]) -> dict:
        return {"jct": distribution(jct), "wait": distribution(wait)}

    assert figures["1"] == both([140.0], [90.0])
    assert figures["2-8"] == both([110.0, 270.0], [80.0, 70.0])
    assert figures["9-64"] == both([100.0, 270.0], [0.0, 260.0])
    assert figures[">64"] == both([], [])
    assert figures["all"] == both([100.0, 140.0, 110.0, 270.0, 270.0], [0.0, 90.0, 80.0, 70.0, 260.0])
    assert figures["2-8"]["jct"] == {"jobs": 2, "mean": 190.0, "p50": 190.0, "p99": 268.4, "max": 270.0}
    assert figures["all"]["wait"] == {"jobs": 5, "mean": 100.0, "p50": 80.0, "p99": 253.2, "max": 260.0}
    assert metrics["jct"] == figures["all"]["jct"] and metrics["queueing"]["9-64"] == figures["9-64"]["wait"]
    assert metrics["idle_while_waiting"] == round((3 * 30 + 11 * 20 + 12 * 150) / (16 * 400), 6)


def test_idle_gpu_time_while_jobs_wait_is_integrated_over_the_window_only():
    series = {"time": [0.0, 10.0, 20.0, 50.0], "unusable_gpus": [4, 0, 8, 2]}
    # [5, 10): 4 GPUs, [10, 20): 0, [20, 50): 8, [50, 60): 2 — the last value holds on.
    assert idle_while_waiting_share(series, (5.0, 60.0), 10) == pytest.approx((4 * 5 + 8 * 30 + 2 * 10) / (10 * 55))
    assert idle_while_waiting_share(series, (60.0, 60.0), 10) is None
    assert idle_while_waiting_share({"time": [], "unusable_gpus": []}, (0.0, 1.0), 10) == 0.0


def test_the_table_puts_policies_side_by_side_with_size_classes_in_hours(capsys):
    def policy(mean_jct: float, idle: float, longest: float) -> dict:
        some = {"jobs": 1, "mean": mean_jct, "p50": 0.0, "p99": 2 * 3600.0, "max": longest}
        none = {"jobs": 0, "mean": None, "p50": None, "p99": None, "max": None}
        classes = {"1": {"jct": some, "wait": some}, "2-8": {"jct": none, "wait": none},
                   "9-64": {"jct": some, "wait": some}, ">64": {"jct": none, "wait": none},
                   "all": {"jct": some, "wait": some}}
        return {"utilisation": 0.5, "useful_utilisation": 0.5,
                "metrics": {"jct": some, "size_classes": classes, "idle_while_waiting": idle,
                            "p99_queueing_32_plus": 36 * 3600.0, "fewest_leaves_share": {"share": None, "of": 0},
                            "restarts": 0, "never_started": 0, "queueing_by_priority": {"0": some},
                            "preempted": {"attempts": 0, "gpu_hours_lost": 0.0}}}

    result = {"cluster": {"source": "preset dgx-h100", "gpus": 16}, "trace": {"source": "jobs t.csv", "jobs": 5,
                                                                               "load": 0.9},
              "policies": {"superpod": policy(8.2 * 3600, 0.107, 60.64 * 3600),
                           "gang-firstfit": policy(7.9 * 3600, 0.055, 65.2 * 3600)}}
    cli._table(result, [1.0, 2.0])
    lines = capsys.readouterr().out.splitlines()
    superpod = next(line for line in lines if line.startswith("superpod "))
    assert superpod.split()[3:7] == ["8.2h", "2.0h", "10.7%", "36.0h"], "mean JCT, p99 JCT, idle, p99 wait >= 32"
    rows = [line.split() for line in lines if line.startswith(("superpod ", "gang-firstfit "))]
    assert rows[2] == ["superpod", "8.2", "/", "2.0", "/", "60.6", "-", "/", "-", "/", "-",
                       "8.2", "/", "2.0", "/", "60.6", "-", "/", "-", "/", "-"]
    assert rows[3][1:6] == ["7.9", "/", "2.0", "/", "65.2"]
    assert any("1 GPU" in line and "> 64 GPUs" in line for line in lines)


def test_a_gang_stopped_at_its_queues_runtime_cap_ends_with_that_outcome_and_its_job_ends():
    """The limit's end is an instant of the replay (Controller.next_deadline), the attempt's outcome names it, and the
    job counts as ended, not as waiting."""
    queue = {"apiVersion": "superpod.dev/v1alpha1", "kind": "GPUQueue", "metadata": {"name": "a"},
             "spec": {"namespaces": ["team-a"], "resources": [{"flavor": "*", "guaranteed": 128}],
                      "maxRuntimeSeconds": 500}}
    jobs = [TraceJob(0.0, "long", "team-a", 2, 8, 1000.0, "leaf"), TraceJob(10.0, "short", "team-a", 1, 8, 100.0)]
    nodes = small_cluster()
    runtime = RuntimeModel.of(TOPOLOGY, nodes)
    simulation = Simulation(nodes, TOPOLOGY, jobs, POLICIES["superpod"](7), runtime, queues=[queue])
    simulation.run()
    result = policy_summary(simulation, runtime, steady_window(jobs), [queue])
    long, short = result["jobs"]["team-a/long"], result["jobs"]["team-a/short"]
    assert [(a["start"], a["end"], a["outcome"]) for a in long["attempts"]] == [(0.0, 500.0, "MaxRuntimeExceeded")]
    assert long["end"] == 500.0 and not simulation._waiting
    assert [a["outcome"] for a in short["attempts"]] == ["Succeeded"] and short["end"] == 110.0
