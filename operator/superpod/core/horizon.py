"""When capacity frees: the predicted end of every running gang on each node, and from them the predicted start of a
blocked gang on a set of nodes (its shadow time, as EASY backfilling calls it).

A reservation that knows its predicted start costs only what it must: a later job predicted to end before that
start may run inside it (core/cycle.py). Pods without a predicted end (no estimate) never free anything here, so
a reservation over them has no predicted start and is kept off by everyone, as before estimates."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from superpod.core.estimates import moving_until, predicted_end, steady_until
from superpod.core.gang_key import GangKey
from superpod.core.request import Requests

G = TypeVar("G", bound=Hashable)
Entry = tuple[float, str, str, Requests]  # (predicted end, holder, node, what it frees there)
FEW_NODES = 8  # nodes fewer than an eighth of those holding gangs: their own ends are merged, not every node's read


@dataclass(frozen=True)
class Release:
    """What a gang frees on one node when it ends: predicted from its start, estimate and limit (estimates.py)."""

    holder: GangKey
    start: float
    estimate: float | None
    limit: float | None
    requests: Requests  # summed over its members on the node

    def end(self, now: float) -> float | None:
        return predicted_end(self.start, self.estimate, self.limit, now)


class Horizon:
    """The running gangs' releases by node, kept across cycles (put when a gang is placed, dropped when it ends),
    and the clock of the cycle that reads them (`now`)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.on: dict[str, dict[str, Release]] = {}  # node name -> holder -> its release there
        self.nodes_of: dict[GangKey, tuple[tuple[str, ...], tuple]] = {}  # holder -> (its nodes, what it was put with)
        self.assumed: set[str] = set()  # holders put with no version: placed by a cycle, not observed yet
        # node -> (its ends, sorted; the clock they were read at; until when they hold whatever the clock says)
        self._ends: dict[str, tuple[list[tuple[float, str, str, Requests]], float, float]] = {}
        self._all = _AllEnds()  # every node's ends, in one list

    def put(self, holder: GangKey, start: float, estimate: float | None, limit: float | None,
            members: Iterable[tuple[str, Requests]], version: tuple = ()) -> None:
        """A gang that runs (or was placed this cycle): its members as (node, requests). `version` says what it was
        put with; putting the same holder with the same version again changes nothing."""
        if (known := self.nodes_of.get(holder)) is not None and known[1] == version and version:
            return
        self.drop(holder)
        if not version:
            self.assumed.add(holder)
        by_node: dict[str, dict[str, int]] = {}
        for node, requests in members:
            total = by_node.setdefault(node, {})
            for resource, amount in requests:
                total[resource] = total.get(resource, 0) + amount
        for node, total in by_node.items():
            self._ends.pop(node, None)
            release = self.on.setdefault(node, {})[holder] = Release(holder, start, estimate, limit,
                                                                     tuple(sorted(total.items())))
            self._all.add(node, release, self.now)
        self.nodes_of[holder] = (tuple(by_node), version)

    def drop(self, holder: GangKey) -> None:
        self.assumed.discard(holder)
        known = self.nodes_of.pop(holder, None)
        for node in known[0] if known is not None else ():
            self._ends.pop(node, None)
            self._all.remove(holder, node)
            releases = self.on.get(node)
            if releases is not None:
                releases.pop(holder, None)
                if not releases:
                    del self.on[node]

    def releases(self, node: str) -> Iterable[tuple[float, Release]]:
        """The releases on `node` with a predicted end, with that end."""
        for release in self.on.get(node, {}).values():
            end = release.end(self.now)
            if end is not None:
                yield end, release

    def ends(self, node: str) -> list[tuple[float, str, str, Requests]]:
        """(predicted end, holder, `node`, what it frees there) of the releases on `node` with a predicted end, in
        that order; kept until a gang on `node` is put or dropped, or the clock reaches a predicted end there (past
        it, an outlived gang's end moves with the clock)."""
        if node not in self.on:
            return []  # nothing kept for a node no gang holds: what is kept goes with the gangs put and dropped
        known = self._ends.get(node)
        if known is not None and (known[1] == self.now or known[1] < self.now < known[2]):  # (a clock set back: afresh)
            return known[0]
        ends = sorted((end, release.holder, node, release.requests) for end, release in self.releases(node))
        until = min((steady_until(r.start, r.estimate, r.limit, self.now) for r in self.on[node].values()),
                    default=math.inf)
        self._ends[node] = (ends, self.now, until)
        return ends

    def merged(self) -> Iterator[Entry]:
        """Every node's `ends` in that order, read as far as the caller goes."""
        return self._all.read(self.now)


class _AllEnds:
    """Every node's ends in time order, kept as gangs are put and dropped: the ends that stay put while the clock is
    below their steady_until, sorted; and the outlived ones, whose ends move with the clock at one pace (OUTLIVED
    times what they have run), in the order of their start (the later started, the sooner predicted to end), their
    ends read only as far as they are merged."""

    def __init__(self) -> None:
        self.steady: list[Entry] = []  # sorted
        # (holder, node) -> its steady entry, until when it stays, its release
        self.entry_of: dict[tuple[str, str], tuple[Entry, float, Release]] = {}
        self.moving: list[tuple[float, str, str]] = []  # (-start, holder, node) of the outlived releases, sorted
        # (holder, node) -> its moving key, until when it moves (its limit reached), its release
        self.moving_of: dict[tuple[str, str], tuple[tuple[float, str, str], float, Release]] = {}
        self.due: list[tuple[float, str, str]] = []  # heap of (until, holder, node) of both kinds, some gone since
        self.clock = -math.inf  # the latest clock read at

    def add(self, node: str, release: Release, now: float) -> None:
        key, start = (release.holder, node), release.start
        self.clock = max(self.clock, now)
        until = steady_until(start, release.estimate, release.limit, now)
        if until <= now:
            until = moving_until(start, release.limit)
            order = (-start, release.holder, node)
            self.moving_of[key] = (order, until, release)
            insort(self.moving, order)
        elif (end := release.end(now)) is not None:  # (no estimate and no limit: it frees nothing here)
            entry = (end, release.holder, node, release.requests)
            self.entry_of[key] = (entry, until, release)
            insort(self.steady, entry)
        else:
            return
        if until < math.inf:
            heapq.heappush(self.due, (until, release.holder, node))

    def remove(self, holder: str, node: str) -> None:
        key = (holder, node)
        if (known := self.entry_of.pop(key, None)) is not None:
            del self.steady[bisect_left(self.steady, known[0])]
        elif (moving := self.moving_of.pop(key, None)) is not None:
            del self.moving[bisect_left(self.moving, moving[0])]

    def read(self, now: float) -> Iterator[Entry]:
        """The ends at `now`, in time order, read as far as the caller goes."""
        if now < self.clock:  # a clock set back: what moved may stay put again
            self._rebuild(now)
        self.clock = now
        self._change_pace(now)
        if not self.moving:
            return iter(self.steady)
        releases = self.moving_of
        moving = ((release.end(now), holder, node, release.requests)
                  for _, holder, node in self.moving for release in (releases[(holder, node)][2],))
        return heapq.merge(self.steady, moving)

    def _rebuild(self, now: float) -> None:
        releases = [(key[1], known[2]) for known_of in (self.entry_of, self.moving_of)
                    for key, known in known_of.items()]
        self.__init__()
        for node, release in releases:
            self.add(node, release, now)

    def _change_pace(self, now: float) -> None:
        """The releases the clock took past their steady end (they move from now on) or past their limit (they
        stay put from now on)."""
        while self.due and self.due[0][0] <= now:
            until, holder, node = heapq.heappop(self.due)
            known = self.entry_of.get((holder, node)) or self.moving_of.get((holder, node))
            if known is not None and known[1] == until:
                self.remove(holder, node)
                self.add(node, known[2], now)


@dataclass(frozen=True)
class Start:
    """A blocked gang's predicted start on some nodes, and the gang whose end completes the room it needs."""

    at: float
    after: str = ""


def predicted_start(horizon: Horizon, nodes: Iterable[tuple[str, dict[str, int]]], requests: Requests,
                    replicas: int, step: int = 1) -> Start | None:
    """The earliest predicted time `replicas` members of `requests` fit on `nodes` ((name, free now), each holding
    whole multiples of `step` members), counting members per node; None if the predicted ends never free enough."""
    return earliest_starts(horizon, {0: nodes}, requests, replicas, step).get(0)


def earliest_starts(horizon: Horizon, groups: dict[G, Iterable[tuple[str, dict[str, int]]]], requests: Requests,
                    replicas: int, step: int = 1) -> dict[G, Start]:
    """Of `groups` of nodes (disjoint, each as predicted_start takes them), those predicted to hold the members
    first, each with its start (several when they start at the same time); {} if the predicted ends never free
    enough in any. The nodes' ends are merged in time order and read only up to that start."""
    members: dict[str, tuple[G, dict[str, int], int]] = {}
    totals: dict[G, int] = {}
    for group, nodes in groups.items():
        total = 0
        for name, now_free in nodes:
            slots = _slots(now_free, requests, replicas, step)
            members[name] = (group, now_free, slots)
            total += slots
        totals[group] = total
    return starts_and_members(horizon, Groups(totals, members.get, lambda: members, len(members)), requests,
                              replicas, step)[0]


@dataclass(frozen=True)
class Groups(Generic[G]):
    """Groups of nodes, read only as far as a search needs them: each group's members now (of `requests`, as
    _slots counts them on each node); a node's group, free resources and members now (None: in no group); every
    node's name (read only when they are few); and about how many nodes there are."""

    totals: dict[G, int]
    member: Callable[[str], tuple[G, dict[str, int], int] | None]
    names: Callable[[], Iterable[str]]
    count: int


def starts_and_members(horizon: Horizon, groups: Groups[G], requests: Requests, replicas: int,
                       step: int = 1) -> tuple[dict[G, Start], dict[str, int] | None]:
    """earliest_starts, of groups read lazily (a node is looked at only when one of its ends is), and the members
    each node whose ends were read holds at the start found (a node of the groups left out holds its members now;
    None if the start is now, read no end)."""
    totals = dict(groups.totals)
    found = {group: Start(horizon.now) for group, total in totals.items() if total >= replicas}
    if found:
        return found, None
    free: dict[str, dict[str, int]] = {}  # the nodes an end was read on: what they have free by then
    slots: dict[str, int] = {}
    group_of: dict[str, G] = {}
    first = None
    for end, holder, name, released in _ends_on(horizon, groups):
        if name not in free:
            if name in group_of or (known := groups.member(name)) is None:
                group_of[name] = None
                continue
            group_of[name], now_free, slots[name] = known
            free[name] = dict(now_free)  # the caller's free counts are never changed
        at = max(end, horizon.now)
        if first is not None and at > first:
            break
        node_free = free[name]
        for resource, amount in released:
            node_free[resource] = node_free.get(resource, 0) + amount
        now_slots = _slots(node_free, requests, replicas, step)
        group = group_of[name]
        totals[group] += now_slots - slots[name]
        slots[name] = now_slots
        if totals[group] >= replicas and group not in found:
            found[group], first = Start(at, holder), at
    return found, slots


def _ends_on(horizon: Horizon, groups: Groups) -> Iterable[Entry]:
    """The ends on the groups' nodes in time order (with others' ends among them when read from every node's list):
    merged from each node's own list when they are a few of the nodes that hold gangs, else every node's list read
    at once."""
    if groups.count * FEW_NODES < len(horizon.on):
        return heapq.merge(*(horizon.ends(name) for name in groups.names()))
    return horizon.merged()


def slots_at(horizon: Horizon, name: str, free: dict[str, int], requests: Requests, replicas: int, until: float,
             step: int = 1) -> int:
    """Members of `requests` node `name` is predicted to hold at `until` (its pods ending by then gone)."""
    free = dict(free)
    for end, _, _, released in horizon.ends(name):
        if end > until:
            break
        for resource, amount in released:
            free[resource] = free.get(resource, 0) + amount
    return _slots(free, requests, replicas, step)


def _slots(free: dict[str, int], requests: Requests, most: int, step: int) -> int:
    fit = most
    for resource, amount in requests:
        if amount > 0 and (have := free.get(resource, 0)) < amount * fit:  # (asked per node and end: kept lean)
            fit = have // amount if have > 0 else 0
    return fit // step * step
