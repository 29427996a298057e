"""The plan's two outputs: the documented JSON document and the table people read."""

from __future__ import annotations

import json

from plan.builders import EXAMPLE, NAMES, deployment, dump, plan_of, pod, template

from dra_driver.api import Placement
from dra_driver.nvml.inventory import builtin_inventory
from dra_driver.plan.inventory import inventory_cluster
from dra_driver.plan.planner import make_plan
from dra_driver.plan.render import WIDTH, render, render_json, render_table, summary_line
from dra_driver.plan.workload import parse_workload


def test_json_document_has_exactly_the_documented_keys() -> None:
    """Every level of the JSON document has the camelCase keys its docstring promises."""
    document = json.loads(render_json(plan_of(EXAMPLE.read_text())))
    assert set(document) == {
        "kind", "driver", "cluster", "workload", "problems", "skipped", "refused", "policies",
    }  # fmt: skip
    assert (document["skipped"], document["refused"]) == ([], False)
    assert document["kind"] == "CapacityPlan"
    assert [p["policy"] for p in document["policies"]] == ["binpack", "spread"]
    binpack = document["policies"][0]
    assert set(binpack) == {"policy", "summary", "pods", "cards", "quotas"}
    assert binpack["summary"] == {
        "pods": 6,
        "placed": 4,
        "pending": 2,
        "refused": 0,
        "quota": 0,
        "notOurs": 0,
        "preempts": 0,
        "evicted": 0,
    }
    assert binpack["quotas"] == []
    first = binpack["pods"][0]
    assert set(first) == {
        "namespace",
        "name",
        "owner",
        "outcome",
        "node",
        "reason",
        "fitsAlone",
        "shares",
        "victims",
    }
    assert set(first["shares"][0]) == {
        "entry",
        "claim",
        "request",
        "device",
        "pciBusID",
        "cores",
        "memory",
    }
    assert set(binpack["cards"][0]) == {
        "node",
        "device",
        "uuid",
        "pciBusID",
        "shares",
        "whole",
        "cores",
        "memory",
    }


def test_json_amounts_are_quantity_strings_and_absent_values_null() -> None:
    """Cores and memory are written like a slice writes them; a placed pod has no reason."""
    document = json.loads(render_json(plan_of(EXAMPLE.read_text())))
    pods = {p["name"]: p for p in document["policies"][0]["pods"]}
    assert pods["infer-0"]["shares"][0] | {"claim": None} == {
        "entry": "gpu",
        "claim": None,
        "request": "gpu",
        "device": "gpu-0",
        "pciBusID": "0000:00:08.0",
        "cores": "40",
        "memory": "5Gi",
    }
    assert (pods["infer-0"]["reason"], pods["infer-0"]["fitsAlone"]) == (None, None)
    assert (pods["giant"]["outcome"], pods["giant"]["node"]) == ("pending", None)
    assert pods["giant"]["fitsAlone"] is False
    card = document["policies"][0]["cards"][0]
    assert (card["node"], card["device"]) == ("node-1", "gpu-0")
    assert card["cores"] == {"used": "80", "total": "100"}
    assert card["memory"] == {"used": "10Gi", "total": "15Gi"}


def test_table_shows_both_policies_side_by_side_and_ends_with_the_summary() -> None:
    """The table has a column per policy, cards per policy, and the summary line last."""
    table = render_table(plan_of(EXAMPLE.read_text()))
    lines = table.splitlines()
    assert lines[-1] == "placed 4/6 pods (binpack), 5/6 (spread)"
    assert lines[3].split() == ["POD", "/", "CLAIM", "BINPACK", "SPREAD"]
    assert lines[4].split() == ["infer-0", "node-1", "node-2"]
    assert lines[5].split() == ["gpu", *["gpu-0", "0000:00:08.0", "40", "cores", "5Gi"] * 2]
    assert lines[8].split() == ["trainer", "node-2", "node-2"]
    assert lines[9].split()[6:] == ["gpu-1", "0000:00:09.0", "100", "cores", "15Gi"]
    assert "node-1/gpu-0 0000:00:08.0  80/100 cores 10Gi/15Gi   60/100 cores 15Gi/15Gi" in lines


def test_table_lines_fit_100_columns_with_reasons_wrapped_under_the_pod() -> None:
    """No line is wider than 100 columns; a long reason continues on indented lines."""
    lines = render_table(plan_of(EXAMPLE.read_text())).splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    giant = next(i for i, line in enumerate(lines) if line.startswith("giant "))
    assert lines[giant].split() == ["giant", "NO", "FIT", "NO", "FIT"]
    assert lines[giant + 1].startswith("    why (binpack): 0/2 nodes are available: ")
    assert lines[giant + 2].startswith("      ")
    batch = next(i for i, line in enumerate(lines) if line.startswith("batch-1 "))
    assert lines[batch].split() == ["batch-1", "PENDING", "node-2"]


def test_one_reason_shared_by_both_policies_is_printed_once() -> None:
    """When both policies fail for the same reason, one ``why (binpack, spread)`` line says so."""
    text = dump(template("typo", device_class="nope"), pod("a", "typo"))
    lines = render(plan_of(text), "table").splitlines()
    assert lines[4].split() == ["a", "REFUSED", "REFUSED"]
    assert lines[5].startswith("    why (binpack, spread): ")
    assert "device class nope does not exist" in " ".join(" ".join(lines[5:8]).split())


def test_summary_counts_one_policy_and_notes_pods_of_other_drivers() -> None:
    """With one policy the summary names it alone and says how many pods are not ours."""
    text = dump(template("t", cores="10", memory="1Gi"), pod("a", "t"), pod("b"), pod("c"))
    plan = plan_of(text, policies=[Placement.SPREAD])
    assert (
        summary_line(plan) == "placed 1/1 pods (spread); 2 pods use no device of gpushare.dra.dev"
    )
    assert "not ours" in render_table(plan)


def test_summary_lists_only_the_pods_not_placed_and_counts_the_cards() -> None:
    """--summary: batch-1 and giant (not placed somewhere) with why; cards counted, not listed."""
    plan = plan_of(EXAMPLE.read_text())
    lines = render(plan, "table", summary=True).splitlines()
    pods = [line.split()[0] for line in lines[3:] if line and not line.startswith((" ", "cards"))]
    assert pods[:3] == ["POD", "batch-1", "giant"]
    assert not any(line.startswith(("infer-0", "trainer", "CARD ")) for line in lines)
    assert "cards used: 3/3 (binpack), 3/3 (spread)" in lines
    assert lines[-1] == summary_line(plan)
    assert len(lines) < len(render(plan, "table").splitlines())


def test_progress_is_told_every_hundred_pods_and_at_each_policys_end() -> None:
    """make_plan reports 100, 200, 250 of 250 pods, per policy, to the progress callback."""
    text = dump(template("t", cores="1", memory="1Mi"), deployment("d", 250, "t"))
    heard: list[str] = []
    cluster = inventory_cluster(NAMES, builtin_inventory("qgpu-runbook"), "inventory")
    make_plan(NAMES, cluster, parse_workload(text, "w.yaml"), list(Placement), heard.append)
    assert heard == [
        f"{policy}: {n}/250 pods placed"
        for policy in ("binpack", "spread")
        for n in (100, 200, 250)
    ]
