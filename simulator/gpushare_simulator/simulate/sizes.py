"""Manifests rewritten for a cluster without consumable capacity: sizes move into the config.

``gpushare-dra simulate --no-consumable-capacity`` runs on an API server that drops capacity
requests, as Kubernetes 1.34 and 1.35 do by default. The admission webhook refuses a capacity
request there, so the scenarios' claims say the same thing the way such a cluster keeps it:
each request's ``cores`` and ``memory`` become the ``cores`` and ``memory`` of a
``GpuShareConfig`` entry for that request. An amount the config cannot hold exactly
(``12.5`` cores, ``1536Ki``) is left where it is, so the webhook's refusal shows.

A scenario's expectation that names a moved field (a refusal of too much memory) is pointed at
the field's new place; nothing else about the expectations changes. Pure.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from dra_driver.api import DriverNames
from dra_driver.api.fields import CORES, MEMORY
from dra_driver.k8s.objects import Object
from dra_driver.structured.classes import device_entries
from dra_driver.structured.configshares import config_size
from gpushare_simulator.simulate.checks import Refused
from gpushare_simulator.simulate.manifests import Manifest
from gpushare_simulator.simulate.scenarios import Scenario

_CLAIM_SPEC: Final = {"ResourceClaim": ("spec",), "ResourceClaimTemplate": ("spec", "spec")}

Moved = dict[str, str]
"""A field's path in the document as written -> its path once rewritten."""


def sized_by_config(body: Mapping[str, Any], names: DriverNames) -> tuple[Object, Moved]:
    """Return the claim or template with its capacity requests as config sizes, and the moves.

    Any other document comes back as it is, with no moves.
    """
    copied = copy.deepcopy(dict(body))
    path = _CLAIM_SPEC.get(str(copied.get("kind")))
    spec: Any = copied
    for key in path or ():
        spec = spec.get(key) if isinstance(spec, dict) else None
    if path is None or not isinstance(spec, dict) or not isinstance(spec.get("devices"), dict):
        return copied, {}
    prefix = ".".join((*path, "devices"))
    configs = list(spec["devices"].get("config") or [])
    moved: Moved = {}
    for relative, result_name, entry in device_entries(spec):
        requests = (entry.get("capacity") or {}).get("requests") or {}
        sizes = {str(name): config_size(str(name), str(text)) for name, text in requests.items()}
        if not sizes or None in sizes.values() or not set(sizes) <= {CORES, MEMORY}:
            continue
        del entry["capacity"]  # type: ignore[attr-defined]  # device_entries yields our copy
        for name in sizes:
            moved[f"{prefix}.{relative}.capacity.requests[{name}]"] = (
                f"{prefix}.config[{len(configs)}].opaque.parameters.{name}"
            )
        parameters = {"apiVersion": names.config_api_version, "kind": names.config_kind, **sizes}
        configs.append(
            {
                "requests": [result_name],
                "opaque": {"driver": names.driver, "parameters": parameters},
            }
        )
    if moved:
        spec["devices"]["config"] = configs
    return copied, moved


def sized_run(
    scenario: Scenario, manifest: Manifest, names: DriverNames
) -> tuple[Scenario, Manifest]:
    """Return the manifest rewritten, and the scenario's refusals pointed at the moved fields."""
    documents = []
    moved: dict[str, Moved] = {}
    for document in manifest.documents:
        body, moves = sized_by_config(document.body, names)
        documents.append(dataclasses.replace(document, body=body))
        moved[document.reference] = moves
    rewritten = Manifest(manifest.source, tuple(documents))
    steps = tuple(
        dataclasses.replace(
            step,
            checks=tuple(
                dataclasses.replace(
                    check, field=moved.get(check.document, {}).get(check.field, check.field)
                )
                if isinstance(check, Refused)
                else check
                for check in step.checks
            ),
        )
        for step in scenario.steps
    )
    return dataclasses.replace(scenario, steps=steps), rewritten
