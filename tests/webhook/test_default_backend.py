"""A policy the kubelet plugins' default backend cannot enforce is refused at creation."""

from __future__ import annotations

import pytest
from webhook.kit import (
    NAMES,
    FakeCluster,
    claim_spec,
    config,
    request,
    response,
    review,
    template,
)

from dra_driver.api import Backend
from dra_driver.webhook.admission import Admission

OFFLINE_BEST_EFFORT = config(priority="offline", isolation="best-effort")


def _answer(default_backend: Backend, *configs: dict[str, object]) -> dict[str, object]:
    """Return the webhook's answer to a template of one 20-core share with ``configs``."""
    spec = claim_spec(request(capacity={"cores": "20", "memory": "1Gi"}), configs=list(configs))
    admission = Admission(NAMES, FakeCluster(), default_backend)
    return response(admission.validate(review(template(spec))).body)


def test_offline_best_effort_under_the_default_hami_core_is_refused_naming_the_default() -> None:
    """No backend named: hami-core, the plugins' default, cannot hold it, and the error says so."""
    answer = _answer(Backend.HAMI_CORE, OFFLINE_BEST_EFFORT)
    assert answer["allowed"] is False
    message = answer["status"]["message"]  # type: ignore[index]
    assert 'spec.spec.devices.requests[0].exactly: Forbidden: backend "hami-core"' in message
    assert "best-effort never limits them" in message
    assert 'the kubelet plugins\' default "hami-core" applies' in message


@pytest.mark.parametrize(
    ("default_backend", "configs"),
    [
        (Backend.HAMI_CORE, (config(priority="offline", isolation="fixed-share"),)),
        (Backend.HAMI_CORE, (config(priority="online", isolation="best-effort"),)),
        (Backend.NONE, (OFFLINE_BEST_EFFORT, config(backend="none"))),
    ],
    ids=["offline-fixed-share", "online-best-effort", "backend-none-named"],
)
def test_policies_the_backend_enforces_are_allowed(
    default_backend: Backend, configs: tuple[dict[str, object], ...]
) -> None:
    """What the effective backend can hold passes, whether it is named or the default."""
    assert _answer(default_backend, *configs)["allowed"] is True
