"""PNG plots of a simulation summary (`summary.json`) and of a load sweep.

matplotlib is optional (`pip install 'superpod-scheduler[simulate]'`): it is imported inside the plotting
functions only, so the rest of the package imports without it. Figures are built on `matplotlib.figure.Figure`
(Agg canvas, no pyplot, no global state), rendered at a fixed size and dpi without a Software tag, so the same
summary gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from superpod.simulate.metrics import (
    SIZE_CLASS_TITLES,
    SIZE_CLASSES,
    by_size_class,
    fewest_leaves_share,
    jct,
    percentile,
    queueing_delay,
)

MAX_POINTS = 2000  # per policy and series, after downsampling
FIGURE_SIZE = (6.4, 3.6)  # inches
DPI = 100
DAY = 86400.0
DURATION_FLOOR = 1.0  # seconds: a log axis cannot show 0, so shorter times are drawn at 1 s
# matplotlib's tab10, spelled out so colours do not depend on the user's style settings.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
# Time ticks for log axes: the sparse set for wide spans, the dense one when the data spans under two decades.
TIME_TICKS = ((1, "1 s"), (10, "10 s"), (60, "1 min"), (600, "10 min"), (3600, "1 h"), (6 * 3600, "6 h"),
              (DAY, "1 d"), (7 * DAY, "1 wk"), (30 * DAY, "30 d"), (365 * DAY, "1 yr"))
DENSE_TIME_TICKS = (*TIME_TICKS, (30, "30 s"), (300, "5 min"), (1800, "30 min"), (2 * 3600, "2 h"),
                    (12 * 3600, "12 h"), (3 * DAY, "3 d"))
INSTALL_HINT = "plots need matplotlib: pip install 'superpod-scheduler[simulate]'"


# --- pure helpers (no matplotlib) ---------------------------------------------------------------------------------


def downsample(times: Sequence[float], values: Sequence[float], end: float | None = None,
               max_points: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """A step series (each value holds until the next time; the last until `end`) cut to at most `max_points`
    equal-width bins, each the time-weighted mean over its bin; returned as (bin starts, means). The integral,
    and so the time-weighted mean over the whole span, is kept. Short series come back unchanged."""
    if len(times) <= max_points:
        return list(times), list(values)
    start = times[0]
    end = times[-1] if end is None else max(end, times[-1])
    if end <= start:
        return [start], [values[-1]]
    width = (end - start) / max_points
    areas = [0.0] * max_points
    for index, value in enumerate(values):
        segment_end = times[index + 1] if index + 1 < len(times) else end
        _spread(areas, times[index] - start, segment_end - start, value, width)
    return [start + index * width for index in range(max_points)], [area / width for area in areas]


def _spread(areas: list[float], low: float, high: float, value: float, width: float) -> None:
    """Add `value` × overlap to each bin that [low, high) covers (offsets from the series start)."""
    last = len(areas) - 1
    bin_index = min(int(low // width), last)
    while low < high:
        bin_end = high if bin_index >= last else min((bin_index + 1) * width, high)
        areas[bin_index] += value * (bin_end - low)
        low = max(low, bin_end)
        bin_index += 1


def series_end(policy: dict) -> float | None:
    """Where the last sample of a policy's series stops holding: the later of its last time and its window end."""
    times = policy.get("series", {}).get("time") or []
    window = policy.get("window") or []
    candidates = [*times[-1:], *window[1:2]]
    return max(candidates) if candidates else None


def policy_colours(names: Iterable[str]) -> dict[str, str]:
    """One colour per policy, by sorted name, so every plot (and the sweep) agrees."""
    return {name: PALETTE[index % len(PALETTE)] for index, name in enumerate(sorted(set(names)))}


# --- matplotlib plumbing -------------------------------------------------------------------------------------------


def _figure(rows: int = 1, columns: int = 1):
    """A fixed-size figure and its axes (a 2-D grid), without pyplot's global state; PNG output goes via Agg.
    Needs matplotlib ≥ 3.7 (figure legends placed "outside")."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    figure = Figure(figsize=FIGURE_SIZE, dpi=DPI, layout="constrained")
    return figure, figure.subplots(rows, columns, squeeze=False)


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI, metadata={"Software": None})
    return path


def _label_time_axis(axes, which: str, values: Iterable[float]) -> None:
    """Human time ticks (1 min, 1 h, 1 d …) on the log-scaled `which` ("x" or "y") axis spanning `values`; a
    narrow span is widened to the nearest ticks either side so there are always two."""
    values = list(values)
    if not values:
        return
    low, high = min(values), max(values)
    candidates = sorted(DENSE_TIME_TICKS if high < 100 * low else TIME_TICKS)
    ticks = [(seconds, label) for seconds, label in candidates if low / 1.5 <= seconds <= high * 1.5]
    axis = axes.xaxis if which == "x" else axes.yaxis
    if len(ticks) < 2:
        ticks = _ticks_around(low, high)
        limits = (min(ticks[0][0], low) / 1.2, max(ticks[-1][0], high) * 1.2)
        if which == "x":
            axes.set_xlim(*limits)
        else:
            axes.set_ylim(*limits)
    axis.set_ticks([seconds for seconds, _ in ticks], [label for _, label in ticks])
    axis.set_ticks([], minor=True)


def _ticks_around(low: float, high: float) -> list[tuple[float, str]]:
    """The dense time ticks nearest below `low` and above `high`, two different ones."""
    dense = sorted(DENSE_TIME_TICKS)
    below = max((index for index, (seconds, _) in enumerate(dense) if seconds <= low), default=0)
    above = min((index for index, (seconds, _) in enumerate(dense) if seconds >= high), default=len(dense) - 1)
    if above <= below:
        below, above = (below, below + 1) if below + 1 < len(dense) else (below - 1, below)
    return [dense[below], dense[above]]


def _policy_legend(figure, colours: dict[str, str], labels: dict[str, str] | None = None, extra=()) -> None:
    """One legend for the whole figure, right of the plots: a line per policy in its colour, then `extra` handles."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colour, label=(labels or {}).get(name, name)) for name, colour in colours.items()]
    handles += list(extra)
    figure.legend(handles=handles, loc="outside right upper", fontsize="small", frameon=False)


def _step_line(axes, times, values, end, **line_options) -> None:
    """Draw a step series in days, downsampled, its last value held until `end`."""
    times, values = downsample(times, values, end)
    if not times:
        return
    if end is not None and end > times[-1]:
        times, values = [*times, end], [*values, values[-1]]
    axes.step([time / DAY for time in times], values, where="post", linewidth=1.0, **line_options)


def _subtitle(summary: dict) -> str:
    cluster, trace = summary.get("cluster", {}), summary.get("trace", {})
    parts = [f"{cluster['gpus']} GPUs" if "gpus" in cluster else "",
             f"{trace['jobs']} jobs" if "jobs" in trace else "",
             f"load {trace['load']}" if trace.get("load") is not None else ""]
    return ", ".join(part for part in parts if part)


def _title(figure, text: str, summary: dict | None = None) -> None:
    subtitle = _subtitle(summary) if summary else ""
    # Left-aligned so a long title stays clear of the legend on the right.
    figure.suptitle(f"{text} — {subtitle}" if subtitle else text, fontsize="medium", x=0.01, ha="left")


# --- the plots -----------------------------------------------------------------------------------------------------


def plot_all(summary: dict, out_dir: Path) -> list[Path]:
    """Write utilisation, JCT and queueing CDFs, fewest-leaves share and unusable GPUs PNGs; return their paths."""
    out_dir = Path(out_dir)
    colours = policy_colours(summary["policies"])
    paths = [plot_utilisation(summary, out_dir / "utilisation.png", colours),
             plot_cdf(summary, out_dir / "jct-cdf.png", colours, jct, "job completion time"),
             plot_cdf(summary, out_dir / "queueing-cdf.png", colours, queueing_delay, "queueing delay"),
             plot_fewest_leaves(summary, out_dir / "fewest-leaves.png", colours),
             plot_unusable(summary, out_dir / "unusable-gpus.png", colours)]
    if any(policy.get("queues") for policy in summary["policies"].values()):
        paths.append(plot_queues(summary, out_dir / "queues.png"))
    return paths


def plot_queues(summary: dict, path: Path) -> Path:
    """GPUs each queue held over time (a line per queue, its guarantee dashed), a panel per policy."""
    names = sorted(name for name, policy in summary["policies"].items() if policy.get("queues"))
    figure, panels = _figure(rows=len(names))
    queues = sorted({queue for name in names for queue in summary["policies"][name]["queues"]})
    colours = policy_colours(queues)
    for name, [axes] in zip(names, panels, strict=True):
        policy = summary["policies"][name]
        for queue in queues:
            figures = policy["queues"].get(queue)
            if figures is None:
                continue
            _step_line(axes, figures["series"]["time"], figures["series"]["held"], series_end(policy),
                       color=colours[queue])
            if figures["guaranteed"]:
                axes.axhline(figures["guaranteed"], color=colours[queue], linestyle="--", linewidth=0.8)
        axes.set(ylabel=f"{name}\nGPUs held")
        axes.grid(alpha=0.3)
    panels[-1][0].set(xlabel="simulated time (days)")
    _title(figure, "GPUs per queue (dashed: its guarantee)", summary)
    _policy_legend(figure, colours)
    return _save(figure, path)


def plot_utilisation(summary: dict, path: Path, colours: dict[str, str]) -> Path:
    """Busy GPUs / cluster GPUs over time, a step line per policy (legend: the policy's utilisation figure)."""
    figure, [[axes]] = _figure()
    total = summary["cluster"]["gpus"]
    labels = {}
    for name in sorted(summary["policies"]):
        policy = summary["policies"][name]
        series = policy["series"]
        _step_line(axes, series["time"], [busy / total for busy in series["busy_gpus"]], series_end(policy),
                   color=colours[name])
        if policy.get("utilisation") is not None:
            labels[name] = f"{name} ({policy['utilisation']:.0%})"
    axes.set(xlabel="simulated time (days)", ylabel="busy GPUs / all GPUs", ylim=(0, 1.02))
    axes.yaxis.set_major_formatter("{x:.0%}")
    axes.grid(alpha=0.3)
    _title(figure, "GPU utilisation", summary)
    _policy_legend(figure, colours, labels)
    return _save(figure, path)


def plot_unusable(summary: dict, path: Path, colours: dict[str, str]) -> Path:
    """The summary's unusable GPUs over time, a step line per policy."""
    figure, [[axes]] = _figure()
    for name in sorted(summary["policies"]):
        policy = summary["policies"][name]
        series = policy["series"]
        _step_line(axes, series["time"], series["unusable_gpus"], series_end(policy), color=colours[name])
    axes.set(xlabel="simulated time (days)", ylabel="unusable GPUs")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    _title(figure, "Unusable GPUs", summary)
    _policy_legend(figure, colours)
    return _save(figure, path)


def plot_cdf(summary: dict, path: Path, colours: dict[str, str], measure: Callable[[dict], float | None],
             what: str) -> Path:
    """A CDF of `measure` per policy, one subplot per size class (title: jobs counted); an empty class says so."""
    figure, axes_grid = _figure(2, 2)
    grouped = {name: by_size_class(policy["jobs"], measure) for name, policy in sorted(summary["policies"].items())}
    for axes, class_name in zip(axes_grid.flat, SIZE_CLASSES, strict=True):
        values_by_policy = {name: groups[class_name] for name, groups in grouped.items()}
        counts = sorted({len(values) for values in values_by_policy.values()})
        count_text = f"n = {counts[0]}" if len(counts) == 1 else f"n = {counts[0]}–{counts[-1]}"
        axes.set_title(f"{SIZE_CLASS_TITLES[class_name]} ({count_text})", fontsize="small")
        if not _cdf_lines(axes, values_by_policy, colours):
            axes.text(0.5, 0.5, "no jobs", ha="center", va="center", transform=axes.transAxes, color="grey")
            axes.set(xticks=[], yticks=[])
    figure.supxlabel(f"{what} (log scale; under {DURATION_FLOOR:g} s drawn at {DURATION_FLOOR:g} s)",
                     fontsize="small")
    figure.supylabel("share of jobs", fontsize="small")
    _title(figure, f"{what.capitalize()} by job size", summary)
    _policy_legend(figure, colours)
    return _save(figure, path)


def _cdf_lines(axes, values_by_policy: dict[str, list[float]], colours: dict[str, str]) -> bool:
    """Draw one empirical CDF per policy that has values (sorted); False when none has."""
    drawn = [max(value, DURATION_FLOOR) for values in values_by_policy.values() for value in values]
    if not drawn:
        return False
    for name, values in values_by_policy.items():
        if values:
            clipped = [max(value, DURATION_FLOOR) for value in values]
            shares = [index / len(clipped) for index in range(len(clipped) + 1)]
            axes.step([clipped[0], *clipped], shares, where="post", color=colours[name], linewidth=1.0)
    axes.set_xscale("log")
    axes.set_ylim(0, 1.02)
    axes.grid(alpha=0.3)
    axes.tick_params(labelsize="x-small")
    _label_time_axis(axes, "x", drawn)
    return True


def plot_fewest_leaves(summary: dict, path: Path, colours: dict[str, str]) -> Path:
    """A bar per policy: the share of multi-node jobs placed on the fewest leaves their size allows."""
    figure, [[axes]] = _figure()
    names = sorted(summary["policies"])
    for position, name in enumerate(names):
        share, count = fewest_leaves_share(summary["policies"][name]["jobs"])
        axes.bar(position, share or 0.0, color=colours[name], width=0.6)
        note = "no multi-node jobs" if share is None else f"{share:.0%} of {count}"
        axes.text(position, (share or 0.0) + 0.02, note, ha="center", va="bottom", fontsize="small")
    axes.set_xticks(range(len(names)), names)
    axes.set(ylabel="multi-node jobs on fewest leaves", ylim=(0, 1.12))
    axes.yaxis.set_major_formatter("{x:.0%}")
    axes.grid(axis="y", alpha=0.3)
    _title(figure, "Compact placement", summary)
    return _save(figure, path)


def plot_sweep(sweep: dict, out_dir: Path) -> Path:
    """Write jct-vs-load.png: mean JCT (solid) and p99 JCT (dashed) per policy against offered load."""
    figure, [[axes]] = _figure()
    from matplotlib.lines import Line2D  # _figure has checked matplotlib is there

    loads = sorted(sweep["loads"], key=float)
    names = sorted({name for load in loads for name in sweep["loads"][load]["policies"]})
    colours = policy_colours(names)
    x_values = [float(load) for load in loads]
    plotted: list[float] = []
    for name in names:
        means, tails = _jct_by_load(sweep, loads, name)
        axes.plot(x_values, means, color=colours[name], marker="o", markersize=3)
        axes.plot(x_values, tails, color=colours[name], marker="o", markersize=3, linestyle="--")
        plotted += [value for value in means + tails if not math.isnan(value)]
    if plotted:
        axes.set_yscale("log")
        _label_time_axis(axes, "y", plotted)
    axes.set(xlabel="offered load", ylabel="job completion time (log scale)")
    axes.grid(alpha=0.3)
    _title(figure, "Job completion time against load")
    _policy_legend(figure, colours, extra=[Line2D([], [], color="black", label="mean"),
                                           Line2D([], [], color="black", linestyle="--", label="p99")])
    return _save(figure, Path(out_dir) / "jct-vs-load.png")


def _jct_by_load(sweep: dict, loads: list[str], name: str) -> tuple[list[float], list[float]]:
    """Mean and p99 JCT of one policy at each load (NaN where it did not run or no job ended)."""
    means, tails = [], []
    for load in loads:
        policy = sweep["loads"][load]["policies"].get(name)
        values = sorted(value for job in (policy or {}).get("jobs", {}).values() if (value := jct(job)) is not None)
        means.append(sum(values) / len(values) if values else math.nan)
        tails.append(percentile(values, 0.99) if values else math.nan)
    return means, tails
