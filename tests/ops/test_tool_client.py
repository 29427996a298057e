"""status and cleanup find their cluster as kubectl does, ~/.kube/config and --context included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from gpushare_simulator.harness.apiserver import FakeApiServer
from ops.builders import seed_cards

from dra_driver.cli.main import main


def _two_contexts(server: FakeApiServer, path: Path) -> Path:
    """Write a kubeconfig whose current context points nowhere and whose ``live`` one works."""
    document = yaml.safe_load(server.write_kubeconfig(path).read_text())
    (cluster,) = document["clusters"]
    (context,) = document["contexts"]
    dead = {"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}}
    document["clusters"].append(dead)
    document["contexts"] = [
        {"name": "live", "context": context["context"]},
        {"name": "broken", "context": {**context["context"], "cluster": "dead"}},
    ]
    document["current-context"] = "broken"
    assert cluster["name"] == context["context"]["cluster"]
    path.write_text(yaml.safe_dump(document))
    return path


def _cards(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Return the devices of the last ``status -o json`` printed."""
    return [c["device"] for c in json.loads(capsys.readouterr().out)["cards"]]


def test_status_reads_the_home_kubeconfig_when_none_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --kubeconfig or KUBECONFIG, ~/.kube/config is used before the pod's account."""
    monkeypatch.setenv("HOME", str(tmp_path))
    with FakeApiServer() as server:
        seed_cards(server)
        server.write_kubeconfig(tmp_path / ".kube" / "config")
        assert main(["status", "-o", "json"], environ={}) == 0
    assert _cards(capsys) == ["gpu-0", "gpu-0", "gpu-1"]


def test_context_picks_another_cluster_of_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--context live reads the live cluster although the current context points nowhere."""
    monkeypatch.setenv("HOME", str(tmp_path))
    with FakeApiServer() as server:
        seed_cards(server)
        kubeconfig = _two_contexts(server, tmp_path / "config")
        environ = {"KUBECONFIG": str(kubeconfig)}
        assert main(["status", "--context", "live", "-o", "json"], environ=environ) == 0
        assert _cards(capsys) == ["gpu-0", "gpu-0", "gpu-1"]
        assert main(["cleanup", "--context", "nosuch", "--dry-run"], environ=environ) == 2
    assert "nosuch" in capsys.readouterr().err


def test_context_without_any_kubeconfig_is_a_usage_error_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No kubeconfig anywhere: --context cannot apply to the pod's account, and says so."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["status", "--context", "prod"], environ={}) == 2
    error = capsys.readouterr().err
    assert "gpushare-dra status: error: --context 'prod' needs a kubeconfig" in error
