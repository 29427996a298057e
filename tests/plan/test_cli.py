"""``gpushare-dra plan`` end to end through ``main``: output, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plan.builders import EXAMPLE

from dra_driver.cli.main import main
from dra_driver.nvml.inventory import builtin_inventory, dump_inventory

EXAMPLE_ARGS = ["plan", "--workload", str(EXAMPLE)]


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1, captured.err
    return captured.err.rstrip("\n")


def test_plan_prints_the_table_and_exits_0_even_with_pending_pods(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The example plan has pending pods, yet the command succeeds and prints the summary."""
    assert main([*EXAMPLE_ARGS, "--inventory", "qgpu-runbook"], environ={}) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "placed 4/6 pods (binpack), 5/6 (spread)"
    assert "cluster:  built-in inventory qgpu-runbook (driver gpushare.dra.dev)" in out


def test_plan_json_for_one_policy_from_an_inventory_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o json --policy spread on an inventory file prints one policy's JSON document."""
    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(dump_inventory(builtin_inventory("qgpu-runbook")))
    argv = [*EXAMPLE_ARGS, "--inventory", str(inventory), "--policy", "spread", "-o", "json"]
    assert main(argv, environ={}) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cluster"] == f"inventory {inventory}"
    assert [p["policy"] for p in document["policies"]] == ["spread"]
    assert document["policies"][0]["summary"]["placed"] == 5


def test_settings_come_from_the_environment_too(capsys: pytest.CaptureFixture[str]) -> None:
    """GPUSHARE_INVENTORY, _WORKLOAD, _POLICY and _OUTPUT work like their flags."""
    environ = {
        "GPUSHARE_INVENTORY": "qgpu-runbook",
        "GPUSHARE_WORKLOAD": str(EXAMPLE),
        "GPUSHARE_POLICY": "binpack",
        "GPUSHARE_OUTPUT": "json",
        "OUTPUT": "yaml",  # a shell's variable of another tool: not ours
        "POLICY": "x",
    }
    assert main(["plan"], environ=environ) == 0
    document = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in document["policies"]] == ["binpack"]


def test_an_inventory_flag_beats_a_kubeconfig_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """KUBECONFIG set for kubectl does not stop --inventory: a flag wins over a variable."""
    environ = {"KUBECONFIG": "/nonexistent/kubeconfig"}
    assert main([*EXAMPLE_ARGS, "--inventory", "qgpu-runbook"], environ=environ) == 0
    assert "built-in inventory qgpu-runbook" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["plan", "--inventory", "qgpu-runbook"],
            "gpushare-dra plan: error: --workload FILE is required",
        ),
        (
            EXAMPLE_ARGS,
            "gpushare-dra plan: error: give --inventory FILE|NAME (a fake GPU inventory) "
            "or --kubeconfig FILE",
        ),
        (
            [*EXAMPLE_ARGS, "--inventory", "qgpu-runbook", "--kubeconfig", "kc"],
            "gpushare-dra plan: error: give either --inventory or --kubeconfig, not both",
        ),
        (
            [*EXAMPLE_ARGS, "--inventory", "two-nodes"],
            "gpushare-dra plan: error: --inventory two-nodes: no such file, and not a built-in "
            "inventory (hundred-nodes, one-node-one-card, qgpu-runbook)",
        ),
        (
            [*EXAMPLE_ARGS, "--policy", "random"],
            "gpushare-dra plan: error: --policy: invalid value 'random'; allowed values: "
            "binpack, spread, both",
        ),
    ],
)
def test_bad_command_lines_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Missing, conflicting or unknown settings exit 2 with one line on stderr."""
    assert main(argv, environ={}) == 2
    assert _error(capsys) == message


def test_a_bad_workload_exits_2_naming_file_document_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workload whose pod names a missing template exits 2 before planning."""
    workload = tmp_path / "work.yaml"
    workload.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"
        "spec: {resourceClaims: [{name: gpu, resourceClaimTemplateName: gone}]}\n"
    )
    argv = ["plan", "--workload", str(workload), "--inventory", "qgpu-runbook"]
    assert main(argv, environ={}) == 2
    assert _error(capsys) == (
        f"gpushare-dra plan: error: {workload}: document 1 (Pod a): "
        "spec.resourceClaims[0].resourceClaimTemplateName: pod a entry gpu: "
        "no ResourceClaimTemplate 'gone' in namespace 'default' in the file"
    )


def test_invalid_yaml_and_a_bad_inventory_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Unparsable workload YAML and a refused inventory file are input errors too."""
    workload = tmp_path / "work.yaml"
    workload.write_text("kind: Pod\nmetadata: [\n")
    assert (
        main(["plan", "--workload", str(workload), "--inventory", "qgpu-runbook"], environ={}) == 2
    )
    assert _error(capsys).startswith(f"gpushare-dra plan: error: {workload}: invalid YAML at line")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("nodes:\n- name: n\n  cards: 3\n")
    assert main([*EXAMPLE_ARGS, "--inventory", str(inventory)], environ={}) == 2
    assert _error(capsys).startswith(f"gpushare-dra plan: error: {inventory}: nodes[0].cards: ")


SIZED = Path(__file__).parent / "sized-workload.yaml"


def test_without_consumable_capacity_config_sizes_share_a_whole_only_card(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--no-consumable-capacity: config shares fill one card; capacity requests are refused."""
    argv = ["plan", "--workload", str(SIZED), "--inventory", "qgpu-runbook", "--policy", "binpack"]
    assert main([*argv, "--no-consumable-capacity", "-o", "json"], environ={}) == 3
    document = json.loads(capsys.readouterr().out)
    assert document["cluster"].endswith("without consumable capacity")
    assert document["refused"] is True
    pods = {p["name"]: p for p in document["policies"][0]["pods"]}
    infer = [pods[f"infer-{i}"]["shares"][0] for i in range(3)]
    assert {(s["device"], s["cores"], s["memory"]) for s in infer} == {("gpu-0", "30", "5Gi")}
    assert pods["old"]["outcome"] == pods["giant"]["outcome"] == "refused"
    assert pods["old"]["reason"].startswith(
        "ResourceClaimTemplate default/share (document 1) would be refused: "
        "spec.spec.devices.requests[0].exactly.capacity"
    )
    assert "(cores: 30, memory: 5Gi)" in pods["old"]["reason"]
    # With consumable capacity only the 200Gi request is refused: no card is that large.
    assert main([*argv, "-o", "json"], environ={}) == 3
    pods = {p["name"]: p for p in json.loads(capsys.readouterr().out)["policies"][0]["pods"]}
    assert pods["old"]["outcome"] == "placed"
    assert "must be at most 15Gi" in pods["giant"]["reason"]


def test_refusals_make_the_exit_status_3_and_the_summary_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bad-input.yaml's unused bad templates are warnings, counted, and fail a CI gate."""
    example = Path(__file__).resolve().parents[2] / "deploy/examples/bad-input.yaml"
    argv = ["plan", "--workload", str(example), "--inventory", "qgpu-runbook"]
    assert main([*argv, "--policy", "binpack"], environ={}) == 3
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == (
        "placed 1/1 pods (binpack); 4 refused (pods, and templates or claims no pod uses): "
        "exit status 3"
    )
    assert "ResourceClaimTemplate default/too-much-memory (document 3)" in out
