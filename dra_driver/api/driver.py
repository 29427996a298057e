"""The driver name and every Kubernetes and CDI name derived from it.

The driver name is a Helm value: two installations with different names must be able to run side
by side in one cluster, so nothing in the package spells the default out except
:data:`DEFAULT_DRIVER_NAME`, and every other name is derived here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from dra_driver.api.errors import quote

DEFAULT_DRIVER_NAME: Final = "gpushare.dra.dev"

# ResourceSlice spec.driver allows at most 63 characters, stricter than a DNS subdomain's 253.
MAX_DRIVER_NAME_LENGTH: Final = 63

_DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)

# The one version of the config this package defines; the group part is the driver name.
_CONFIG_VERSION: Final = "v1alpha1"


class InvalidDriverNameError(ValueError):
    """The configured driver name cannot be used as a DRA driver name and API group."""


QUOTA_KIND: Final = "GpuShareQuota"
"""The kind of a namespace's GPU quota (see :mod:`dra_driver.quota`)."""


@dataclass(frozen=True)
class DriverNames:
    """A validated driver name and the names derived from it.

    Construct it with :meth:`for_driver`. Construction validates, so code handed a
    ``DriverNames`` need not check the name again.
    """

    driver: str

    def __post_init__(self) -> None:
        _validate(self.driver)

    @classmethod
    def for_driver(cls, name: str) -> DriverNames:
        """Validate ``name`` and derive its names; raise :class:`InvalidDriverNameError`."""
        return cls(name)

    @property
    def config_api_version(self) -> str:
        """The ``apiVersion`` of ``GpuShareConfig``: the driver name doubles as its API group."""
        return f"{self.driver}/{_CONFIG_VERSION}"

    @property
    def config_kind(self) -> str:
        """The ``kind`` of the opaque config object."""
        return "GpuShareConfig"

    @property
    def quota_api_version(self) -> str:
        """The ``apiVersion`` of ``GpuShareQuota``: the group and version of ``GpuShareConfig``."""
        return f"{self.driver}/{_CONFIG_VERSION}"

    @property
    def quota_group_version(self) -> tuple[str, str]:
        """The API group and version of ``GpuShareQuota``, as a client's calls take them."""
        return self.driver, _CONFIG_VERSION

    @property
    def quota_plural(self) -> str:
        """The resource name of ``GpuShareQuota`` (its CRD is ``<plural>.<driver>``)."""
        return "gpusharequotas"

    @property
    def finalizer(self) -> str:
        """The finalizer the controller puts on claims it allocated, so it can release them."""
        return f"{self.driver}/allocation"

    @property
    def nomination_annotation(self) -> str:
        """The claim annotation that holds a card's room for the claim while others are evicted."""
        return f"{self.driver}/nomination"

    @property
    def scheduling_gate(self) -> str:
        """The pod scheduling gate that holds a pod until the controller allocated its claims."""
        return f"{self.driver}/allocation"

    @property
    def policy_gate(self) -> str:
        """The key of the chart's admission policy gate: a template label and a pod annotation.

        The webhook labels (value ``"true"``) a ResourceClaimTemplate whose single request asks
        for this driver when it is created; the policy gates a pod whose only claim comes from
        such a template, used by at most one container at a time, and annotates the pod with
        the same key, so the webhook's match condition can skip it: it needs nothing else.
        """
        return f"{self.driver}/policy-gate"

    @property
    def cdi_vendor(self) -> str:
        """The CDI vendor; the ``k8s.`` prefix follows the DRA convention for per-claim specs."""
        return f"k8s.{self.driver}"

    @property
    def cdi_class(self) -> str:
        """The CDI device class: one transient spec per prepared claim."""
        return "claim"

    @property
    def cdi_kind(self) -> str:
        """The CDI kind, ``<vendor>/<class>``, that prefixes every CDI device ID we hand out."""
        return f"{self.cdi_vendor}/{self.cdi_class}"

    @property
    def default_device_class(self) -> str:
        """The DeviceClass with no config: users get the documented defaults."""
        return self.driver

    @property
    def online_device_class(self) -> str:
        """The DeviceClass whose config sets ``priority: online``."""
        return f"online.{self.driver}"

    @property
    def offline_device_class(self) -> str:
        """The DeviceClass whose config sets ``priority: offline``."""
        return f"offline.{self.driver}"


def _validate(name: str) -> None:
    def fail(rule: str) -> InvalidDriverNameError:
        return InvalidDriverNameError(f"invalid driver name {quote(name)}: {rule}")

    if not name:
        raise fail("must not be empty")
    if len(name) > MAX_DRIVER_NAME_LENGTH:
        raise fail(f"must have at most {MAX_DRIVER_NAME_LENGTH} characters, has {len(name)}")
    if not _DNS_SUBDOMAIN.fullmatch(name):
        raise fail(
            "must be a lowercase DNS subdomain (RFC 1123): dot-separated labels of lowercase "
            'letters, digits and "-", each starting and ending with a letter or digit'
        )
    if "." not in name:
        raise fail(
            f"must contain a dot, as it is also an API group (e.g. {quote(DEFAULT_DRIVER_NAME)})"
        )
