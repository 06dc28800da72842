"""The runtime model: a job's trace duration is its runtime when placed compactly; each coarser level its placement
reaches multiplies it by that level's factor.

A gang's compact level is the finest topology level one domain of which could hold the whole gang on an idle
cluster (the node, for a gang that fits one node). Its placement reaches level L when its nodes share one domain of
L but not of any finer level (or the whole cluster, past the coarsest level: that counts as the coarsest level).
Every level coarser than the compact one, up to the one reached, applies its factor. "Reaching" a level means its
fabric carries the gang's traffic:

- nvlink 1.0: nodes joined by one NVLink domain (a GB200 NVL72 rack) talk at NVLink speed. No published figure;
  1.0 is the assumption.
- leaf 1.5: leaving the NVLink domain for InfiniBand under one leaf. The Pollux (OSDI'21) artifact's measured step
  times (petuum/adaptdl, osdi21-artifact, simulator/traces/*/placements.csv) give spread ÷ packed ratios of
  0.96-2.22 for 4 GPUs on one node vs one per node; median over all placements and batch sizes 1.55. On DGX-class
  nodes the Sia (SOSP'23) traces show less (0.86-1.15 for 4+4), so 1.5 is on the pessimistic side.
- spine 1.1: crossing leaves through the spine. Meta (SIGCOMM'24, RoCE for AI training) reports fragmented
  placements congesting leaf uplinks by "over 30%"; MegaScale (NSDI'24) keeps data-heavy ranks under one ToR but
  gives no figure. 1.1 is a moderate default; 1.3 the pessimistic setting.
- node: never applied (a gang that needs more than one node has a coarser compact level).

Every factor is configurable (`--slowdown leaf=1.3,spine=1.2`); results should be read across such a sweep."""

from __future__ import annotations

from superpod.api.convert import node_from_k8s, topology_from_k8s
from superpod.core.model import Snapshot
from superpod.core.request import GPU
from superpod.simulate.trace import TraceJob

DEFAULT_FACTORS = {"nvlink": 1.0, "leaf": 1.5, "spine": 1.1}


def parse_factors(text: str) -> dict[str, float]:
    """`leaf=1.3,spine=1.2` -> {"leaf": 1.3, "spine": 1.2}, over the defaults."""
    factors = dict(DEFAULT_FACTORS)
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        try:
            factors[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--slowdown: {part!r} is not <level>=<factor>") from None
        if factors[name.strip()] < 1.0:
            raise ValueError(f"--slowdown: {part!r}: a factor below 1 would make spreading faster")
    return factors


class RuntimeModel:
    """The topology as the core sees it (core.model.Snapshot: a node without a level's label is a domain of its
    own), and the slowdown factors. Depths: 0 the coarsest level, the last one the node."""

    def __init__(self, snapshot: Snapshot, factors: dict[str, float] | None = None) -> None:
        self.factors = dict(factors or DEFAULT_FACTORS)
        self.names = [level.name for level in snapshot.levels] + [snapshot.topology.node_level_name]
        self.node_depth = len(self.names) - 1
        self.path: dict[str, tuple[int, ...]] = {}  # node name -> its domain at every depth (the node: its index)
        self.gpus: dict[str, int] = {}
        for index, node in enumerate(snapshot.nodes):
            self.path[node.name] = (*snapshot.ancestors[index][1:], -1 - index)
            self.gpus[node.name] = node.allocatable.get(GPU, 0)
        self._compact: dict[tuple[int, int], int] = {}

    @classmethod
    def of(cls, topology: dict, nodes: list[dict], factors: dict[str, float] | None = None) -> RuntimeModel:
        return cls(Snapshot([node_from_k8s(node) for node in nodes], topology_from_k8s(topology)), factors)

    def factor(self, job: TraceJob, placed_on: list[str]) -> float:
        out = 1.0
        for depth in range(self.reached_level(placed_on), self.compact_level(job)):
            out *= self.factors.get(self.names[depth], 1.0)
        return out

    def reached_level(self, placed_on: list[str]) -> int:
        """The depth of the finest level one domain of which holds every node (0 when none does)."""
        reached = 0
        for depth in range(self.node_depth + 1):
            if len({self.path[node][depth] for node in placed_on}) > 1:
                break
            reached = depth
        return reached

    def compact_level(self, job: TraceJob) -> int:
        """The depth of the finest level one domain of which holds the whole gang when idle."""
        shape = (job.replicas, job.gpus)
        if shape not in self._compact:
            self._compact[shape] = next((depth for depth in range(self.node_depth, -1, -1)
                                         if max(self._room(depth, job.gpus).values()) >= job.replicas), 0)
        return self._compact[shape]

    def _room(self, depth: int, gpus: int) -> dict[int, int]:
        """Replicas of `gpus` GPUs each domain at this depth holds when idle."""
        room: dict[int, int] = {}
        for node, path in self.path.items():
            room[path[depth]] = room.get(path[depth], 0) + (self.gpus[node] // gpus if gpus else 1)
        return room

    @property
    def capacity(self) -> int:
        """GPUs of the whole cluster."""
        return sum(self.gpus.values())

    def could_ever_run(self, job: TraceJob) -> bool:
        """Whether the gang fits on an idle cluster (inside one domain of its required level, if it has one)."""
        depth = self.depth(job.required) if job.required else None
        if depth is None:
            return sum(self._room(0, job.gpus).values()) >= job.replicas
        return max(self._room(depth, job.gpus).values()) >= job.replicas

    def depth(self, level: str) -> int | None:
        return self.names.index(level) if level in self.names else None

    def domains_used(self, placed_on: list[str], depth: int) -> int:
        return len({self.path[node][depth] for node in placed_on})

    def fewest_domains(self, job: TraceJob, depth: int) -> int:
        """The fewest domains at this depth that could hold the whole gang on an idle cluster."""
        need, used = job.replicas, 0
        for room in sorted(self._room(depth, job.gpus).values(), reverse=True):
            if need <= 0:
                break
            need, used = need - room, used + 1
        return used
