"""The README's commands as a user types them: the `kubectl` lines of its "A first job" section, read from README.md,
run against the operator on a 128-node DGX H100 SuperPOD (the dgx-h100 preset, alone in the cluster), and their
output compared with what the README shows; and its install command, as a server-side dry run."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
from kubernetes import client

from superpod.hardware import nodes, presets
from tests.integration.operator_env import REPO
from tests.integration.wait import wait_for

README = REPO / "README.md"
PRESET = "dgx-h100"
TABLE_COLUMNS = ("NAME", "PHASE", "GPUS", "READY", "PLACEMENT")  # AGE differs from run to run


def section(title: str) -> str:
    """README's section `title`: from its heading to the next heading of its level."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of `text` in order, as (language, body)."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)


def commands_and_outputs(text: str) -> list[tuple[str, str | None]]:
    """Each `kubectl` line of the sh blocks, with the output block shown right after its block (for its last line)."""
    fenced = blocks(text)
    out: list[tuple[str, str | None]] = []
    for i, (language, body) in enumerate(fenced):
        if language != "sh":
            continue
        lines = [line for line in body.splitlines() if line.startswith("kubectl ")]
        shown = fenced[i + 1][1] if i + 1 < len(fenced) and fenced[i + 1][0] == "" else None
        out += [(line, shown if j == len(lines) - 1 else None) for j, line in enumerate(lines)]
    return out


def kubectl(cluster, line: str, *extra: str) -> str:
    """Run README line `line` with the test control plane's kubectl, from the repository's root as the README does."""
    args = shlex.split(line, comments=True)
    assert args[0] == "kubectl", line
    done = subprocess.run([cluster.kubectl_path, f"--kubeconfig={cluster.kubeconfig}", *args[1:], *extra], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{line}\n{done.stderr}"
    return done.stdout


def table(text: str) -> dict[str, tuple[str, ...]]:
    """`kubectl get` output as {name: the values of TABLE_COLUMNS}, cut at the header's column starts."""
    header, *rows = text.strip("\n").splitlines()
    names = header.split()
    starts = [header.index(name) for name in names]
    cells = [[row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)] for row in rows]
    picked = [names.index(column) for column in TABLE_COLUMNS]
    return {row[0]: tuple(row[i] for i in picked) for row in cells}


def words(text: str) -> str:
    return " ".join(text.split())


def alone(cluster) -> None:
    """The dgx-h100 preset as the cluster's only nodes, settled; other simulated clusters (earlier tests') deleted."""
    core = client.CoreV1Api(cluster.api)
    if any(presets.SIM_LABEL not in (n.metadata.labels or {}) for n in core.list_node().items):
        pytest.skip("the cluster has nodes other than simulated ones: the README's figures are the preset's alone")
    for name in nodes.list_clusters(cluster.api):
        if name != PRESET:
            nodes.delete_cluster(cluster.api, name)
    objs = presets.preset_nodes(PRESET)
    nodes.create_nodes(cluster.api, objs)

    def settled():  # Ready, and the controller-manager's not-ready taint lifted
        items = core.list_node().items
        return len(items) == len(objs) and all(not n.spec.taints and any(
            c.type == "Ready" and c.status == "True" for c in n.status.conditions or []) for n in items)
    wait_for(settled, 60, f"the {len(objs)} nodes of {PRESET}, and only they, Ready and untainted")


def test_the_install_command_applies_cleanly(crds):
    (line, _), = [c for c in commands_and_outputs(section("Install")) if " crds/" in c[0]]
    lines = kubectl(crds, line, "--dry-run=server").splitlines()
    assert lines and all(line.endswith("(server dry run)") for line in lines), lines


def test_a_first_job_shows_what_the_readme_shows(cluster, operator):
    steps = commands_and_outputs(section("A first job"))
    assert [shown is not None for _, shown in steps] == [False, True, True], steps
    (apply, _), (get, shown_table), (why, shown_reason) = steps
    alone(cluster)
    try:
        kubectl(cluster, apply)
        said = {get: "", why: ""}

        def as_shown():
            said.update({get: kubectl(cluster, get), why: kubectl(cluster, why)})
            return table(said[get]) == table(shown_table) and words(said[why]) == words(shown_reason)
        try:
            wait_for(as_shown, 30, "the output the README shows")
        except AssertionError:  # the difference, shown by pytest
            shown = (table(shown_table), words(shown_reason))
            assert (table(said[get]), words(said[why])) == shown, said[get] + said[why]
    finally:
        kubectl(cluster, apply.replace("kubectl apply", "kubectl delete"), "--wait=false")
        nodes.delete_cluster(cluster.api, PRESET)
