"""PodDisruptionBudgets (``policy/v1``): validation, status defaults, and which pods they cover.

The fake has no disruption controller: a budget's ``status`` is whatever a client last wrote to
``/status`` (tests write ``disruptionsAllowed`` and ``observedGeneration`` as the controller
would), and the eviction subresource reads and debits it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from gpushare_simulator.harness.apiserver import errors, formats
from gpushare_simulator.harness.apiserver.dra_common import messages
from gpushare_simulator.harness.apiserver.errors import FieldError
from gpushare_simulator.harness.apiserver.selectors import object_label_selector, operator_errors

JSON = dict[str, Any]
KEY: Final = "poddisruptionbudgets.policy"
STATUS_COUNTS: Final = ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
"""Status fields Go always serializes (non-pointer ``int32``): a fresh budget shows them as 0."""
EVICTION_POLICIES: Final = ("AlwaysAllow", "IfHealthyBudget")
_PERCENT: Final = re.compile(r"^[0-9]+%$")
_PERCENT_ERROR: Final = formats.regex_error(
    "a valid percent string must be a numeric string followed by an ending '%'",
    "[0-9]+%",
    "1%",
    "93%",
)
_NONNEGATIVE: Final = "must be greater than or equal to 0"


def default_status(obj: JSON) -> None:
    """Give a budget the status fields a real server always shows (0 until written)."""
    status = obj.get("status")
    if not isinstance(status, dict):
        status = obj["status"] = {}
    for key in STATUS_COUNTS:
        status.setdefault(key, 0)


def _int_or_percent(value: object, path: str) -> list[FieldError]:
    """``ValidatePositiveIntOrPercent`` and ``IsNotMoreThan100Percent``."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [errors.invalid(path, value, _NONNEGATIVE)] if value < 0 else []
    if not isinstance(value, str):
        return []  # the schema's oneOf already refused it as undecodable
    if not _PERCENT.match(value):
        return [errors.invalid(path, value, _PERCENT_ERROR)]
    if int(value[:-1]) > 100:  # noqa: PLR2004 - a percentage
        return [errors.invalid(path, value, "must not be greater than 100%")]
    return []


def _selector(selector: object, path: str) -> list[FieldError]:
    """``ValidateLabelSelector``: label names and values, and each operator's values."""
    if not isinstance(selector, dict):
        return []
    errs: list[FieldError] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        errs += messages(f"{path}.matchLabels", key, formats.qualified_name(key))
        errs += messages(f"{path}.matchLabels", str(value), formats.label_value(str(value)))
    errs += operator_errors(selector, path)
    for index, expression in enumerate(selector.get("matchExpressions") or []):
        key = str(expression.get("key") or "")
        where = f"{path}.matchExpressions[{index}].key"
        errs += messages(where, key, formats.qualified_name(key))
    return errs


def validate(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidatePodDisruptionBudgetSpec`` (what a create or an update of the spec must pass)."""
    spec = obj.get("spec") or {}
    errs: list[FieldError] = []
    if "minAvailable" in spec and "maxUnavailable" in spec:
        errs.append(
            errors.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set")
        )
    for key in ("minAvailable", "maxUnavailable"):
        if key in spec:
            errs += _int_or_percent(spec[key], f"spec.{key}")
    errs += _selector(spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in EVICTION_POLICIES:
        path = "spec.unhealthyPodEvictionPolicy"
        errs.append(errors.not_supported(path, policy, EVICTION_POLICIES))
    return errs


def validate_status(_old: JSON, new: JSON) -> list[FieldError]:
    """``ValidatePodDisruptionBudgetStatusUpdate`` for policy/v1: no negative counts."""
    status = new.get("status") or {}
    errs: list[FieldError] = []
    for key in STATUS_COUNTS:
        value = status.get(key, 0)
        if isinstance(value, int) and value < 0:
            errs.append(errors.invalid(f"status.{key}", value, _NONNEGATIVE))
    return errs


def selects(budget: JSON, labels: Mapping[str, str]) -> bool:
    """Whether a budget covers a pod with ``labels``, as the eviction subresource decides.

    A budget without a selector covers nothing and ``{}`` covers every pod of its namespace
    (policy/v1); one whose selector the server could not parse covers nothing.
    """
    selector = (budget.get("spec") or {}).get("selector")
    if not isinstance(selector, dict):
        return False
    parsed = object_label_selector(selector)
    return parsed is not None and parsed.matches({"metadata": {"labels": dict(labels)}})


def set_allowed_condition(status: JSON, now: str) -> None:
    """``UpdateDisruptionAllowedCondition``: the ``DisruptionAllowed`` condition of the counts.

    As ``meta.SetStatusCondition`` does, the transition time moves only when the status flips.
    """
    allowed = int(status.get("disruptionsAllowed") or 0) > 0
    state = "True" if allowed else "False"
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    found = [i for i, c in enumerate(conditions) if c.get("type") == "DisruptionAllowed"]
    moment = now
    if found and conditions[found[0]].get("status") == state:
        moment = conditions[found[0]].get("lastTransitionTime") or now
    condition: JSON = {"type": "DisruptionAllowed", "status": state}
    observed = int(status.get("observedGeneration") or 0)
    if observed:
        condition["observedGeneration"] = observed
    condition["lastTransitionTime"] = moment
    condition["reason"] = "SufficientPods" if allowed else "InsufficientPods"
    condition["message"] = ""
    if found:
        conditions[found[0]] = condition
    else:
        conditions.append(condition)
    status["conditions"] = conditions
