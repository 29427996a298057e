"""FirstServed lists from the newest API version the server serves and watches on it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from dra_driver.k8s.versions import FirstServed


class Version:
    """A stand-in for one version's generated list method: serves, or answers ``status``."""

    def __init__(self, name: str, status: int | None = None) -> None:
        self.name, self.status = name, status
        self.calls: list[dict[str, Any]] = []
        self.__qualname__ = f"Version.{name}"

    def __call__(self, **kwargs: Any) -> str:
        self.calls.append(kwargs)
        if self.status is not None:
            raise client.ApiException(status=self.status, reason="answered")
        return self.name


def test_a_list_takes_the_newest_served_version_and_a_watch_follows_it() -> None:
    """v1 404s, v1beta2 serves: the list answers from v1beta2, and so does the watch."""
    v1, v1beta2, v1alpha3 = Version("v1", 404), Version("v1beta2"), Version("v1alpha3")
    served = FirstServed("devicetaintrules", v1, v1beta2, v1alpha3)
    assert served(limit=500) == "v1beta2"
    assert served(watch=True, resource_version="7") == "v1beta2"
    assert (len(v1.calls), len(v1beta2.calls), v1alpha3.calls) == (1, 2, [])


def test_only_not_found_falls_through_and_the_last_404_is_raised() -> None:
    """A 403 is an answer, not a missing version; with none served the oldest's 404 is raised."""
    with pytest.raises(client.ApiException) as forbidden:
        FirstServed("r", Version("v1", 403), Version("v1beta2"))()
    assert forbidden.value.status == 403
    oldest = Version("v1alpha3", 404)
    with pytest.raises(client.ApiException) as missing:
        FirstServed("r", Version("v1", 404), oldest)()
    assert (missing.value.status, len(oldest.calls)) == (404, 1)
