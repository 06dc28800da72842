"""A gang's identity: the kind of thing it is, its namespace and its name. Pure.

Three kinds of gang are scheduled: a TrainingJob, the pods other controllers label as one gang (superpod.dev/gang or
the coscheduling pod-group label: the same gang), and a pod alone. Code compares and files gangs by this key, and
says `str(key)` ("namespace/name") to people; `text` and `parse` are the one written form, for what outlives a
cycle (a nomination's victims)."""

from __future__ import annotations

from typing import NamedTuple

TRAINING_JOB, POD_GANG, POD = "TrainingJob", "PodGang", "Pod"
_MARKS = {TRAINING_JOB: "", POD_GANG: "@pods", POD: "@pod"}  # the written form's suffix ('@' is in no object name)


class GangKey(NamedTuple):
    namespace: str
    name: str
    kind: str = TRAINING_JOB

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def of_pods(self) -> bool:
        """Bound from pods other controllers create (a pod gang or a pod alone), not made by the operator."""
        return self.kind != TRAINING_JOB

    @property
    def text(self) -> str:
        return f"{self.namespace}/{self.name}{_MARKS[self.kind]}"

    @staticmethod
    def parse(text: str) -> GangKey:
        """The key `text` wrote. Raises ValueError."""
        where, at, mark = text.partition("@")
        namespace, slash, name = where.partition("/")
        kind = next((kind for kind, suffix in _MARKS.items() if suffix == at + mark), None)
        if not slash or not namespace or not name or "/" in name or kind is None:
            raise ValueError(f"not a gang: {text!r}")
        return GangKey(namespace, name, kind)
