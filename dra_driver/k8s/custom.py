"""Listing and watching a custom resource with the generated client, as informers need."""

from __future__ import annotations

from typing import Any

from kubernetes import client


class CustomList:
    """The list-and-watch call of one custom resource, across all namespaces.

    An :class:`~dra_driver.k8s.informer.Informer` calls it with the generated client's list
    arguments (``watch``, ``limit``, ``resource_version`` ...), as it calls a typed list method.
    """

    def __init__(self, api_client: client.ApiClient, group: str, version: str, plural: str) -> None:
        """List ``plural`` of ``group``/``version`` through ``api_client``."""
        self._api = client.CustomObjectsApi(api_client)
        self._resource = (group, version, plural)
        # client_of() finds the API client (and its timeouts) through the bound method's owner.
        self.__self__ = self._api

    def __call__(self, **kwargs: Any) -> Any:  # noqa: ANN401 - the generated client's response
        """List (or, with ``watch=True``, watch) every object of the resource."""
        return self._api.list_cluster_custom_object(*self._resource, **kwargs)
