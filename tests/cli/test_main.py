"""The gpushare-dra entry point: subcommands, version, driver name and settings errors."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_driver import __version__
from dra_driver.cli import main as cli_main
from dra_driver.cli.flags import env_name
from dra_driver.cli.main import COMMANDS, available_commands, build_parser, main

ROOT = Path(__file__).resolve().parents[2]

SUBCOMMANDS = (
    "controller",
    "kubelet-plugin",
    "webhook",
    "plan",
    "status",
    "cleanup",
    "region",
    "version",
    "completion",
)


def test_all_subcommands_exist() -> None:
    """The binary offers the agreed subcommands, and `simulate` where the simulator is installed."""
    assert tuple(c.name for c in COMMANDS) == SUBCOMMANDS
    assert tuple(c.name for c in available_commands()) == (*SUBCOMMANDS, "simulate")


class _Entry:
    """An entry point whose object cannot be loaded."""

    name = "broken"
    value = "somewhere:BROKEN"

    def load(self) -> object:
        raise ImportError("no module named somewhere")


def test_a_broken_extension_is_left_out_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An add-on command that fails to load is named on stderr and the built-ins still run."""
    monkeypatch.setattr(cli_main.metadata, "entry_points", lambda **_: [_Entry()])
    assert main(["version"]) == 0
    error = capsys.readouterr().err
    assert "command 'broken' of somewhere:BROKEN is left out: ImportError" in error


def test_every_flag_of_every_subcommand_names_its_env_variable() -> None:
    """Each subcommand's --help documents the env variable of every long flag."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    prefixes = {command.name: command.env_prefix for command in available_commands()}
    for name, sub in subparsers.choices.items():  # type: ignore[attr-defined]
        for action in sub._actions:
            long_flags = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            for option in long_flags:
                if option.startswith("--no-"):
                    continue
                field = option[2:].replace("-", "_")
                prefix = "" if field == "kubeconfig" else prefixes[name]
                assert f"[env: {env_name(field, prefix)}" in (action.help or ""), (name, option)


def test_tools_read_only_their_prefixed_variables(capsys: pytest.CaptureFixture[str]) -> None:
    """A shell's OUTPUT or DRIVER_NAME does not reach the tools; GPUSHARE_OUTPUT does."""
    assert main(["version"], environ={"OUTPUT": "yaml", "DRIVER_NAME": "x.example.org"}) == 0
    assert capsys.readouterr().out.startswith("gpushare-dra ")
    assert main(["version"], environ={"GPUSHARE_OUTPUT": "json"}) == 0
    assert json.loads(capsys.readouterr().out)["driver"] == "gpushare.dra.dev"
    assert main(["version"], environ={"GPUSHARE_OUTPUT": "xml"}) == 2
    assert "GPUSHARE_OUTPUT: invalid value 'xml'" in capsys.readouterr().err


def test_components_keep_reading_the_variables_the_chart_sets() -> None:
    """The long-running components read NODE_NAME, LOG_LEVEL and the rest unprefixed."""
    assert {c.name for c in COMMANDS if not c.env_prefix} == {
        "controller",
        "kubelet-plugin",
        "webhook",
    }


def test_version_json_reports_driver_derived_names(capsys: pytest.CaptureFixture[str]) -> None:
    """version -o json prints the version and the names derived from the default driver."""
    assert main(["version", "-o", "json"], environ={}) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["version"] == __version__
    assert report["driver"] == "gpushare.dra.dev"
    assert report["configApiVersion"] == "gpushare.dra.dev/v1alpha1"
    assert report["cdiKind"] == "k8s.gpushare.dra.dev/claim"
    assert set(report["libraries"]) >= {"kubernetes", "grpcio", "protobuf"}


def test_driver_name_from_env_flows_into_derived_names(capsys: pytest.CaptureFixture[str]) -> None:
    """GPUSHARE_DRIVER_NAME changes the config API version and CDI kind everywhere."""
    environ = {"GPUSHARE_DRIVER_NAME": "gpu.example.org"}
    assert main(["version", "-o", "json"], environ=environ) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["configApiVersion"] == "gpu.example.org/v1alpha1"
    assert report["cdiKind"] == "k8s.gpu.example.org/claim"


def test_version_text_lists_libraries(capsys: pytest.CaptureFixture[str]) -> None:
    """Plain version output starts with the version line and lists library versions."""
    assert main(["version"], environ={}) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"gpushare-dra {__version__}"
    assert any(line.strip().startswith("kubernetes: 37.") for line in lines)


def test_invalid_driver_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A driver name that is not a DNS subdomain stops the command with exit status 2."""
    assert main(["version", "--driver-name", "GPU_share"], environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpushare-dra version: error: ")
    assert '"GPU_share"' in err


def test_bad_env_setting_is_a_usage_error_naming_the_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bad LOG_LEVEL fails before anything starts and names the variable and allowed values."""
    assert main(["kubelet-plugin"], environ={"LOG_LEVEL": "loud"}) == 2
    assert capsys.readouterr().err == (
        "gpushare-dra kubelet-plugin: error: LOG_LEVEL: invalid value 'loud'; "
        "allowed values: debug, info, warning, error\n"
    )


def test_component_settings_are_checked_before_running(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad component setting (BACKEND) is refused with exit status 2."""
    assert main(["kubelet-plugin"], environ={"BACKEND": "cuda"}) == 2
    assert (
        "BACKEND: invalid value 'cuda'; allowed values: hami-core, mps, none"
        in capsys.readouterr().err
    )


def _kubeconfig(directory: Path) -> Path:
    path = directory / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    return path


def test_webhook_without_a_certificate_is_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpushare-dra webhook exits 2 naming the certificate file when it cannot be read."""
    cert = tmp_path / "missing.crt"
    argv = ["webhook", "--kubeconfig", str(_kubeconfig(tmp_path)), "--tls-cert-file", str(cert)]
    assert main(argv, environ={}) == 2
    captured = capsys.readouterr()
    assert str(cert) in captured.out + captured.err


def test_controller_with_webhook_enabled_refuses_a_missing_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--webhook-enabled makes the controller start the webhook first, and fail fast without it."""
    cert = tmp_path / "none.crt"
    argv = ["controller", "--webhook-enabled", "--tls-cert-file", str(cert)]
    assert main([*argv, "--kubeconfig", str(_kubeconfig(tmp_path))], environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpushare-dra controller: error: webhook: ")
    assert str(cert) in err


def test_simulate_runs_a_scenario_with_quiet_components(capsys: pytest.CaptureFixture[str]) -> None:
    """simulate --scenario sharing passes; at the default level no component logs reach stderr."""
    assert main(["simulate", "--scenario", "sharing"], environ={}) == 0
    captured = capsys.readouterr()
    assert "PASS  sharing: all 3 expectations held" in captured.out
    assert "RESULT PASS: 1 of 1 scenarios passed" in captured.out
    assert all(line.startswith("[") for line in captured.err.splitlines()), captured.err


def test_simulate_refuses_an_unknown_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown --scenario exits 2 naming the eight scenarios and all."""
    assert main(["simulate", "--scenario", "everything"], environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpushare-dra simulate: error: --scenario: invalid value 'everything'")
    assert (
        "whole-card, sharing, placement, isolation, online-offline, bad-input, quota, preemption, "
        "all" in err
    )


def test_missing_subcommand_is_a_usage_error() -> None:
    """Running without a subcommand prints usage and exits 2."""
    with pytest.raises(SystemExit) as caught:
        main([], environ={})
    assert caught.value.code == 2


def test_console_script_and_module_entry_points_run() -> None:
    """The installed gpushare-dra script and python -m dra_driver both reach the CLI."""
    script = Path(sys.executable).parent / "gpushare-dra"
    found = shutil.which("gpushare-dra") or (str(script) if script.exists() else None)
    assert found is not None, "gpushare-dra console script is not installed"
    for argv in ([found, "version"], [sys.executable, "-m", "dra_driver", "version"]):
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"gpushare-dra {__version__}\n")


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """`gpushare-dra ... | head` ends with SIGPIPE's status and no traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dra_driver", "version"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("GPUSHARE_")},
    )
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # before the command has printed anything
    with process.stderr:
        stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, stderr
    assert "Traceback" not in stderr


def test_a_mistyped_flag_is_refused_with_the_closest_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unknown flag stops the command with status 2 and suggests the flag it resembles."""
    assert main(["plan", "--polcy", "binpack", "--inventory", "qgpu-runbook"], environ={}) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpushare-dra plan: error: unrecognized argument --polcy")
    assert "(did you mean --policy?)" in err
    assert main(["version", "stray"], environ={}) == 2
    assert "unrecognized argument stray; see gpushare-dra version --help" in capsys.readouterr().err


@pytest.mark.parametrize("tool", ["version", "plan", "region"])
def test_every_tool_prints_the_same_document_as_json_and_yaml(
    tool: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o takes table, json and yaml in every tool; json and yaml hold the same document."""
    region = tmp_path / "region.cache"
    region.write_bytes(gzip.decompress((ROOT / "tests/data/hami-core/region.bin.gz").read_bytes()))
    argv = {
        "version": ["version"],
        "plan": ["plan", "--inventory", "qgpu-runbook", "--workload",
                 str(ROOT / "deploy/examples/sharing.yaml")],
        "region": ["region", str(region)],
    }[tool]  # fmt: skip
    assert main([*argv, "-o", "json"], environ={}) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main([*argv, "-o", "yaml"], environ={}) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


def test_a_mistyped_command_is_a_usage_error_with_the_closest_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`simluate` exits 2 suggesting simulate; kubectl gpushare names itself in its errors."""
    assert main(["simluate"], environ={}) == 2
    assert capsys.readouterr().err.strip() == (
        "gpushare-dra: error: unknown command 'simluate'; did you mean 'simulate'? "
        "(see gpushare-dra --help)"
    )
    assert cli_main.kubectl_plugin(["stauts"]) == 2
    assert "kubectl gpushare: error: unknown command 'stauts'; did you mean 'status'?" in (
        capsys.readouterr().err
    )


def test_kubectl_gpushare_help_names_kubectl_gpushare(capsys: pytest.CaptureFixture[str]) -> None:
    """The plugin's usage line is the command the user typed, not gpushare-dra's."""
    with pytest.raises(SystemExit):
        cli_main.kubectl_plugin(["--help"])
    assert capsys.readouterr().out.startswith("usage: kubectl gpushare [-h]")
