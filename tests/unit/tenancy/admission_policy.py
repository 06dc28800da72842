"""The chart's tenant pod policy (superpod.api.admission) evaluated as the API server evaluates it, on CEL's C++
runtime: its variables in order, then every validation, for one request. Helm's placeholders are filled as the
chart's values fill them. Who is exempt (its matchConditions) needs the API server's authorizer: the integration
tests (tests/integration/test_tenancy.py) keep that part, and that the API server accepts the policy at all."""

from __future__ import annotations

import json

from cel_expr_python import cel

from superpod.api.admission import PRIORITY_CLASSES, RULES, SCHEDULER, VARIABLES

SCHEDULER_NAME = "superpod-scheduler"


class Policy:
    def __init__(self, priority_classes: tuple[str, ...] = ()) -> None:
        values = {SCHEDULER: SCHEDULER_NAME, PRIORITY_CLASSES: json.dumps(list(priority_classes))}
        dyn = cel.Type.DYN
        self.env = cel.NewEnv(variables={"object": dyn, "oldObject": dyn, "request": dyn,
                                         "variables": cel.Type.Map(cel.Type.STRING, dyn)})
        self.variables = [(name, self._compile(expression, values)) for name, expression in VARIABLES]
        self.rules = [(rule.message, self._compile(rule.expression, values)) for rule in RULES]

    def _compile(self, expression: str, values: dict[str, str]):
        for placeholder, value in values.items():
            expression = expression.replace(placeholder, value)
        return self.env.compile(expression)

    def refusals(self, pod: dict, old: dict | None = None, sub_resource: str = "") -> list[str]:
        """The messages of the validations a tenant's request breaks: CREATE of `pod`, or UPDATE of `old` to `pod`
        (through `sub_resource` if given). One that fails to evaluate refuses too (failurePolicy: Fail)."""
        request = {"operation": "UPDATE" if old is not None else "CREATE", "namespace": "team-a"}
        if sub_resource:  # (the API server leaves empty fields out)
            request["subResource"] = sub_resource
        data = {"object": pod, "oldObject": old, "request": request, "variables": {}}
        for name, program in self.variables:
            data["variables"][name] = _value(program.eval(data=data), name)
        out = []
        for message, program in self.rules:
            result = program.eval(data=data)
            if result.type() != cel.Type.BOOL or not result.value():
                out.append(message if result.type() == cel.Type.BOOL else f"{message} (error: {result.value()})")
        return out


def _value(result, name: str):
    if result.type() == cel.Type.ERROR:
        raise AssertionError(f"variable {name} failed: {result.value()}")
    return result.plain_value()


def tenant_pod(name: str = "p", gpus: int = 0, scheduler: str = SCHEDULER_NAME, **spec) -> dict:
    """A pod as the API server holds it when admission sees it (schedulerName defaulted)."""
    limits = {"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "main", "image": "trainer", **limits}],
                     **spec}}
