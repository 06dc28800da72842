import math
import statistics
from collections import Counter

import pytest

from superpod.simulate.trace import TraceJob, gang_shape, read_jobs_csv, read_philly
from superpod.simulate.users import OVER_ESTIMATE, ROUND_LIMITS, ROUND_MAXIMA, STEMS_PER_USER, USERS_PER_TENANT
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
                 required="spine", priority=-1, fail_after=0.0, limit=86_400.0, user="alice"),
        TraceJob(submit=1e7 + 1, name="d", namespace="team-b", replicas=1, gpus=1, duration=60.0, limit=0.5,
                 user="team-b-bob"),
    ]
    path = tmp_path / "jobs.csv"
    write_jobs_csv(jobs, path)
    assert read_jobs_csv(path) == jobs
    assert [(job.limit, job.user) for job in read_jobs_csv(path)] == [
        (None, "team-a"), (None, "team-b"), (86_400.0, "alice"), (0.5, "team-b-bob")]
    lines = path.read_text().splitlines()
    assert lines[0] == "submit,name,namespace,replicas,gpus,required,priority,duration,fail_after,limit,user"
    assert lines[1] == "0,a,team-a,1,4,,0,3600,,,team-a", \
        "integral times are written without .0, no fail_after or limit is empty"


def test_empty_or_missing_limit_and_user_columns_read_as_no_limit_and_the_namespace(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text("submit,name,namespace,replicas,gpus,required,priority,duration,limit,user\n"
                    "0,a,team-a,1,8,,0,100,,\n5,b,team-a,1,8,,0,100,7200,carol\n")
    assert [(job.limit, job.user) for job in read_jobs_csv(path)] == [(None, "team-a"), (7200.0, "carol")]
    path.write_text("submit,name,namespace,replicas,gpus,required,priority,duration\n0,a,team-a,1,8,,0,100\n")
    assert [(job.limit, job.user) for job in read_jobs_csv(path)] == [(None, "team-a")]


@pytest.mark.parametrize("limit", ["an hour", "0", "-60", "inf", "nan"])
def test_a_bad_limit_is_refused_with_its_line(tmp_path, limit):
    path = tmp_path / "jobs.csv"
    path.write_text("submit,name,namespace,replicas,gpus,required,priority,duration,limit\n"
                    f"0,a,team,1,8,,0,100,3600\n10,b,team,1,8,,0,100,{limit}\n")
    with pytest.raises(ValueError, match=f"^line 3: limit '{limit}' is not a time limit: seconds > 0"):
        read_jobs_csv(path)


def test_the_philly_reader_takes_the_user_where_the_trace_has_one(tmp_path):
    header = "timestamp,duration,num_gpus,gpu_time,cluster"
    rows = ["2017-10-09 07:00:00,60.0,1,60.0,vc1", "2017-10-09 07:01:00,60.0,16,960.0,vc2"]
    plain, with_users = tmp_path / "plain.csv", tmp_path / "users.csv"
    plain.write_text("\n".join([header, *rows]) + "\n")
    with_users.write_text("\n".join([f"{header},user", f"{rows[0]},u17", f"{rows[1]},"]) + "\n")
    assert [(job.user, job.limit) for job in read_philly(plain)] == [("vc-vc1", None), ("vc-vc2", None)]
    assert [job.user for job in read_philly(with_users)] == ["u17", "vc-vc2"]


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
    shape = [(job.name, job.namespace, job.replicas, job.gpus, job.duration, job.required, job.limit, job.user)
             for job in poisson]
    assert shape == [(job.name, job.namespace, job.replicas, job.gpus, job.duration, job.required, job.limit,
                      job.user) for job in bursty]


def test_users_names_and_limits_leave_the_jobs_generated_before_them_as_they_were():
    """The measured LLM trace (docs/benchmarks.md), regenerated: same submits, sizes, durations and tenants as
    before users, names and limits were added (figures printed by the generator before that change)."""
    jobs = generate(seed=1, jobs=300, tenants=4, sizes="llm", arrival="poisson", mean_gap=600.0,
                    mean_duration=21600.0)
    shape = [(job.submit, job.namespace, job.replicas, job.gpus, job.duration, job.required) for job in jobs]
    assert shape[:3] == [(0.0, "tenant-0", 8, 8, 2665.658, "leaf"), (61.484, "tenant-0", 4, 8, 301.297, "leaf"),
                         (261.777, "tenant-2", 2, 8, 19.19, "leaf")]
    assert shape[-1] == (177308.912, "tenant-0", 1, 8, 17998.404, "")


def test_generated_jobs_are_named_by_user_model_and_run_in_submit_order_from_zero_with_priority_zero():
    jobs = generate(seed=5, jobs=100, tenants=2, sizes="philly", arrival="poisson", mean_gap=10.0,
                    mean_duration=100.0)
    assert len({job.name for job in jobs}) == len(jobs)
    runs = Counter()
    for generated in jobs:
        stem, _, run = generated.name.rpartition("-")
        runs[stem] += 1
        assert int(run) == runs[stem], "the n-th run of a stem is named <stem>-<n>"
        assert stem.startswith(f"{generated.user}-") and generated.user.startswith(f"{generated.namespace}-u")
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


def test_generated_users_rerun_a_few_stems_whose_run_times_cluster():
    jobs = generate(seed=1, jobs=1500, tenants=4, sizes="llm", arrival="poisson", mean_gap=600.0,
                    mean_duration=21600.0)
    users = {job.user for job in jobs}
    assert len(users) == 4 * USERS_PER_TENANT
    stems: dict[str, list[float]] = {}
    for generated in jobs:
        stems.setdefault(generated.name.rpartition("-")[0], []).append(math.log(generated.duration))
    assert len(stems) <= len(users) * STEMS_PER_USER
    assert statistics.median(len(runs) for runs in stems.values()) >= 10, "stems recur: history has runs to learn"
    within = math.sqrt(sum((value - statistics.mean(runs)) ** 2 for runs in stems.values() for value in runs)
                       / len(jobs))
    overall = statistics.pstdev(math.log(generated.duration) for generated in jobs)
    assert within < 0.6 * overall, "one stem's run times are closer to each other than to the trace's"


def test_generated_limits_over_estimate_like_users_do():
    """Each user either always asks for a round maximum (a day, three, a week) or over-estimates by a factor of
    their own in [1.2, 5], rounded up to the hour; no limit is below what the job ran."""
    jobs = generate(seed=2, jobs=2000, tenants=4, sizes="philly", arrival="poisson", mean_gap=60.0,
                    mean_duration=6 * 3600.0)
    by_user: dict[str, list[TraceJob]] = {}
    for generated in jobs:
        assert generated.limit >= generated.duration, "the trace says the job ran that long"
        assert generated.limit % 3600 == 0, "users ask for whole hours"
        by_user.setdefault(generated.user, []).append(generated)
    low, high = OVER_ESTIMATE
    maximum_users = {user for user, submitted in by_user.items()
                     if all(job.limit in ROUND_MAXIMA for job in submitted)}
    assert 0 < len(maximum_users) < len(by_user), "some users ask for the maximum, the others estimate"
    for user, submitted in by_user.items():
        if user in maximum_users:
            continue
        ratios = [job.limit / job.duration for job in submitted if job.duration >= 3600]
        assert all(low <= ratio <= high + 1 for ratio in ratios), user  # + 1: rounded up to the hour
        assert max(ratios) - min(ratios) < 1.5, f"{user}: one factor of their own, blurred by rounding only"


def stem_of(name: str) -> str:
    return name.rsplit("-", 1)[0]


def test_round_limits_are_a_few_round_values_one_per_script_and_no_run_is_longer():
    """Users give a few round limits (Tsafrir, JSSPP '10), one per script, whatever each run takes: a limit that is a
    factor of each run would tell the estimator the run time."""
    jobs = generate(seed=3, jobs=2000, tenants=4, sizes="acme", arrival="poisson", mean_gap=60.0,
                    mean_duration=6 * 3600.0, limits="round")
    assert {job.limit for job in jobs} <= set(ROUND_LIMITS) and len({job.limit for job in jobs}) >= 4
    by_script: dict[str, set[float]] = {}
    for generated in jobs:
        assert generated.duration <= generated.limit, "a run longer than its limit is stopped at it"
        by_script.setdefault(stem_of(generated.name), set()).add(generated.limit)
    assert all(len(limits) == 1 for limits in by_script.values()), "one limit per script"
    timed_out = sum(job.duration == job.limit for job in jobs) / len(jobs)
    assert timed_out < 0.1, f"{timed_out:.1%} of the runs time out: users give their scripts headroom"


def test_early_ends_shorten_that_share_of_the_jobs_and_leave_the_rest_of_the_trace_as_it_was():
    """About 40 % of an LLM cluster's jobs fail or are cancelled early (Acme, NSDI '24): such a job runs a share of
    its drawn duration under the same script, size, tenant and submit time."""
    kw = dict(seed=4, jobs=3000, tenants=4, sizes="acme", arrival="poisson", mean_gap=60.0, mean_duration=6 * 3600.0)
    whole, early = generate(**kw), generate(**kw, early_ends=0.4)
    assert [(j.submit, j.name, j.namespace, j.replicas, j.gpus, j.limit) for j in whole] == [
        (j.submit, j.name, j.namespace, j.replicas, j.gpus, j.limit) for j in early]
    shorter = [after.duration / before.duration for before, after in zip(whole, early, strict=True)
               if after.duration < before.duration]
    assert 0.37 < len(shorter) / len(whole) < 0.43, len(shorter) / len(whole)
    assert all(0.009 <= share <= 0.31 for share in shorter)


def test_the_new_knobs_at_their_defaults_change_no_trace():
    kw = dict(seed=1, jobs=300, tenants=4, sizes="llm", arrival="poisson", mean_gap=600.0, mean_duration=21600.0)
    assert generate(**kw) == generate(**kw, limits="habit", early_ends=0.0)
    with pytest.raises(ValueError, match="unknown limits"):
        generate(**kw, limits="exact")
    with pytest.raises(ValueError, match="early_ends must be a share"):
        generate(**kw, early_ends=1.5)
