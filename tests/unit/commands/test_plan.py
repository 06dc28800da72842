"""`superpod plan`: a dump of the simulated DGX H100 SuperPOD in, stable JSON out; malformed input names the field."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from superpod.api.convert import ConvertError
from superpod.commands.plan import plan_objects, plan_text, run
from superpod.hardware.presets import preset_nodes
from tests.unit.builders import TOPOLOGY_OBJECT as TOPOLOGY

TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "trainer"}]}}


def trainingjob(name: str, replicas: int, gpus: int, priority: int = 0, minute: int = 0, **topology) -> dict:
    return {
        "apiVersion": "superpod.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": f"2026-11-30T05:{minute:02d}:00Z"},
        "spec": {"replicas": replicas, "resources": {"gpus": gpus}, "topology": topology, "priority": priority,
                 "template": TEMPLATE},
    }


def busy_pod(name: str, node: str, gpus: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "other"},
        "spec": {"nodeName": node, "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"phase": "Running"},
    }


def ready(nodes: list[dict]) -> list[dict]:
    for n in nodes:  # as KWOK reports them once initialised
        n["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return nodes


def dgx_dump() -> list[dict]:
    nodes = ready(preset_nodes("dgx-h100"))
    names = [n["metadata"]["name"] for n in nodes]
    nodes[5]["spec"]["unschedulable"] = True
    pods = [busy_pod(f"busy-{i}", names[i], 8) for i in range(0, 20)]  # su-1: 20 of 32 nodes busy
    jobs = [
        trainingjob("pretrain", 64, 8, priority=10, required="leaf"),  # never fits: a leaf has 32 nodes
        trainingjob("finetune", 32, 8, priority=5, minute=1, required="leaf"),
        trainingjob("eval", 1, 4, minute=2),
        trainingjob("sweep", 8, 8, minute=3, required="leaf"),
    ]
    done = trainingjob("old", 4, 8)
    done["status"] = {"phase": "Succeeded"}
    return [{"apiVersion": "v1", "kind": "List", "items": [*nodes, *pods, TOPOLOGY, *jobs, done]}]


def test_plan_on_simulated_dgx_h100_superpod():
    out = plan_objects(dgx_dump()[0]["items"])
    assert [j["name"] for j in out["jobs"]] == ["pretrain", "finetune", "eval", "sweep"]
    assert set(out["jobs"][0]) == {"namespace", "name", "placed", "assignments", "reason", "code", "preempts",
                                   "reservation", "blockedBy"}
    pre, fine, ev, sweep = out["jobs"]
    assert not pre["placed"] and pre["assignments"] == {}
    assert pre["reason"].startswith("needs 64 nodes with 8 free NVIDIA-H100-80GB-HBM3 GPUs inside one leaf")
    assert pre["code"] == "TooLarge" and fine["code"] is None
    assert fine["placed"] and len(fine["assignments"]) == 32 and fine["reason"] is None
    assert sorted(r for rs in fine["assignments"].values() for r in rs) == list(range(32))
    # the 4-GPU eval job goes to the first leaf with room (su-1, partly busy), not into a whole free leaf
    assert ev["placed"] and next(iter(ev["assignments"])).startswith("dgx-su01-")
    assert sweep["placed"] and len({n[:8] for n in sweep["assignments"]}) == 1


def test_plan_reads_multi_document_yaml_and_cli_exit_codes(tmp_path, capsys):
    items = dgx_dump()[0]["items"]
    f = tmp_path / "dump.yaml"
    f.write_text(yaml.safe_dump_all(items))
    assert plan_text(f.read_text()) == plan_objects(items)
    assert run(SimpleNamespace(file=str(f), pretty=False)) == 0
    assert json.loads(capsys.readouterr().out)["jobs"][1]["placed"] is True
    bad = [i for i in items if i["kind"] != "TrainingJob"] + [trainingjob("broken", 0, 8)]
    f.write_text(yaml.safe_dump_all(bad))
    assert run(SimpleNamespace(file=str(f), pretty=False)) == 1
    assert "TrainingJob team-a/broken: spec.replicas:" in capsys.readouterr().err
    assert run(SimpleNamespace(file=str(tmp_path / "missing.yaml"), pretty=False)) == 2


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ("- 1\n", "document 1"),
        ("kind: List\nitems: 3\n", "List (document 1): items"),
        ("kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: many}}\n", "Node n1: status.allocatable.cpu"),
        ("kind: List\nitems:\n- {kind: ClusterTopology, metadata: {name: a}, spec: {levels: []}}\n", "spec.levels"),
        ("a: [\n", "input: <yaml>"),
    ],
)
def test_malformed_input_names_the_object_and_field(doc, where):
    with pytest.raises(ConvertError) as e:
        plan_text(doc)
    assert where in str(e.value)


def test_plan_rejects_ambiguous_topology_and_duplicate_nodes():
    items = dgx_dump()[0]["items"]
    second = {**TOPOLOGY, "metadata": {"name": "other"}}
    with pytest.raises(ConvertError, match="ClusterTopology default, other: metadata.name: more than one"):
        plan_objects([*items, second])
    node = next(i for i in items if i["kind"] == "Node")
    with pytest.raises(ConvertError, match=f"Node {node['metadata']['name']}: metadata.name: duplicate node"):
        plan_objects([*items, node])


def test_plan_without_topology_places_on_nodes_only():
    nodes = ready(preset_nodes("rental-mixed"))
    b200 = trainingjob("b", 1, 8, minute=1)
    b200["spec"]["resources"]["gpuProduct"] = "NVIDIA-B200"
    out = plan_objects([*nodes, trainingjob("a", 3, 8), b200])
    assert out["jobs"][0]["placed"] and len(out["jobs"][0]["assignments"]) == 3
    assert out["jobs"][1]["code"] == "Invalid"
    assert out["jobs"][1]["reason"] == (  # the operator's own words: it would mark the job Invalid
        "no node has GPU product 'NVIDIA-B200' (nvidia.com/gpu.product here: NVIDIA-A100-SXM4-80GB, "
        "NVIDIA-H100-80GB-HBM3, NVIDIA-H200)"
    )


def running(job: dict, nodes: list[str], uid: str) -> list[dict]:
    """A Running TrainingJob (placed an hour before the plan) and its running pods, as a dump holds them."""
    from superpod.api import manifests

    job["metadata"]["uid"] = uid
    job["status"] = {"phase": "Running", "attempt": 1, "attemptStartTime": "2026-11-30T04:00:00Z",
                     "placement": {node: [i] for i, node in enumerate(nodes)}}
    pods = [manifests.pod(job, 1, i, node, manifests.SCHEDULER_NAME, "") for i, node in enumerate(nodes)]
    for pod in pods:
        pod["status"] = {"phase": "Running", "startTime": "2026-11-30T04:00:00Z"}
    return [job, *pods]


def test_plan_names_the_running_gangs_a_job_would_preempt():
    nodes = ready(preset_nodes("dgx-h100", 2, nodes_per_unit=2))
    names = sorted(n["metadata"]["name"] for n in nodes)
    items = [*nodes, TOPOLOGY, *running(trainingjob("low", 2, 8), names, "uid-low"),
             trainingjob("urgent", 2, 8, priority=100, minute=5)]
    now = 1_796_022_000.0  # 2026-11-30T05:40:00Z
    [urgent] = plan_objects(items, now)["jobs"]
    assert urgent["name"] == "urgent" and not urgent["placed"] and urgent["assignments"] == {}
    assert urgent["preempts"] == [{"kind": "TrainingJob", "namespace": "team-a", "name": "low"}]
    assert urgent["reason"].startswith("preempting team-a/low (priority 0) to start on nodes ")
    assert urgent["code"] == "Preempting" and urgent["reservation"]["nodeCount"] == 2


def claiming_job(name: str, replicas: int, template: str, minute: int = 0) -> dict:
    job = trainingjob(name, replicas, 0, minute=minute, required="leaf")
    job["spec"]["resources"] = {}
    job["spec"]["template"] = {"spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
                                        "containers": [{"name": "main", "image": "trainer",
                                                        "resources": {"claims": [{"name": "gpus"}]}}]}}
    return job


def test_a_dump_with_dra_objects_places_claims_by_the_devices_and_says_why_not():
    from superpod.hardware import dra_slices

    nodes = ready(preset_nodes("dgx-h100", nodes=4, nodes_per_unit=2))
    slices = [body for node in nodes for body in dra_slices.node_slices(node)]

    def template(name: str, product: str) -> dict:
        selector = {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].productName == '{product}'"}}
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": "team-a"}, "spec": {"spec": {"devices": {"requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8,
                                                 "selectors": [selector]}}]}}}}
    objs = [*nodes, TOPOLOGY, *slices, *dra_slices.device_classes(), template("h100", "NVIDIA H100 80GB HBM3"),
            template("b200", "NVIDIA B200"), claiming_job("fits", 2, "h100"),
            claiming_job("b200", 1, "b200", minute=1), claiming_job("missing", 1, "nope", minute=2)]
    jobs = {j["name"]: j for j in plan_objects(objs, now=0)["jobs"]}
    assert jobs["fits"]["placed"] and len(jobs["fits"]["assignments"]) == 2
    assert not jobs["b200"]["placed"] and "claiming 8 devices of class gpu.nvidia.com" in jobs["b200"]["reason"]
    assert not jobs["missing"]["placed"] and "ResourceClaimTemplate team-a/nope does not exist" in \
        jobs["missing"]["reason"] and jobs["missing"]["code"] == "Invalid"


def test_a_compute_domain_job_whose_channel_template_is_not_in_the_dump_waits_for_its_domain():
    from superpod.hardware import dra_slices

    nodes = ready(preset_nodes("gb200-nvl72", nodes=3, trays_per_rack=3))
    job = claiming_job("nvl", 3, "tray")
    job["spec"]["topology"] = {"required": "nvlink"}
    job["spec"]["computeDomain"] = {}
    job["metadata"]["uid"] = "5e1f0000-0000-0000-0000-000000000000"
    tray = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "tray", "namespace": "team-a"}, "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}]}}}}
    objs = [*nodes, TOPOLOGY, *[b for n in nodes for b in dra_slices.node_slices(n)], *dra_slices.device_classes(),
            tray, job]
    [planned] = plan_objects(objs, now=0)["jobs"]
    assert not planned["placed"] and planned["code"] == "ComputeDomainPending", planned
    assert "waiting for ComputeDomain team-a/nvl" in planned["reason"]
