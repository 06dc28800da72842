"""The admission policy the chart ships for tenants' pods (hack/gen-admission.py renders it into the chart).

What the operator counts and bills a pod as rests on two facts a tenant could otherwise write: who placed it, and
whether it is a TrainingJob's replica. The API server keeps both the operator's (a ValidatingAdmissionPolicy):
- a pod that asks for GPUs (or any device, through resource claims: not counted yet) is placed by this scheduler:
  created with this scheduler's name and no spec.nodeName (a pod that skips the scheduler would hold GPUs no queue
  admitted, which the operator could count and bill but never refuse);
- what marks a pod as a TrainingJob's replica — a TrainingJob owner reference, the job-name, attempt and replica-index
  labels — is never given to a pod, nor changed, by anyone but the operator (a pod passing for a replica would be
  billed and counted as one GPU-for-GPU, whatever it holds).
Exempt: whoever may write a TrainingJob's status in the namespace (the operator and cluster admins: not
kube-controller-manager's controllers, whose pods a tenant's DaemonSet or Deployment asks for), and kubelets (mirror
pods). The chart applies it to every namespace but the system's, the release's and those in
`tenantPolicy.exemptNamespaces`."""

from __future__ import annotations

from dataclasses import dataclass

from superpod.api.manifests import ATTEMPT_LABEL, INDEX_LABEL, JOB_LABEL
from superpod.api.models import GROUP

GPU_PREFIX = "nvidia.com/"  # whole GPUs and MIG slices
REPLICA_LABELS = (JOB_LABEL, ATTEMPT_LABEL, INDEX_LABEL)
EXEMPT_GROUPS = ("system:nodes",)
SCHEDULER = "{{ .Values.schedulerName }}"  # Helm fills it in


@dataclass(frozen=True)
class Rule:
    expression: str
    message: str


def _quoted(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def _asks(field: str) -> str:
    return f"(has(c.resources.{field}) && c.resources.{field}.exists(r, r.startsWith('{GPU_PREFIX}')))"


def _job_owners(obj: str) -> str:
    """An object's owner references of kind TrainingJob, whole and of any API group (so none is turned into another)."""
    return (f"has({obj}.metadata.ownerReferences) ? {obj}.metadata.ownerReferences.filter(o, o.kind == "
            "'TrainingJob') : []")


MATCH = (  # who it applies to: all but the exempt (above)
    ("not-the-operator-nor-an-admin", f"!authorizer.group('{GROUP}').resource('trainingjobs').subresource('status')"
                                      ".namespace(request.namespace).check('update').allowed()"),
    ("not-a-kubelet", f"!(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in "
                      f"{_quoted(EXEMPT_GROUPS)}))"),
)

VARIABLES = (
    ("labels", "has(object.metadata.labels) ? object.metadata.labels : {}"),
    ("oldLabels", "oldObject != null && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"),
    ("asksDevices", "(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : []))"
                    f".exists(c, has(c.resources) && ({_asks('requests')} || {_asks('limits')})) || "
                    "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)"),
    ("jobOwners", _job_owners("object")),
    ("oldJobOwners", f"oldObject == null ? [] : ({_job_owners('oldObject')})"),
)

RULES = (
    Rule("request.operation != 'CREATE' || !variables.asksDevices || !has(object.spec.nodeName) || "
         "object.spec.nodeName == ''",
         "a pod that asks for GPUs is placed by superpod-scheduler: it may not set spec.nodeName"),
    Rule(f"request.operation != 'CREATE' || !variables.asksDevices || object.spec.schedulerName == '{SCHEDULER}'",
         f"a pod that asks for GPUs must name spec.schedulerName: {SCHEDULER}"),
    Rule("variables.jobOwners.all(o, variables.oldJobOwners.exists(old, old == o))",
         "only superpod-scheduler makes a TrainingJob's pods: a pod may not be given a TrainingJob owner reference, "
         "nor have one changed (only removed)"),
    Rule(f"{_quoted(REPLICA_LABELS)}.all(k, (k in variables.labels) == (k in variables.oldLabels) && "
         "(!(k in variables.labels) || variables.labels[k] == variables.oldLabels[k]))",
         f"the labels {', '.join(REPLICA_LABELS)} mark a TrainingJob's pods: only superpod-scheduler gives them to a "
         "pod or changes them"),
)
