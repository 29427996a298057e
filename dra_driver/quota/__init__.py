"""GpuShareQuota: a namespace's ceiling on GPU cores, memory and whole cards.

:mod:`~dra_driver.quota.model` reads a quota object and says what it allows;
:mod:`~dra_driver.quota.use` says what an allocated claim takes of it and whether an
allocation would go over. Pure functions, shared by the controller (which holds the ceiling
at allocation), the webhook (which refuses a claim no quota could ever admit), ``status`` and
``plan``.
"""

from dra_driver.quota.book import QuotaBook
from dra_driver.quota.model import (
    RESOURCES,
    Amounts,
    Quota,
    QuotaSpecError,
    QuotaStanding,
    parse_quota,
    render_amount,
)
from dra_driver.quota.use import (
    Breach,
    CardMemory,
    ClaimUse,
    breaches,
    claim_use,
    cluster_uses,
    describe,
    outside_controller,
    total_use,
)

__all__ = [
    "RESOURCES",
    "Amounts",
    "Breach",
    "CardMemory",
    "ClaimUse",
    "Quota",
    "QuotaBook",
    "QuotaSpecError",
    "QuotaStanding",
    "breaches",
    "claim_use",
    "cluster_uses",
    "describe",
    "outside_controller",
    "parse_quota",
    "render_amount",
    "total_use",
]
