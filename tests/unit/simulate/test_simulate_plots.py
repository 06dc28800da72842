import importlib
import sys

import pytest

from superpod.simulate import plots
from superpod.simulate.metrics import by_size_class, fewest_leaves_share, jct, percentile, size_class
from superpod.simulate.plots import downsample

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def job(submit, start, end, gpus, nodes, leaves=1, fewest_leaves=1):
    return {"submit": submit, "start": start, "end": end, "gpus": gpus,
            "duration": (end - start) if end is not None else 100.0, "nodes": nodes, "leaves": leaves,
            "fewest_leaves": fewest_leaves, "attempts": []}


def policy(utilisation, busy, jobs):
    times = [0.0, 3600.0, 7200.0, 86400.0, 90000.0]
    return {"utilisation": utilisation, "window": [0.0, 100000.0], "metrics": {},
            "series": {"time": times, "busy_gpus": busy, "free_gpus": [16 - value for value in busy],
                       "unusable_gpus": [0, 2, 1, 3, 0]},
            "jobs": jobs}


def summary(load=0.8, scale=1.0):
    """Two policies over a 16-GPU cluster; the second places its 16-GPU gang on more leaves than needed."""
    first = {"default/one": job(0, 0, 600 * scale, 1, {"n1": 1}),
             "default/eight": job(10, 70, 4000 * scale, 8, {"n1": 1}),
             "default/sixteen": job(20, 3600, 9000 * scale, 16, {"n1": 1, "n2": 1}, leaves=1, fewest_leaves=1),
             "default/waiting": job(30, None, None, 4, {})}
    second = {"default/one": job(0, 5, 700 * scale, 1, {"n2": 1}),
              "default/eight": job(10, 10, 5000 * scale, 8, {"n2": 1}),
              "default/sixteen": job(20, 7200, 12000 * scale, 16, {"n1": 1, "n2": 1}, leaves=2, fewest_leaves=1)}
    return {"version": 1, "cluster": {"nodes": 2, "gpus": 16, "source": "test"},
            "trace": {"source": "hand-made", "jobs": 4, "load": load},
            "policies": {"topology": policy(0.6, [1, 9, 16, 8, 0], first),
                         "first-fit": policy(0.5, [2, 10, 8, 16, 0], second)}}


def assert_png(path):
    assert path.exists() and path.stat().st_size > 1000
    assert path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.parametrize(("gpus", "expected"), [(1, "1"), (2, "2-8"), (8, "2-8"), (9, "9-64"), (64, "9-64"),
                                                (65, ">64")])
def test_size_class_boundaries(gpus, expected):
    assert size_class(gpus) == expected


def step_integral(times, values, end):
    edges = [*times[1:], end]
    return sum(value * (edge - time) for time, value, edge in zip(times, values, edges, strict=True))


def test_downsample_keeps_time_weighted_mean_per_bin():
    times, values = downsample([0.0, 1.0, 3.0], [10, 20, 0], end=4.0, max_points=2)
    assert times == [0.0, 2.0]
    assert values == pytest.approx([15.0, 10.0])  # [0, 2): 10 for 1 s, 20 for 1 s; [2, 4): 20 for 1 s, 0 for 1 s


def test_downsample_long_irregular_series_keeps_its_integral():
    times = [index * 1.7 + (index % 7) * 0.2 for index in range(5000)]  # rising, unevenly spaced
    values = [(index * 37) % 101 for index in range(5000)]
    end = times[-1] + 50.0
    binned_times, means = downsample(times, values, end=end, max_points=300)
    assert len(binned_times) == len(means) == 300
    width = binned_times[1] - binned_times[0]
    assert sum(mean * width for mean in means) == pytest.approx(step_integral(times, values, end), rel=1e-9)
    assert min(values) <= min(means) and max(means) <= max(values)


def test_downsample_leaves_short_series_alone():
    assert downsample([0, 5], [1, 2], end=10, max_points=4) == ([0, 5], [1, 2])


def test_job_measures_group_by_size_class_and_skip_missing():
    jobs = summary()["policies"]["topology"]["jobs"]
    grouped = by_size_class(jobs, jct)
    assert grouped == {"1": [600.0], "2-8": [3990.0], "9-64": [8980.0], ">64": []}
    assert fewest_leaves_share(jobs) == (1.0, 1)
    assert fewest_leaves_share(summary()["policies"]["first-fit"]["jobs"]) == (0.0, 1)
    assert fewest_leaves_share({}) == (None, 0)


def test_percentile_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert percentile([0.0, 100.0], 0.99) == pytest.approx(99.0)
    assert percentile([7.0], 0.99) == 7.0


def test_plot_all_writes_pngs_deterministically(tmp_path):
    pytest.importorskip("matplotlib")
    paths = plots.plot_all(summary(), tmp_path / "first")
    assert [path.name for path in paths] == ["utilisation.png", "jct-cdf.png", "queueing-cdf.png",
                                             "fewest-leaves.png", "unusable-gpus.png"]
    for path in paths:
        assert_png(path)
    colours = plots.policy_colours(summary()["policies"])
    again = plots.plot_utilisation(summary(), tmp_path / "again.png", colours)
    assert again.read_bytes() == paths[0].read_bytes()


def test_plot_sweep_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    sweep = {"loads": {"0.8": summary(0.8, 2.0), "0.5": summary(0.5, 1.0), "1.0": summary(1.0, 4.0)}}
    del sweep["loads"]["1.0"]["policies"]["first-fit"]  # a policy missing at one load leaves a gap
    path = plots.plot_sweep(sweep, tmp_path)
    assert path == tmp_path / "jct-vs-load.png"
    assert_png(path)


def test_missing_matplotlib_says_how_to_install(tmp_path, monkeypatch):
    for name in [name for name in sys.modules if name == "matplotlib" or name.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    importlib.reload(plots)  # the module itself imports without matplotlib
    with pytest.raises(ImportError, match=r"pip install 'superpod-scheduler\[simulate\]'"):
        plots.plot_all(summary(), tmp_path)
