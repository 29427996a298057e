"""The quotas an informer holds, parsed once per version (the controller's and the webhook's)."""

from __future__ import annotations

import threading

from dra_driver.k8s import objects
from dra_driver.k8s.informer import Informer
from dra_driver.k8s.objects import ObjectView
from dra_driver.logging import get_logger
from dra_driver.quota.model import Quota, QuotaSpecError, parse_quota

log = get_logger(__name__)


class QuotaBook:
    """The quotas the informer holds, parsed; each malformed version is reported once."""

    def __init__(self, informer: Informer) -> None:
        self._informer = informer
        self._parsed: dict[tuple[str, str], tuple[str, Quota | None]] = {}
        self._lock = threading.Lock()

    def of(self, namespace: str) -> list[Quota]:
        """Return the enforceable quotas of ``namespace``."""
        return [
            quota
            for obj in self._informer.list()
            if objects.namespace(obj) == namespace and (quota := self.parse(obj)) is not None
        ]

    def parse(self, obj: ObjectView) -> Quota | None:
        """Return ``obj`` as a quota, ``None`` (logged once per version) if it is malformed."""
        key = (objects.namespace(obj), objects.name(obj))
        version = str(objects.metadata(obj).get("resourceVersion") or "")
        with self._lock:
            known = self._parsed.get(key)
            if known is not None and known[0] == version:
                return known[1]
        quota: Quota | None
        try:
            quota = parse_quota(obj)
        except QuotaSpecError as exc:
            log.warning("quota.invalid", quota="/".join(key), error=str(exc))
            quota = None
        with self._lock:
            self._parsed[key] = (version, quota)
        return quota
