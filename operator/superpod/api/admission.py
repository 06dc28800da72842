"""The admission policy the chart ships for tenants' pods (hack/gen-admission.py renders it into the chart).

What the operator counts and bills a pod as rests on facts a tenant could otherwise write: who placed it, whether it
is a TrainingJob's replica, and what a pod gang was bound with. The API server keeps them the operator's (a
ValidatingAdmissionPolicy):
- a pod that asks for GPUs (or any device, through resource claims: not counted yet) is placed by this scheduler:
  created with this scheduler's name and no spec.nodeName (a pod that skips the scheduler would hold GPUs no queue
  admitted, which the operator could count and bill but never refuse);
- what marks a pod as a TrainingJob's replica — a TrainingJob owner reference, the job-name, attempt and replica-index
  labels — is never given to a pod, nor changed, by anyone but the operator (a pod passing for a replica would be
  billed and counted as one GPU-for-GPU, whatever it holds);
- what a pod gang was bound with (BOUND_WITH, written by its binding) is the operator's alone, and a bound pod's
  runtime limit (MAX_RUNTIME) is fixed: a gang let into a reservation or onto spares by its limit keeps it.
It also closes the side doors to GPUs it can see: no container sets the environment the NVIDIA container toolkit
hands GPUs out by (TOOLKIT_ENV: a pod asking for none would see a node's GPUs where the toolkit honours it), ephemeral
containers included; and a pod another scheduler places names only a PriorityClass the chart allows (kube-scheduler
would preempt other tenants' pods, GPU pods too, for one of a higher priority). Its image's own environment, envFrom,
privileged containers and host paths are past its sight: docs/guides/access.md says what is the cluster's to set.
Exempt: whoever may write a TrainingJob's status in the namespace (the operator and cluster admins: not
kube-controller-manager's controllers, whose pods a tenant's DaemonSet or Deployment asks for), and kubelets (mirror
pods). The chart applies it to every namespace but the system's, the release's and those in
`tenantPolicy.exemptNamespaces`."""

from __future__ import annotations

from dataclasses import dataclass

from superpod.api.manifests import ATTEMPT_LABEL, INDEX_LABEL, JOB_LABEL, MAX_RUNTIME
from superpod.api.models import GROUP
from superpod.api.podgang import BOUND_WITH

GPU_PREFIX = "nvidia.com/"  # whole GPUs and MIG slices
REPLICA_LABELS = (JOB_LABEL, ATTEMPT_LABEL, INDEX_LABEL)
TOOLKIT_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
EXEMPT_GROUPS = ("system:nodes",)
# what it applies to: pods, and the subresource ephemeral containers are added through (kubectl debug)
RESOURCES = ("pods", "pods/ephemeralcontainers")
SCHEDULER = "{{ .Values.schedulerName }}"  # Helm fills these in
PRIORITY_CLASSES = "{{ .Values.tenantPolicy.priorityClasses | default list | toJson }}"


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


def _kept(keys: tuple[str, ...], new: str, old: str) -> str:
    """Each key is in both maps or in neither, and the same in both."""
    return (f"{_quoted(keys)}.all(k, (k in variables.{new}) == (k in variables.{old}) && "
            f"(!(k in variables.{new}) || variables.{new}[k] == variables.{old}[k]))")


def _metadata(field: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The variables of a metadata map of the pod, as it is and as it was."""
    return ((field, f"has(object.metadata.{field}) ? object.metadata.{field} : {{}}"),
            ("old" + field.capitalize(),
             f"oldObject != null && has(oldObject.metadata.{field}) ? oldObject.metadata.{field} : {{}}"))


def _of_spec(field: str) -> str:
    return f"(has(object.spec.{field}) ? object.spec.{field} : [])"


MATCH = (  # who it applies to: all but the exempt (above)
    ("not-the-operator-nor-an-admin", f"!authorizer.group('{GROUP}').resource('trainingjobs').subresource('status')"
                                      ".namespace(request.namespace).check('update').allowed()"),
    ("not-a-kubelet", f"!(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in "
                      f"{_quoted(EXEMPT_GROUPS)}))"),
)

VARIABLES = (
    *_metadata("labels"),
    *_metadata("annotations"),
    ("containers", f"object.spec.containers + {_of_spec('initContainers')} + {_of_spec('ephemeralContainers')}"),
    ("asksDevices", f"variables.containers.exists(c, has(c.resources) && ({_asks('requests')} || {_asks('limits')}))"
                    " || (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)"),
    ("jobOwners", _job_owners("object")),
    ("oldJobOwners", f"oldObject == null ? [] : ({_job_owners('oldObject')})"),
    ("wasBound", "oldObject != null && has(oldObject.spec.nodeName) && oldObject.spec.nodeName != ''"),
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
    Rule(_kept(REPLICA_LABELS, "labels", "oldLabels"),
         f"the labels {', '.join(REPLICA_LABELS)} mark a TrainingJob's pods: only superpod-scheduler gives them to a "
         "pod or changes them"),
    Rule(_kept((BOUND_WITH,), "annotations", "oldAnnotations"),
         f"the annotation {BOUND_WITH} says what a pod gang was bound with: only superpod-scheduler writes it"),
    Rule(f"!variables.wasBound || {_kept((MAX_RUNTIME,), 'annotations', 'oldAnnotations')}",
         f"a bound pod's runtime limit is fixed: {MAX_RUNTIME} may not be added, changed or removed once the pod is "
         "bound"),
    Rule("(request.operation != 'CREATE' && !(has(request.subResource) && request.subResource == "
         "'ephemeralcontainers')) || variables.containers.all(c, !has(c.env) || c.env.all(e, !(e.name in "
         f"{_quoted(TOOLKIT_ENV)})))",  # (a container's env is fixed once made: those of pods made before pass)
         f"a container may not set {' nor '.join(TOOLKIT_ENV)}: the NVIDIA container toolkit would hand it GPUs no "
         "queue admitted (a pod's GPUs are those it asks for)"),
    Rule(f"request.operation != 'CREATE' || object.spec.schedulerName == '{SCHEDULER}' || "
         f"!has(object.spec.priorityClassName) || object.spec.priorityClassName in {PRIORITY_CLASSES}",
         "a pod that another scheduler places may name only the PriorityClasses the cluster's admins allow tenants "
         "(superpod-scheduler's tenantPolicy.priorityClasses): kube-scheduler would preempt other tenants' pods for "
         "it"),
)
