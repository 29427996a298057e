"""NOTES.txt, which `helm install` prints, holds a first claim an operator can paste as is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy.chartkit import (
    GPU_NODE_LABELS,
    KUBE_VERSIONS,
    notes,
    notes_for,
)

HEREDOC_START = "kubectl apply -f - <<'YAML'"
TERMINATOR = "YAML"

# A kubectl that records its arguments and its standard input instead of reaching a cluster.
FAKE_KUBECTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$RECORD_DIR/args"
cat > "$RECORD_DIR/stdin"
"""


def snippet(text: str) -> str:
    """Return the lines from `kubectl apply` to the heredoc terminator, as pasted."""
    lines = text.splitlines()
    (start,) = [i for i, line in enumerate(lines) if HEREDOC_START in line]
    end = next(i for i in range(start + 1, len(lines)) if lines[i].strip() == TERMINATOR)
    return "\n".join(lines[start : end + 1]) + "\n"


def paste(text: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], str, str]:
    """Run ``text`` in bash with a fake kubectl; return the run, kubectl's args and its stdin."""
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    bin_dir.mkdir()
    record.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD_DIR": str(record)}
    # A line after the snippet shows whether the heredoc ended where the snippet ends.
    script = tmp_path / "pasted.sh"
    script.write_text(text + "echo after-the-snippet\n")
    done = subprocess.run(
        ["/bin/bash", str(script)],
        stdin=subprocess.DEVNULL,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    args = (record / "args").read_text() if (record / "args").exists() else ""
    stdin = (record / "stdin").read_text() if (record / "stdin").exists() else ""
    return done, args, stdin


def test_notes_show_how_to_try_a_first_claim(helm: Path) -> None:
    """NOTES.txt (printed by helm install) gives a claim template and a pod of the driver."""
    text = notes(helm, {"driverName": "gpu.example.com"})
    assert "kind: ResourceClaimTemplate" in text
    assert "deviceClassName: gpu.example.com" in text
    assert "resourceClaimTemplateName: gpu-5g-30" in text
    assert "gpu.example.com/allocation" in text
    assert "kubectl get resourceslices --field-selector spec.driver=gpu.example.com" in text
    # Where the plugin runs, with every label of the default node affinity.
    for label in GPU_NODE_LABELS:
        assert f"{label}=true" in text


def test_notes_say_who_adds_the_gate(helm: Path) -> None:
    """With gate.mode=policy NOTES name the admission policy and its annotation; else not."""
    policy = notes(helm, {"gate": {"mode": "policy"}})
    assert "MutatingAdmissionPolicy gpushare-gate" in policy
    assert "gpushare.dra.dev/policy-gate" in policy
    webhook = notes(helm, {"gate": {"mode": "webhook"}})
    assert "MutatingAdmissionPolicy" not in webhook


def test_the_heredoc_starts_and_ends_at_column_zero(helm: Path) -> None:
    """The terminator is a line that is exactly `YAML`, and `---` is a document marker."""
    lines = snippet(notes(helm)).splitlines()
    assert lines[0] == HEREDOC_START
    assert lines[-1] == TERMINATOR
    assert "---" in lines  # at column 0, where YAML reads it as a document separator
    # The objects are not indented either: the first key of each document is at column 0.
    assert "apiVersion: resource.k8s.io/v1" in lines
    assert "apiVersion: v1" in lines


@pytest.mark.parametrize(
    "values",
    [{}, {"driverName": "gpu.example.com"}, {"gate": {"enabled": False}}],
    ids=["defaults", "custom-driver-name", "gate-off"],
)
def test_the_pasted_snippet_applies_two_valid_objects(
    helm: Path, tmp_path: Path, values: dict[str, Any]
) -> None:
    """Pasted into bash, the snippet runs `kubectl apply -f -` with two objects that validate."""
    done, args, stdin = paste(snippet(notes(helm, values)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "here-document" not in done.stderr  # bash warns when a heredoc runs to end of input
    assert done.stdout == "after-the-snippet\n"  # the heredoc ended, the next line ran
    assert args == "apply -f -\n"
    docs = [d for d in yaml.safe_load_all(stdin) if d]
    assert [d["kind"] for d in docs] == ["ResourceClaimTemplate", "Pod"]
    assert TERMINATOR not in stdin.splitlines()
    driver = values.get("driverName", "gpushare.dra.dev")
    request = docs[0]["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == driver
    for version in KUBE_VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize(
    ("version", "capacity"), [("1.34.0", False), ("1.35.0", False), ("1.36.0", True)]
)
def test_the_first_claim_asks_in_the_form_the_clusters_version_keeps(
    helm: Path, tmp_path: Path, version: str, capacity: bool
) -> None:
    """1.36+ gets a capacity request; 1.34/1.35 (which drop it) the same share by config."""
    _, _, stdin = paste(snippet(notes_for(helm, version, tmp_path)), tmp_path)
    template = next(d for d in yaml.safe_load_all(stdin) if d and d["kind"] != "Pod")
    devices = template["spec"]["spec"]["devices"]
    parameters = devices["config"][0]["opaque"]["parameters"]
    if capacity:
        assert devices["requests"][0]["exactly"]["capacity"]["requests"] == {
            "cores": "30", "memory": "5Gi",
        }  # fmt: skip
        assert "cores" not in parameters
    else:
        assert "capacity" not in devices["requests"][0]["exactly"]
        assert (parameters["cores"], parameters["memory"]) == (30, "5Gi")
