import math
import statistics
from collections import Counter

import pytest

from superpod.simulate.trace import TraceJob, gang_shape, read_jobs_csv
from superpod.simulate.workload import (
    DURATION_SIGMA,
    generate,
    offered_load,
    parse_window,
    rescale,
    window,
    write_jobs_csv,
)


def job(submit, name="j", replicas=1, gpus=1, duration=10.0):
    return TraceJob(submit=submit, name=name, namespace="team", replicas=replicas, gpus=gpus, duration=duration)


def in_submit_order(jobs):
    submits = [job.submit for job in jobs]
    return submits == sorted(submits)


def test_writing_then_reading_the_job_csv_gives_back_the_same_jobs(tmp_path):
    jobs = [
        TraceJob(submit=0.0, name="a", namespace="team-a", replicas=1, gpus=4, duration=3600.0),
        TraceJob(submit=0.1 + 0.2, name="b,with comma", namespace="team-b", replicas=4, gpus=8,
                 duration=1 / 3, required="leaf", priority=5, fail_after=12.5),
        TraceJob(submit=1e7 + 0.001, name="c", namespace="team-a", replicas=2, gpus=8, duration=2e-9,
                 required="spine", priority=-1, fail_after=0.0),
    ]
    path = tmp_path / "jobs.csv"
    write_jobs_csv(jobs, path)
    assert read_jobs_csv(path) == jobs
    lines = path.read_text().splitlines()
    assert lines[0] == "submit,name,namespace,replicas,gpus,required,priority,duration,fail_after"
    assert lines[1] == "0,a,team-a,1,4,,0,3600,", "integral times are written without .0, no fail_after is empty"


def test_generate_is_deterministic_for_a_seed():
    arguments = dict(jobs=300, tenants=4, sizes="philly", arrival="bursty", mean_gap=60.0, mean_duration=3600.0)
    assert generate(seed=7, **arguments) == generate(seed=7, **arguments)


def test_generate_differs_across_seeds():
    arguments = dict(jobs=300, tenants=4, sizes="llm", arrival="poisson", mean_gap=60.0, mean_duration=3600.0)
    assert generate(seed=1, **arguments) != generate(seed=2, **arguments)


def test_changing_the_arrival_process_keeps_sizes_durations_and_tenants():
    arguments = dict(seed=3, jobs=200, tenants=5, sizes="llm", mean_gap=60.0, mean_duration=3600.0)
    poisson, bursty = generate(arrival="poisson", **arguments), generate(arrival="bursty", **arguments)
    assert [job.submit for job in poisson] != [job.submit for job in bursty]
    shape = [(job.name, job.namespace, job.replicas, job.gpus, job.duration, job.required) for job in poisson]
    assert shape == [(job.name, job.namespace, job.replicas, job.gpus, job.duration, job.required) for job in bursty]


def test_generated_jobs_are_named_in_submit_order_from_zero_with_priority_zero():
    jobs = generate(seed=5, jobs=100, tenants=2, sizes="philly", arrival="poisson", mean_gap=10.0,
                    mean_duration=100.0)
    assert [job.name for job in jobs] == [f"gen-{index}" for index in range(100)]
    assert jobs[0].submit == 0
    assert in_submit_order(jobs)
    assert {job.priority for job in jobs} == {0}
    assert all(job.duration > 0 for job in jobs)


def test_llm_gangs_are_8_to_512_gpus_with_required_leaf_only_from_16_to_256():
    jobs = generate(seed=11, jobs=3000, tenants=3, sizes="llm", arrival="poisson", mean_gap=60.0,
                    mean_duration=3600.0)
    totals = Counter(job.total_gpus for job in jobs)
    assert set(totals) == {8, 16, 32, 64, 128, 256, 512}
    assert totals[8] > totals[64] > totals[512], "the larger the gang, the rarer"
    for generated in jobs:
        assert generated.required == ("leaf" if 16 <= generated.total_gpus <= 256 else "")
        assert (generated.replicas, generated.gpus) == gang_shape(generated.total_gpus)


def test_philly_sizes_map_to_gangs_like_read_philly():
    jobs = generate(seed=2, jobs=5000, tenants=3, sizes="philly", arrival="poisson", mean_gap=60.0,
                    mean_duration=3600.0)
    counts = Counter(job.total_gpus for job in jobs)
    assert counts[1] / len(jobs) == pytest.approx(76_627 / 82_247, abs=0.02)
    for generated in jobs:
        assert generated.gpus == generated.total_gpus <= 8 or generated.gpus == 8
        assert generated.required == ("leaf" if generated.replicas > 1 else "")
    assert gang_shape(12) == (2, 8) and gang_shape(8) == (1, 8) and gang_shape(3) == (1, 3)


def test_smaller_nodes_split_gangs_into_more_replicas():
    jobs = generate(seed=4, jobs=200, tenants=1, sizes="llm", arrival="poisson", mean_gap=1.0, mean_duration=10.0,
                    gpus_per_node=4)
    assert all(job.gpus == 4 and job.replicas == job.total_gpus // 4 for job in jobs)


def test_generated_gaps_and_durations_have_the_requested_scale():
    for arrival in ("poisson", "bursty"):
        jobs = generate(seed=9, jobs=5000, tenants=2, sizes="philly", arrival=arrival, mean_gap=30.0,
                        mean_duration=1000.0)
        assert jobs[-1].submit / (len(jobs) - 1) == pytest.approx(30.0, rel=0.15)
    median = statistics.median(job.duration for job in jobs)
    assert median == pytest.approx(1000.0 * math.exp(-DURATION_SIGMA ** 2 / 2), rel=0.1)


def test_tenants_are_skewed_towards_the_first():
    jobs = generate(seed=6, jobs=4000, tenants=4, sizes="philly", arrival="poisson", mean_gap=1.0,
                    mean_duration=10.0)
    counts = Counter(job.namespace for job in jobs)
    assert set(counts) == {"tenant-0", "tenant-1", "tenant-2", "tenant-3"}
    assert counts["tenant-0"] > counts["tenant-1"] > counts["tenant-2"] > counts["tenant-3"]
    assert counts["tenant-0"] / len(jobs) == pytest.approx(0.48, abs=0.03)


@pytest.mark.parametrize("change", [dict(sizes="huge"), dict(arrival="steady"), dict(tenants=0),
                                    dict(mean_gap=0.0), dict(mean_duration=-1.0)])
def test_generate_rejects_bad_arguments(change):
    arguments = dict(seed=1, jobs=10, tenants=2, sizes="llm", arrival="poisson", mean_gap=1.0, mean_duration=1.0)
    with pytest.raises(ValueError):
        generate(**(arguments | change))


def test_offered_load_is_gpu_time_over_capacity_over_span():
    jobs = [job(0, replicas=2, gpus=8, duration=100), job(50, gpus=4, duration=50), job(100, duration=0)]
    # (16 × 100 + 4 × 50 + 0) GPU-seconds over 16 GPUs × 100 s.
    assert offered_load(jobs, capacity_gpus=16) == pytest.approx(1.125)


def test_offered_load_without_a_span_is_infinite_when_there_is_work():
    assert offered_load([job(5), job(5)], capacity_gpus=8) == math.inf
    assert offered_load([job(5, duration=0)], capacity_gpus=8) == 0.0
    assert offered_load([], capacity_gpus=8) == 0.0


def test_rescale_hits_the_requested_load_and_keeps_the_order():
    jobs = generate(seed=8, jobs=500, tenants=3, sizes="philly", arrival="bursty", mean_gap=60.0,
                    mean_duration=3600.0)
    shifted = [TraceJob(**{**vars(generated), "submit": generated.submit + 1000}) for generated in jobs]
    for load in (0.5, 0.9, 1.3):
        scaled = rescale(shifted, load, capacity_gpus=1024)
        assert offered_load(scaled, capacity_gpus=1024) == pytest.approx(load, rel=1e-9)
        assert [job.name for job in scaled] == [job.name for job in jobs]
        assert scaled[0].submit == 0
        assert in_submit_order(scaled)
        assert [job.duration for job in scaled] == [job.duration for job in jobs]


@pytest.mark.parametrize("load", [0.0, -1.0, math.nan, math.inf])
def test_rescale_rejects_a_load_that_is_not_positive(load):
    with pytest.raises(ValueError, match="load must be a positive number"):
        rescale([job(0), job(10)], load, capacity_gpus=8)


def test_rescale_rejects_a_trace_with_one_submit_time():
    with pytest.raises(ValueError, match="fewer than 2 distinct submit times"):
        rescale([job(3, "a"), job(3, "b")], 1.0, capacity_gpus=8)


def test_window_selects_from_start_up_to_end_and_rebases_to_start():
    jobs = [job(submit, name=f"j{submit}") for submit in (0, 99, 100, 150, 199.5, 200, 300)]
    selected = window(jobs, 100, 200)
    assert [(job.name, job.submit) for job in selected] == [("j100", 0), ("j150", 50), ("j199.5", 99.5)]


def test_parse_window_reads_seconds_and_units():
    assert parse_window("0:14d") == (0, 14 * 86_400)
    assert parse_window("3d:17d") == (3 * 86_400, 17 * 86_400)
    assert parse_window("3600:7200") == (3600, 7200)
    assert parse_window("90m:2.5h") == (5400, 9000)
    assert parse_window(" 10s : 1m ") == (10, 60)


@pytest.mark.parametrize("text", ["", "14d", "1:2:3", "a:b", "1w:2w", "-1:5", "5d:1d", "7:7", ":5", "1dd:2d"])
def test_parse_window_rejects_bad_text(text):
    with pytest.raises(ValueError, match="window"):
        parse_window(text)
