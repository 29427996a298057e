"""The chart's alerts and Grafana dashboard: valid PromQL over series the components export."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
from deploy.chartkit import CHART, MATRIX, ROOT, Rendered, deep_merge, render
from prometheus_client import CollectorRegistry

from dra_driver.controller.metrics import CardCollector, ControllerMetrics, GatedCollector
from dra_driver.controller.quotas import QuotaCollector
from dra_driver.kubeletplugin.metrics import PluginMetrics, ShareCollector
from dra_driver.metrics import ObservabilityServer
from dra_driver.metrics.watchdog import register_silence
from dra_driver.webhook.metrics import WebhookMetrics

DASHBOARD = CHART / "dashboards" / "gpushare-dra-driver.json"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
_METRIC = re.compile(r"\bgpushare_[a-z_]+\b")
# Grafana replaces these before the query reaches Prometheus.
_GRAFANA_VARIABLES = re.compile(r"\$(?:\{\w+\}|\w+)")


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """Return every series name the controller, webhook and kubelet plugin can export."""
    registry = CollectorRegistry()
    ControllerMetrics(registry)
    registry.register(CardCollector(lambda: None))
    registry.register(GatedCollector(list, "gate", lambda: 0.0))
    registry.register(QuotaCollector(dict))
    WebhookMetrics(registry)
    PluginMetrics(registry)
    registry.register(ShareCollector("node-1", list, dict))
    register_silence(registry, list)
    ObservabilityServer(registry, component="kubelet-plugin", host="127.0.0.1").stop()
    return {
        family.name + suffix for family in registry.collect() for suffix in _SUFFIXES[family.type]
    }


@pytest.fixture(scope="module")
def monitoring(rendered: Callable[[str], Rendered]) -> Rendered:
    """Render the chart with the PrometheusRule and the dashboard ConfigMap on."""
    return rendered("monitoring")


def rules(monitoring: Rendered) -> Iterator[dict[str, Any]]:
    for group in monitoring.one("PrometheusRule")["spec"]["groups"]:
        yield from group["rules"]


def dashboard_queries() -> Iterator[str]:
    document = json.loads(DASHBOARD.read_text())
    for panel in document["panels"]:
        for target in panel.get("targets", []):
            yield target["expr"]
    for variable in document["templating"]["list"]:
        if variable["type"] == "query":
            yield variable["query"]["query"]


def test_defaults_render_neither_rules_nor_dashboard(rendered: Callable[[str], Rendered]) -> None:
    """Both are opt-in: their CRD or a Grafana sidecar may not exist."""
    defaults = rendered("defaults")
    assert defaults.of_kind("PrometheusRule") == []
    assert not [
        c for c in defaults.of_kind("ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
    ]


# Their series name the quota's namespace: scoped to the release by its controller's pods.
QUOTA_ALERTS = {"GpushareQuotaNearlyFull", "GpushareQuotaExceeded"}


def test_the_eleven_alerts_are_there_with_severity_and_text(monitoring: Rendered) -> None:
    """Every alert the chart documents is rendered, with a severity and texts of its own."""
    found = {rule["alert"]: rule for rule in rules(monitoring)}
    assert set(found) == {
        "GpushareKubeletPluginNotReady",
        "GpusharePrepareErrors",
        "GpushareUnprepareErrors",
        "GpushareCardUnhealthy",
        "GpusharePodsGatedTooLong",
        "GpushareWebhookErrors",
        "GpushareControllerWithoutLeader",
        "GpushareConsumableCapacityUnsupported",
        "GpushareHamiRegionNotUnderstood",
        *QUOTA_ALERTS,
    }
    for name, rule in found.items():
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), name
        assert rule["annotations"]["summary"], name
        assert rule["annotations"]["description"], name
        scope = 'pod=~"gpushare-controller-.+"' if name in QUOTA_ALERTS else 'namespace="gpushare"'
        assert scope in rule["expr"], name  # only this release's pods


def test_quota_alerts_compare_used_with_hard_per_quota_and_resource(monitoring: Rendered) -> None:
    """Nearly full: used/hard from 0.9 up to 1 for 15m; exceeded: used > hard for 5m."""
    found = {rule["alert"]: rule for rule in rules(monitoring)}
    used = (
        'max by (namespace, quota, resource) (gpushare_quota_used{pod=~"gpushare-controller-.+"})'
    )
    hard = (
        'max by (namespace, quota, resource) (gpushare_quota_hard{pod=~"gpushare-controller-.+"})'
    )
    nearly, exceeded = found["GpushareQuotaNearlyFull"], found["GpushareQuotaExceeded"]
    assert nearly["expr"] == f"{used} / ({hard} > 0) >= 0.9 <= 1"
    assert (nearly["for"], nearly["labels"]["severity"]) == ("15m", "warning")
    assert exceeded["expr"] == f"{used} > {hard}"
    assert (exceeded["for"], exceeded["labels"]["severity"]) == ("5m", "warning")
    headings = re.findall(r"^#+ (.+)$", (ROOT / "docs" / "quotas.md").read_text(), re.MULTILINE)
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
    for rule in (nearly, exceeded):
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert (page, anchor in anchors) == ("docs/quotas.md", True), rule["annotations"]
        assert "{{ $labels.namespace }}/{{ $labels.quota }}" in rule["annotations"]["summary"]


def test_quota_alerts_follow_the_release_name(helm: Path) -> None:
    """Another release's quota alerts watch its own controller's pods."""
    found = {rule["alert"]: rule for rule in rules(render(helm, MATRIX["monitoring"], "team"))}
    for name in QUOTA_ALERTS:
        assert 'pod=~"team-gpushare-dra-driver-controller-.+"' in found[name]["expr"], name
        assert "gpushare-controller" not in found[name]["expr"], name


def test_whole_only_cards_are_critical_only_when_the_controller_will_not_share_them(
    helm: Path,
) -> None:
    """info while the controller shares whole-only cards by config sizes; critical when not."""
    for share, severity in ((True, "info"), (False, "critical")):
        values = deep_merge(MATRIX["monitoring"], {"controller": {"shareWholeOnlyCards": share}})
        found = {rule["alert"]: rule for rule in rules(render(helm, values))}
        alert = found["GpushareConsumableCapacityUnsupported"]
        assert alert["labels"]["severity"] == severity
        assert ("The controller shares these cards" in alert["annotations"]["description"]) is share


def test_the_gated_alert_waits_the_minutes_the_values_give(helm: Path) -> None:
    """metrics.prometheusRule.gatedMinutes sets the age past which a gated pod is an alert."""
    values = deep_merge(MATRIX["monitoring"], {"metrics": {"prometheusRule": {"gatedMinutes": 40}}})
    found = {rule["alert"]: rule for rule in rules(render(helm, values))}
    assert found["GpusharePodsGatedTooLong"]["expr"].endswith("> 2400")
    assert "more than 40 minutes" in found["GpusharePodsGatedTooLong"]["annotations"]["summary"]


def test_every_alert_is_valid_promql_over_exported_series(
    monitoring: Rendered, exported: set[str]
) -> None:
    """Each expression parses, and each series it names is one a component exports."""
    for rule in rules(monitoring):
        promql_parser.parse(rule["expr"])
        for metric in _METRIC.findall(rule["expr"]):
            assert metric in exported, (rule["alert"], metric)


def test_the_alerts_templates_reach_prometheus_unrendered(monitoring: Rendered) -> None:
    """Helm leaves Prometheus's own {{ $labels.* }} templates in the annotations."""
    summary = {r["alert"]: r["annotations"]["summary"] for r in rules(monitoring)}
    assert "{{ $labels.pod }}" in summary["GpushareKubeletPluginNotReady"]
    assert "{{ $labels.check }}" in summary["GpushareKubeletPluginNotReady"]


def test_every_dashboard_query_is_valid_promql_over_exported_series(exported: set[str]) -> None:
    """Each panel and variable query parses (Grafana variables filled in) and names real series."""
    queries = list(dashboard_queries())
    assert len(queries) > 10
    for query in queries:
        if query.startswith("label_values("):
            metric = query.removeprefix("label_values(").split(",")[0]
            assert metric in exported, query
            continue
        promql_parser.parse(_GRAFANA_VARIABLES.sub("x", query))
        for metric in _METRIC.findall(query):
            assert metric in exported, (query, metric)


def test_the_dashboard_covers_each_share_series_and_uses_its_variables() -> None:
    """Memory used and limit, SM use and suspension are each shown; $node and $namespace exist."""
    document = json.loads(DASHBOARD.read_text())
    queries = " ".join(dashboard_queries())
    for series in (
        "memory_used_bytes",
        "memory_limit_bytes",
        "sm_utilization_percent",
        "suspended",
    ):
        assert f"gpushare_share_{series}" in queries, series
    variables = {v["name"] for v in document["templating"]["list"]}
    assert {"datasource", "node", "namespace"} <= variables
    used = set(re.findall(r"\$(\w+)", queries)) | {"datasource"}
    assert used <= variables
    ids = [panel["id"] for panel in document["panels"]]
    assert len(ids) == len(set(ids))


def test_the_sidecar_configmap_carries_the_dashboard_file(monitoring: Rendered) -> None:
    """The ConfigMap holds the JSON as committed, labelled for Grafana's sidecar."""
    configmap = monitoring.one("ConfigMap", "gpushare-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["gpushare-dra-driver.json"]) == json.loads(
        DASHBOARD.read_text()
    )


def test_the_service_monitor_keeps_the_share_series_workload_labels(monitoring: Rendered) -> None:
    """honorLabels on the plugin's port: a share's namespace and pod are the workload's."""
    endpoints = {e["port"]: e for e in monitoring.one("ServiceMonitor")["spec"]["endpoints"]}
    assert endpoints["metrics"]["honorLabels"] is True
