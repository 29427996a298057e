"""What a backend cannot enforce, said the same way by the kubelet plugin and the webhook.

A refusal reads ``backend "<backend>": <field> <value>: <why>; <what to use instead>``, e.g.::

    backend "mps": isolation "burst-share": the MPS active thread percentage is a hard cap and
    cannot lend idle compute; use isolation "fixed-share" or "best-effort", or backend
    "hami-core"
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from dra_driver.api import Backend, EffectiveConfig, Isolation, Priority
from dra_driver.api.errors import quote
from dra_driver.cdi.shares import FULL_CORES, CardLimit, CardShare, UnsupportedPolicyError
from dra_driver.nvml.fields import format_quantity

HAMI_MAX_CARDS: Final = 16  # CUDA_DEVICE_MAX_COUNT: the per-ordinal limit arrays have 16 slots


def _reason(backend: Backend, field: str, value: str, why: str) -> str:
    return f"backend {quote(backend)}: {field} {quote(value)}: {why}"


def refusal(backend: Backend, field: str, value: str, why: str) -> UnsupportedPolicyError:
    """Return the error that says ``backend`` cannot enforce ``field`` ``value``, and why."""
    return UnsupportedPolicyError(_reason(backend, field, value, why))


# Why a fixed-share limit of 0 cores cannot be enforced, per backend that enforces cores.
_ZERO_CORES: Final = {
    Backend.HAMI_CORE: "HAMi-core reads CUDA_DEVICE_SM_LIMIT 0 as no limit",
    Backend.MPS: "a 0% active thread percentage leaves the client no SMs",
}


def unsupported_policy(
    backend: Backend,
    isolation: Isolation,
    *,
    priority: Priority = Priority.ONLINE,
    cores: Sequence[tuple[str, int]] = (),
    cards: int = 0,
) -> str | None:
    """Return why ``backend`` cannot enforce ``isolation`` for these shares, or ``None``.

    ``cores`` pairs a name for each share's limit (a card in the container, or a request)
    with its cores; ``cards`` is how many cards the container gets. The kubelet plugin passes
    the claim's per-card limits, the admission webhook each request before any card is chosen,
    so both refuse with the same words. Checks that depend on which cards shares land on stay
    with the backend's edits.
    """
    if (
        backend is Backend.HAMI_CORE
        and isolation is Isolation.BEST_EFFORT
        and priority is Priority.OFFLINE
    ):
        return _reason(
            backend,
            "isolation",
            isolation,
            "HAMi-core holds an offline task's kernel launches only while it limits the task's "
            "cores, and best-effort never limits them: the task could not be suspended for "
            f"online work; use isolation {quote(Isolation.FIXED_SHARE)} or "
            f"{quote(Isolation.BURST_SHARE)}, or priority {quote(Priority.ONLINE)}",
        )
    if backend is Backend.MPS and isolation is Isolation.BURST_SHARE:
        return _reason(
            backend,
            "isolation",
            isolation,
            "the MPS active thread percentage is a hard cap and cannot lend idle compute; use "
            f"isolation {quote(Isolation.FIXED_SHARE)} or {quote(Isolation.BEST_EFFORT)}, or "
            f"backend {quote(Backend.HAMI_CORE)}",
        )
    if backend is Backend.HAMI_CORE and cards > HAMI_MAX_CARDS:
        return _reason(
            backend,
            "cards",
            str(cards),
            f"HAMi-core limits at most {HAMI_MAX_CARDS} cards per container "
            f"(CUDA_DEVICE_MAX_COUNT); request at most {HAMI_MAX_CARDS} cards, or use backend "
            f"{quote(Backend.NONE)}",
        )
    why = _ZERO_CORES.get(backend)
    if why is None or isolation is not Isolation.FIXED_SHARE:
        return None
    for name, share_cores in cores:
        if share_cores == 0:
            return _reason(
                backend,
                "isolation",
                isolation,
                f"{name} has 0 cores, and {why}; request at least 1 core, or use isolation "
                f"{quote(Isolation.BEST_EFFORT)}",
            )
    return None


def refuse_unsupported(
    backend: Backend, config: EffectiveConfig, limits: Sequence[CardLimit]
) -> None:
    """Raise :class:`UnsupportedPolicyError` if ``backend`` cannot enforce ``config`` here."""
    problem = unsupported_policy(
        backend,
        config.isolation,
        priority=config.priority,
        cores=[(limit.describe(), limit.cores) for limit in limits],
        cards=len(limits),
    )
    if problem is not None:
        raise UnsupportedPolicyError(problem)


def refuse_partial_exclusive(backend: Backend, shares: Sequence[CardShare]) -> None:
    """Refuse ``exclusive`` isolation for any share smaller than a whole card."""
    for share in shares:
        # What the slice offers (and a request-less claim consumes), not the raw card bytes.
        total = share.card.shareable_memory_bytes
        if share.cores != FULL_CORES or share.memory_bytes != total:
            raise refusal(
                backend,
                "isolation",
                Isolation.EXCLUSIVE,
                f"request {quote(share.request)} has {share.cores} of {FULL_CORES} cores and "
                f"{format_quantity(share.memory_bytes)} of {format_quantity(total)} memory of "
                f"card {share.card.uuid}; exclusive needs whole cards; remove the capacity "
                "requests",
            )
