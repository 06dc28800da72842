"""The two value kinds of DRA that are not plain JSON: Kubernetes quantities (device capacities) and semantic
versions (version attributes), exact as apimachinery's resource.Quantity and blang/semver compare them."""

from __future__ import annotations

import re
from fractions import Fraction
from functools import total_ordering

_QUANTITY = re.compile(r"^([+-]?)(\d+\.?\d*|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str | int | float) -> Fraction:
    """A quantity's exact value: "80Gi", "1.5", "500m", "1e3"; ValueError when it is not one."""
    if isinstance(text, bool):
        raise ValueError(f"not a quantity: {text!r}")
    if isinstance(text, int | float):
        return Fraction(text)
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    sign, number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent:
        value *= Fraction(10) ** int(exponent[1:])
    elif suffix in _BINARY:
        value *= 1024 ** _BINARY[suffix]
    else:
        value *= Fraction(10) ** _DECIMAL[suffix or ""]
    return -value if sign == "-" else value


def format_quantity(value: Fraction) -> str:
    """A canonical text for a value (equal values, equal texts): an integer, or numerator/denominator."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-((?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9]\d*|\d*[A-Za-z-][0-9A-Za-z-]*))*))?"
                     r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$")


@total_ordering
class Version:
    """A semantic version 2.0.0; build metadata is kept in the text but neither compared nor part of equality."""

    __slots__ = ("major", "minor", "patch", "pre", "text")

    def __init__(self, text: str):
        match = _SEMVER.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"not a semantic version: {text!r}")
        self.major, self.minor, self.patch = (int(match.group(i)) for i in (1, 2, 3))
        self.pre = tuple(int(p) if p.isdigit() else p for p in match.group(4).split(".")) if match.group(4) else ()
        self.text = text

    @property
    def canonical(self) -> str:
        """The text without build metadata: what equality compares."""
        return self.text.split("+", 1)[0]

    def _key(self) -> tuple:
        # A release sorts after its pre-releases; numeric identifiers sort before alphanumeric ones.
        pre = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, not self.pre, pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Version({self.text!r})"


def compare(a, b) -> int:
    return (a > b) - (a < b)
