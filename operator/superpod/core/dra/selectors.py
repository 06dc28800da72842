"""CEL device selectors, evaluated as kube-scheduler's DRA allocator does (k8s.io/dynamic-resource-allocation/cel).

The environment: one variable `device` with `driver`, `attributes[domain][id]` and `capacity[domain][id]`
(a quantity); a domain the device lacks reads as an empty map, an id it lacks is a runtime error; the Kubernetes
quantity and semver libraries (`quantity()`, `semver()`, `compareTo`, `isGreaterThan`, ...), cel.bind, the
strings extension and optionals. The runtime is cel-expr-python (CEL's C++ implementation); quantities and
versions are opaque to CEL as in Kubernetes (two small protobuf message types), so `quantity("1") > 3` does not
compile.

Results are cached by what an expression can see: an expression that reads only `device.driver` and literal
attribute or capacity lookups is evaluated once per distinct value of those, so identical GPUs that differ only in
their UUIDs cost one evaluation."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from superpod.core.dra.model import MISSING, UNSUPPORTED, Device
from superpod.core.dra.values import Version, compare, format_quantity, parse_quantity


class SelectorError(ValueError):
    """A selector that does not compile, or failed on a device: kube-scheduler stops allocating the claim."""


def _message_types():
    proto = descriptor_pb2.FileDescriptorProto(name="superpod/dra/values.proto", package="superpod.dra",
                                               syntax="proto3")
    for name in ("Quantity", "Semver"):
        message = proto.message_type.add(name=name)
        message.field.add(name="value", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                          label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    get = message_factory.GetMessageClass
    return pool, get(pool.FindMessageTypeByName("superpod.dra.Quantity")), \
        get(pool.FindMessageTypeByName("superpod.dra.Semver"))


_POOL, QuantityMessage, SemverMessage = _message_types()


def quantity_value(value: Fraction):
    return QuantityMessage(value=format_quantity(value))


def _fraction(message) -> Fraction:
    return Fraction(message.value)


def _version(message) -> Version:
    return Version(message.value)


def _semver_message(version: Version):
    return SemverMessage(value=version.canonical)


def _normalized(text: str) -> str:
    """semver(text, true): a leading "v", missing minor or patch and leading zeros are accepted."""
    core, rest = re.match(r"^([0-9.]*)(.*)$", text.removeprefix("v")).groups()
    parts = [str(int(p)) if p.isdigit() else p for p in core.split(".")] if core else []
    return ".".join(parts + ["0"] * (3 - len(parts))) + rest


def _is(parse: Callable[[str], object]) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            parse(text)
        except ValueError:
            return False
        return True
    return check


def _environment():
    quantity, semver = cel.Type("superpod.dra.Quantity"), cel.Type("superpod.dra.Semver")
    t = cel.Type

    def member(name, receiver, parameters, result, impl):
        overload_id = f"{receiver.name().rsplit('.', 1)[-1].lower()}_{name}_" + "_".join(p.name() for p in parameters)
        if impl is None:
            return name, cel.Overload(overload_id, result, [receiver, *parameters], is_member=True)
        return name, cel.Overload(overload_id, result, [receiver, *parameters], is_member=True, impl=impl)

    def function(name, parameters, result, impl):
        return name, cel.Overload(f"{name}_" + "_".join(p.name() for p in parameters), result, parameters, impl=impl)

    q, v = _fraction, _version
    overloads = [
        function("quantity", [t.STRING], quantity, lambda s: quantity_value(parse_quantity(s))),
        function("isQuantity", [t.STRING], t.BOOL, _is(parse_quantity)),
        member("sign", quantity, [], t.INT, lambda a: compare(q(a), 0)),
        member("isInteger", quantity, [], t.BOOL, lambda a: q(a).denominator == 1 and abs(q(a)) < 2 ** 63),
        member("asInteger", quantity, [], t.INT, _as_integer),
        member("asApproximateFloat", quantity, [], t.DOUBLE, lambda a: float(q(a))),
        member("add", quantity, [quantity], quantity, lambda a, b: quantity_value(q(a) + q(b))),
        member("add", quantity, [t.INT], quantity, lambda a, b: quantity_value(q(a) + b)),
        member("sub", quantity, [quantity], quantity, lambda a, b: quantity_value(q(a) - q(b))),
        member("sub", quantity, [t.INT], quantity, lambda a, b: quantity_value(q(a) - b)),
        member("compareTo", quantity, [quantity], t.INT, lambda a, b: compare(*_ordered(a, b))),
        member("isGreaterThan", quantity, [quantity], t.BOOL, lambda a, b: compare(*_ordered(a, b)) > 0),
        member("isLessThan", quantity, [quantity], t.BOOL, lambda a, b: compare(*_ordered(a, b)) < 0),
        function("semver", [t.STRING], semver, lambda s: _semver_message(Version(s))),
        function("semver", [t.STRING, t.BOOL], semver,
                 lambda s, n: _semver_message(Version(_normalized(s) if n else s))),
        function("isSemver", [t.STRING], t.BOOL, _is(Version)),
        function("isSemver", [t.STRING, t.BOOL], t.BOOL, lambda s, n: _is(Version)(_normalized(s) if n else s)),
        member("major", semver, [], t.INT, lambda a: v(a).major),
        member("minor", semver, [], t.INT, lambda a: v(a).minor),
        member("patch", semver, [], t.INT, lambda a: v(a).patch),
        # the runtime tells messages apart by kind only: one implementation serves both value types
        member("compareTo", semver, [semver], t.INT, None),
        member("isGreaterThan", semver, [semver], t.BOOL, None),
        member("isLessThan", semver, [semver], t.BOOL, None),
        # includes(): a value equals itself (list-type attributes, whose lists it searches, are not read here)
        member("includes", t.STRING, [t.STRING], t.BOOL, lambda a, b: a == b),
        member("includes", t.INT, [t.INT], t.BOOL, lambda a, b: a == b),
        member("includes", t.BOOL, [t.BOOL], t.BOOL, lambda a, b: a == b),
        member("includes", semver, [semver], t.BOOL, lambda a, b: v(a) == v(b)),
    ]
    by_name: dict[str, list] = {}
    for name, overload in overloads:
        by_name.setdefault(name, []).append(overload)
    declarations = [cel.FunctionDecl(name, group) for name, group in by_name.items()]
    env = cel.NewEnv(_POOL, variables={"device": t.Map(t.STRING, t.DYN)}, functions=declarations,
                     extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(), ext_optional.ExtOptional()])
    return env, t


def _ordered(a, b) -> tuple:
    """Two quantities or two versions as comparable Python values."""
    read = _version if isinstance(a, SemverMessage) else _fraction
    return read(a), read(b)


def _as_integer(message) -> int:
    value = _fraction(message)
    if value.denominator != 1 or not -2 ** 63 <= value < 2 ** 63:
        raise ValueError(f"cannot convert value to integer: {format_quantity(value)}")
    return int(value)


# --- what an expression can see ---------------------------------------------------------------------------------

_QUOTED = (r"'''(?:\\.|[^\\])*?'''", r'"""(?:\\.|[^\\])*?"""', r"'(?:\\.|[^'\\\n])*'", r'"(?:\\.|[^"\\\n])*"')
_TOKEN = re.compile(r"\s+|(?P<string>[rRbB]{0,2}(?:" + "|".join(_QUOTED) + r"))|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                    r"|(?P<number>\d[\w.]*)|(?P<symbol>\.\?|\[\?|[^\sA-Za-z0-9_])")


@dataclass(frozen=True)
class References:
    """What of a device an expression reads besides its driver and allowMultipleAllocations: (kind, domain, id)
    for "attributes" and "capacity"."""

    lookups: tuple[tuple[str, str, str], ...]
    domains: tuple[tuple[str, str], ...]  # (kind, domain) looked up with a literal: an empty map when absent
    complete: bool = True  # False: it may read more than these lookups (every value of the device counts)


def _tokens(expression: str) -> list[tuple[str, str]] | None:
    tokens, at = [], 0
    while at < len(expression):
        match = _TOKEN.match(expression, at)
        if match is None:
            return None
        at = match.end()
        if match.lastgroup:
            tokens.append((match.lastgroup, match.group(match.lastgroup)))
    return tokens


def _literal(token: tuple[str, str]) -> str | None:
    if token[0] != "string" or token[1][0] in "bB" or token[1][:2].lower() in ("rb", "br"):
        return None
    try:
        value = ast.literal_eval(token[1])
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def references(expression: str) -> References:
    """The device values `expression` reads through literal lookups; incomplete when it may read more."""
    tokens = _tokens(expression)
    if tokens is None:
        return References((), (), complete=False)
    lookups, domains, complete = [], [], True
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        i += 1
        if kind != "name" or text != "device" or (i > 1 and tokens[i - 2][1] in (".", ".?")):
            continue
        following = [t[1] for t in tokens[i:i + 2]]
        if following in ([".", "driver"], [".", "allowMultipleAllocations"]):
            i += 2
            continue
        if len(following) < 2 or following[0] != "." or following[1] not in ("attributes", "capacity"):
            complete = False
            continue
        domain, name, i = _lookup(tokens, i + 2)
        if domain is not None:
            domains.append((following[1], domain))
        if name is None:
            complete = False
        else:
            lookups.append((following[1], domain, name))
    return References(tuple(dict.fromkeys(lookups)), tuple(dict.fromkeys(domains)), complete)


def _lookup(tokens, at: int):
    """`[domain]` then `.id`, `.?id`, `[id]` or `[?id]` from `at`: (domain, id, the next position); None for a part
    that is not a literal lookup."""
    def index(position):
        if position + 2 < len(tokens) and tokens[position][1] in ("[", "[?") and tokens[position + 2][1] == "]":
            return _literal(tokens[position + 1]), position + 3
        return None, position

    domain, at = index(at)
    if domain is None or at >= len(tokens):
        return domain, None, at
    if tokens[at][1] in (".", ".?") and at + 1 < len(tokens) and tokens[at + 1][0] == "name":
        called = at + 2 < len(tokens) and tokens[at + 2][1] == "("  # a function of the whole map: size(), all()
        return domain, None if called else tokens[at + 1][1], at + 2
    name, at = index(at)
    return domain, name, at


# --- compiled selectors and their evaluation ----------------------------------------------------------------------


class Selector:
    """One compiled expression, with what it reads."""

    __slots__ = ("expression", "program", "refs", "results")

    def __init__(self, expression: str, program, refs: References):
        self.expression, self.program, self.refs = expression, program, refs
        self.results: dict[object, bool | str] = {}  # by what it sees: True, False, or a runtime error's text


class Selectors:
    """Compiles selectors once and evaluates them per device, cached by what each expression can see."""

    def __init__(self, max_results: int = 100_000):
        self.env, self.types = _environment()
        self.compiled: dict[str, Selector | str] = {}  # a compile error's text for expressions that do not compile
        self.max_results = max_results

    def compile(self, expression: str) -> Selector:
        found = self.compiled.get(expression)
        if found is None:
            found = self.compiled[expression] = self._compile(expression)
        if isinstance(found, str):
            raise SelectorError(found)
        return found

    def _compile(self, expression: str) -> Selector | str:
        try:
            program = self.env.compile(expression)
        except RuntimeError as error:
            return f"CEL compile error: {_first_line(error)}"
        if program.return_type() not in (self.types.BOOL, self.types.DYN):
            return f"CEL compile error: must evaluate to bool, not {program.return_type().name()}"
        return Selector(expression, program, references(expression))

    def matches(self, expression: str, device: Device) -> bool:
        """Whether `device` satisfies `expression`; SelectorError when it does not compile or fails on the device."""
        selector = self.compile(expression)
        key = _seen(selector.refs, device)
        result = selector.results.get(key)
        if result is None:
            result = self._evaluate(selector, device)
            if len(selector.results) >= self.max_results:
                selector.results.clear()
            selector.results[key] = result
        if isinstance(result, str):
            raise SelectorError(f"CEL runtime error on device {'/'.join(device.id)}: {result}")
        return result

    def all_match(self, expressions: tuple[str, ...], device: Device) -> bool:
        return all(self.matches(expression, device) for expression in expressions)

    def _evaluate(self, selector: Selector, device: Device) -> bool | str:
        value = selector.program.eval(data={"device": _cel_device(selector.refs, device)})
        if value.type() == self.types.ERROR:
            return str(value.value())
        if value.type() != self.types.BOOL:
            return f"the result is a {value.type().name()}, not a bool"
        return bool(value.value())


def _first_line(error: Exception) -> str:
    return str(error).split("\n", 1)[0].removeprefix("INVALID_ARGUMENT: ")


def _tagged(value):
    """A cache key's part: True, 1 and 1.0 are equal in Python but not to CEL."""
    return MISSING if value is MISSING else (type(value).__name__, value)


def _seen(refs: References, device: Device):
    if not refs.complete:
        return device
    values = []
    for kind, domain, name in refs.lookups:
        values.append(_tagged(device.attribute(domain, name) if kind == "attributes"
                              else device.capacity_of(domain, name)))
    return device.driver, device.multiple_allocations, tuple(values)


def _cel_value(value):
    if isinstance(value, Version):
        return _semver_message(value)
    if isinstance(value, Fraction):
        return quantity_value(value)
    return value


def _cel_device(refs: References, device: Device) -> dict:
    """The `device` variable: only what the expression reads when that is known, every value otherwise; a domain
    looked up and absent is an empty map."""
    attributes: dict[str, dict] = {}
    capacity: dict[str, dict] = {}
    if not refs.complete:
        by_attribute, by_capacity = device.by_domain
        attributes = {d: {k: _cel_value(v) for k, v in values.items() if v is not UNSUPPORTED}
                      for d, values in by_attribute.items()}
        capacity = {d: {k: quantity_value(v) for k, v in values.items()} for d, values in by_capacity.items()}
    for kind, domain in refs.domains:
        (attributes if kind == "attributes" else capacity).setdefault(domain, {})
    for kind, domain, name in refs.lookups:
        value = device.attribute(domain, name) if kind == "attributes" else device.capacity_of(domain, name)
        if value is not MISSING and value is not UNSUPPORTED:
            (attributes if kind == "attributes" else capacity)[domain][name] = _cel_value(value)
    return {"driver": device.driver, "allowMultipleAllocations": device.multiple_allocations,
            "attributes": attributes, "capacity": capacity}
