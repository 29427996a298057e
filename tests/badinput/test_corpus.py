"""Every bad input in tests/data/bad-inputs is refused with its exact message; nothing moves."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
from badinput.kit import JUDGES, NAMES, Entry, corpus, load, plugin_node, verdict
from gpushare_simulator.simulate.stack import Stack
from kubernetes import client
from webhook.kit import classes

from dra_driver.controller.settings import ControllerSettings
from dra_driver.k8s import raw
from dra_driver.k8s.errors import ApiError
from dra_driver.nvml.inventory import builtin_inventory

FILES = corpus()


def _id(path: Path) -> str:
    return str(path.relative_to(path.parents[1]))


def test_the_corpus_is_large_and_every_entry_is_complete() -> None:
    """At least 50 entries; each has a description, a known judge and an expected message."""
    entries = [load(path) for path in FILES]
    assert len(entries) >= 50
    for entry in entries:
        assert entry.description, entry.path
        assert entry.judge in JUDGES, entry.path
        assert entry.error, entry.path
        assert all(entry.error), entry.path
    assert {entry.judge for entry in entries} == set(JUDGES)


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_each_entry_is_refused_with_its_message(path: Path, tmp_path: Path) -> None:
    """The judge answers exactly the recorded messages; a plugin node's files stay as they were."""
    entry = load(path)
    if entry.judge != "plugin":
        assert verdict(entry) == entry.error
        return
    node, _, good = plugin_node(tmp_path)
    before = {p: p.read_bytes() for p in node.files() if p.is_file()}
    assert verdict(entry, (node, _, good)) == entry.error
    after = {p: p.read_bytes() for p in node.files() if p.is_file()}
    assert after == before, "a refused claim changed or added files on the node"


def _webhook_entries() -> list[Entry]:
    return [entry for entry in map(load, FILES) if entry.judge == "webhook" and not entry.classes]


def _webhook_knows_class(resource: client.ResourceV1Api, name: str) -> bool:
    """Whether a claim of class ``name`` is now judged (denied); a stored probe is removed."""
    probe = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "probe"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": name}}]}},
    }
    try:
        raw.call(resource.create_namespaced_resource_claim, "default", probe)
    except ApiError:
        return True
    raw.call(resource.delete_namespaced_resource_claim, "probe", "default")
    return False


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with Stack(
        NAMES, builtin_inventory("qgpu-runbook"), ControllerSettings(leader_elect=False)
    ) as running:
        yield running


def test_the_admission_path_refuses_every_claim_and_template_and_stores_nothing(
    stack: Stack,
) -> None:
    """Created through the API server with the webhook registered: denied, named, not stored."""
    resource = client.ResourceV1Api(stack.cluster.api)
    good = raw.call(
        resource.create_namespaced_resource_claim,
        "default",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "good"},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": NAMES.driver}}]
                }
            },
        },
    )
    # The entries also use the webhook kit's extra classes (another driver's, a broken one).
    present = {c["metadata"]["name"] for c in raw.call(resource.list_device_class)["items"]}
    stack.cluster.apply([c for name, c in classes().items() if name not in present])
    stack.cluster.wait_for(
        lambda: _webhook_knows_class(resource, f"broken.{NAMES.driver}"),
        "the webhook's cache to see the new classes",
    )
    refused = 0
    for index, entry in enumerate(_webhook_entries()):
        obj = copy.deepcopy(entry.object)
        obj["metadata"] = {"name": f"bad-{index}"}
        create = (
            resource.create_namespaced_resource_claim_template
            if obj["kind"] == "ResourceClaimTemplate"
            else resource.create_namespaced_resource_claim
        )
        try:
            raw.call(create, "default", obj)
        except ApiError as exc:
            answer = str(exc)
        else:
            pytest.fail(f"{entry.path.name} was stored")
        if not any(message in answer for message in entry.error):
            # The API server's own decoding or validation refused it first, as Kubernetes
            # does; it must name the same field.
            field = entry.error[0].split(": ", 1)[0]
            assert field in answer, (entry.path, answer)
        refused += 1
    claims = raw.call(resource.list_namespaced_resource_claim, "default")["items"]
    templates = raw.call(resource.list_namespaced_resource_claim_template, "default")["items"]
    assert [c["metadata"]["name"] for c in claims] == ["good"]
    assert templates == []
    assert claims[0]["metadata"]["resourceVersion"] == good["metadata"]["resourceVersion"]
    assert refused == len(_webhook_entries()) > 30
