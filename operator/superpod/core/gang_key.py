"""A gang's identity: the kind of thing it is, its namespace and its name. Pure.

Three kinds of gang are scheduled: a TrainingJob, the pods other controllers label as one gang (superpod.dev/gang or
the coscheduling pod-group label: the same gang), and a pod alone. Code compares and files gangs by this key, reads
`kind`, `namespace` and `name` off it, and says `str(key)` ("namespace/name") to people. Its value is its written
form (`text`: the kind as a suffix, '@' being in no object name), the one form for what outlives a cycle (a
nomination's victims), read back by `parse`: so a key hashes, compares and sorts as fast as a string, which the cycle
does thousands of times over a long queue."""

from __future__ import annotations

TRAINING_JOB, POD_GANG, POD = "TrainingJob", "PodGang", "Pod"
_MARKS = {TRAINING_JOB: "", POD_GANG: "@pods", POD: "@pod"}
_KINDS = {mark: kind for kind, mark in _MARKS.items()}


class GangKey(str):
    __slots__ = ()

    def __new__(cls, namespace: str, name: str, kind: str = TRAINING_JOB) -> GangKey:
        return super().__new__(cls, f"{namespace}/{name}{_MARKS[kind]}")

    def __getnewargs__(self) -> tuple[str, str, str]:  # copies and pickles are made again from the parts
        return self.namespace, self.name, self.kind

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __repr__(self) -> str:
        return f"GangKey({self.namespace!r}, {self.name!r}, {self.kind!r})"

    @property
    def text(self) -> str:
        return str.__str__(self)

    @property
    def namespace(self) -> str:
        return self.partition("/")[0]

    @property
    def name(self) -> str:
        return self.partition("/")[2].partition("@")[0]

    @property
    def kind(self) -> str:
        at = self.find("@")
        return TRAINING_JOB if at < 0 else _KINDS[self[at:]]

    @property
    def of_pods(self) -> bool:
        """Bound from pods other controllers create (a pod gang or a pod alone), not made by the operator."""
        return "@" in self

    @staticmethod
    def parse(text: str) -> GangKey:
        """The key `text` wrote. Raises ValueError."""
        where, at, mark = text.partition("@")
        namespace, slash, name = where.partition("/")
        kind = _KINDS.get(at + mark)
        if not slash or not namespace or not name or "/" in name or kind is None:
            raise ValueError(f"not a gang: {text!r}")
        return GangKey(namespace, name, kind)
