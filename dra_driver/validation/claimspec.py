"""Validation of a ResourceClaim spec (or a template's ``spec.spec``) that uses our driver.

The webhook must admit exactly what the controller and the kubelet plugin can serve, and refuse
early what they would refuse later with a Pending pod: so it decodes and merges configs with
the same code (``structured.config``, ``api.decode_config``), asks the backends the same
question (``cdi.backends.unsupported_policy``) and compiles selectors with the same CEL
evaluator. Only what is ours is judged: requests of our DeviceClasses and config entries whose
``opaque.driver`` is ours. Messages are Kubernetes field errors with full paths. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.api import (
    Backend,
    ConfigError,
    DriverNames,
    EffectiveConfig,
    decode_config,
    merge_configs,
)
from dra_driver.api.errors import quote
from dra_driver.api.fields import CORES, MAX_CORES
from dra_driver.cdi.policy import unsupported_policy
from dra_driver.k8s import objects
from dra_driver.k8s.objects import ObjectView
from dra_driver.structured import cel
from dra_driver.structured.classes import class_driver, device_entries
from dra_driver.structured.config import applies_to, parent_request
from dra_driver.validation.capacity import Limits, check_capacity, invalid
from dra_driver.validation.sizes import Source, config_memory_problem, size_conflict

_FORBIDDEN: Final = "Forbidden"


@dataclass(frozen=True)
class _ClaimConfig:
    """One config entry of ours; ``source`` is ``None`` when it does not decode."""

    requests: Sequence[str]
    source: Source | None


@dataclass(frozen=True)
class _Entry:
    """A request's ``exactly`` or one ``firstAvailable`` alternative of one of our classes."""

    where: str
    result: str
    entry: ObjectView
    class_name: str
    device_class: ObjectView


def validate_claim_spec(
    spec: ObjectView,
    *,
    path: str,
    names: DriverNames,
    classes: Mapping[str, ObjectView],
    limits: Limits,
    default_backend: Backend | None = None,
) -> list[str]:
    """Return the field errors of a claim spec at ``path`` (``spec`` or ``spec.spec``).

    ``classes`` maps DeviceClass names to the classes; ``limits`` says what the cluster's cards
    allow; ``default_backend`` is the kubelet plugins' backend for a config that names none,
    so a policy that backend cannot enforce is refused before anything is allocated for it.
    A spec that asks for none of our classes gets only its config entries of ours checked;
    other drivers' requests are never judged.
    """
    devices = f"{path}.devices"
    configs, errors = _claim_configs(spec, devices, names)
    ours: list[_Entry] = []
    foreign: list[tuple[str, str]] = []
    for relative, result, fields in device_entries(spec):
        class_name = str(fields.get("deviceClassName", ""))
        device_class = classes.get(class_name)
        if device_class is None:
            continue  # may be created later; the controller says so if it never is
        if class_driver(device_class) == names.driver:
            ours.append(_Entry(f"{devices}.{relative}", result, fields, class_name, device_class))
        else:
            foreign.append((f"{devices}.{relative}.deviceClassName", class_name))
    if not ours:
        return errors
    # The controller allocates a claim as a whole, so it cannot take part of one.
    errors += [
        invalid(
            field,
            quote(class_name),
            f"a claim that asks for {names.driver} devices must use only {names.driver} "
            "DeviceClasses; request the other devices in a claim of their own",
        )
        for field, class_name in foreign
    ]
    # Admin access sees a card unlimited, a share is limited: the plugin prepares one or the
    # other per claim. (kube-apiserver itself allows admin access only in namespaces labelled
    # resource.kubernetes.io/admin-access=true.)
    if len({bool(entry.entry.get("adminAccess")) for entry in ours}) > 1:
        errors += [
            invalid(
                f"{entry.where}.adminAccess",
                "true",
                f"a claim asks for admin access in all of its {names.driver} requests or in "
                "none; ask for admin access and for shares in separate claims",
            )
            for entry in ours
            if entry.entry.get("adminAccess")
        ]
    enforced: list[tuple[_Entry, tuple[object, ...]]] = []
    cluster_errors: dict[str, list[list[str]]] = {}
    for entry in ours:
        entry_errors, against_cluster, effective = _check_entry(
            entry, configs, names, limits, default_backend
        )
        errors += entry_errors
        cluster_errors.setdefault(parent_request(entry.result), []).append(against_cluster)
        if effective is not None:
            enforced.append((entry, _enforced(effective)))
    # The controller skips a firstAvailable alternative the cluster cannot hold and takes the
    # next: refuse a request on the cluster's cards only when no alternative fits them.
    for per_alternative in cluster_errors.values():
        if all(per_alternative):
            errors += [error for alternative in per_alternative for error in alternative]
    # A config entry too large for every card may apply to several requests: say it once.
    return list(dict.fromkeys(errors + _policy_conflicts(enforced)))


def _enforced(config: EffectiveConfig) -> tuple[object, ...]:
    """Return what the kubelet plugin enforces per claim; placement is only the controller's."""
    return (config.isolation, config.priority, config.backend)


def _policy_conflicts(enforced: Sequence[tuple[_Entry, tuple[object, ...]]]) -> list[str]:
    """Refuse a claim whose devices could end up with different policies.

    The kubelet plugin enforces one isolation, priority and backend per claim, and the
    controller may pick any firstAvailable alternative: so every alternative of every request
    must agree, not merely some combination of them.
    """
    if not enforced:
        return []
    first, policy = enforced[0]
    return [
        invalid(
            entry.where,
            quote(entry.result),
            "must have the same isolation, priority and backend as "
            f"{quote(first.result)}: all the devices of one claim share one policy; use one "
            "claim per policy",
        )
        for entry, other in enforced[1:]
        if other != policy
    ]


def _claim_configs(
    spec: ObjectView, devices: str, names: DriverNames
) -> tuple[list[_ClaimConfig], list[str]]:
    configs: list[_ClaimConfig] = []
    errors: list[str] = []
    for index, entry in enumerate((spec.get("devices") or {}).get("config") or []):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != names.driver:
            continue
        field = f"{devices}.config[{index}].opaque.parameters"
        parameters: Any = opaque.get("parameters")  # decode_config says what is wrong with it
        source: Source | None = None
        try:
            source = Source(field, decode_config(parameters, names, path=field), parameters)
        except ConfigError as exc:
            errors.append(str(exc))
        configs.append(_ClaimConfig(tuple(entry.get("requests") or ()), source))
    return configs, errors


def _class_configs(entry: _Entry, names: DriverNames) -> tuple[list[Source], list[str]]:
    """Decode the class's config and compile its selectors, as the controller does per claim."""
    spec = objects.spec(entry.device_class)
    configs: list[Source] = []
    problems: list[str] = []
    for index, config in enumerate(spec.get("config") or []):
        opaque = config.get("opaque") or {}
        if opaque.get("driver") != names.driver:
            continue
        field = f"spec.config[{index}].opaque.parameters"
        parameters: Any = opaque.get("parameters")
        try:
            decoded = decode_config(parameters, names, path=field)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        configs.append(Source(field, decoded, parameters, entry.class_name))
    for index, selector in enumerate(spec.get("selectors") or []):
        try:
            cel.compile_selector(str((selector.get("cel") or {}).get("expression") or ""))
        except cel.CelCompileError as exc:
            problems.append(f"spec.selectors[{index}].cel.expression: {exc}")
    return configs, [
        invalid(
            f"{entry.where}.deviceClassName",
            quote(entry.class_name),
            f"the DeviceClass cannot be used until its administrator fixes it: {problem}",
        )
        for problem in problems
    ]


def _check_entry(
    entry: _Entry,
    configs: Sequence[_ClaimConfig],
    names: DriverNames,
    limits: Limits,
    default_backend: Backend | None,
) -> tuple[list[str], list[str], EffectiveConfig | None]:
    """Return the entry's errors, its errors against the cluster's cards, and its config.

    The second list depends on what the cluster has now (the largest card, the most cards on
    a node); the config is ``None`` when a config entry is invalid.
    """
    class_configs, class_errors = _class_configs(entry, names)
    errors = list(class_errors)
    fields = entry.entry
    for index, selector in enumerate(fields.get("selectors") or []):
        expression = str((selector.get("cel") or {}).get("expression") or "")
        try:
            cel.compile_selector(expression)
        except cel.CelCompileError as exc:
            field = f"{entry.where}.selectors[{index}].cel.expression"
            errors.append(invalid(field, quote(expression), str(exc)))
    amounts, capacity_errors = check_capacity(fields, entry.where, names, Limits())
    errors += capacity_errors
    _, with_limits = check_capacity(fields, entry.where, names, limits)
    cluster_errors = [error for error in with_limits if error not in capacity_errors]
    exact = (fields.get("allocationMode") or "ExactCount") == "ExactCount"
    count = int(fields.get("count") or 1) if exact else 0
    if limits.most_cards is not None and count > limits.most_cards:
        cluster_errors.append(
            invalid(
                f"{entry.where}.count",
                str(count),
                f"must be at most {limits.most_cards}: no node in the cluster has more "
                f"{names.driver} cards, and a pod's devices are all on one node",
            )
        )
    applicable = [c.source for c in configs if applies_to(c.requests, entry.result)]
    if class_errors or any(source is None for source in applicable):
        return errors, cluster_errors, None
    # The merge order of structured.config.share_config: the class's entries, then the claim's.
    sources = [*class_configs, *(source for source in applicable if source is not None)]
    effective = merge_configs(source.config for source in sources).effective()
    errors += size_conflict(fields, entry.where, sources)
    cluster_errors += config_memory_problem(sources, entry.where, names, limits)
    backend = effective.backend or default_backend
    if backend is not None and not entry.entry.get("adminAccess"):
        cores = effective.cores if effective.cores is not None else amounts.get(CORES, MAX_CORES)
        problem = unsupported_policy(
            backend,
            effective.isolation,
            priority=effective.priority,
            cores=[(f"request {quote(entry.result)}", int(cores))],
            cards=count,
        )
        if problem is not None and effective.backend is None:
            problem += (
                f" (no config names a backend, so the kubelet plugins' default {quote(backend)} "
                "applies: the chart's kubeletPlugin.backend)"
            )
        if problem is not None:
            errors.append(f"{entry.where}: {_FORBIDDEN}: {problem}")
    return errors, cluster_errors, effective
