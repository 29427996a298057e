"""Create and delete objects as users do: YAML sent as YAML, any kind, found by discovery.

kubectl, Helm and kube-controller-manager send Go's compact JSON, and a real API server keeps
some fields (a claim's opaque ``parameters``) as the bytes it received. The Python client
sends ``json.dumps`` with spaces, which no user tool does: objects created through it are
stored differently from the same objects applied by a user. So the harness sends each
document as ``application/yaml``, which the server converts to compact JSON itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

import yaml
from kubernetes import client

from dra_driver.k8s import objects
from dra_driver.k8s.errors import NotFoundError, translate_errors
from dra_driver.k8s.objects import Object

YAML: Final = "application/yaml"
REQUEST_TIMEOUT_S: Final = 30.0
"""A request the API server never answers fails, naming itself, instead of hanging the caller."""


class Applier:
    """Creates and deletes objects of any kind the API server serves, through one client."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._api = api_client
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """Return (plural, namespaced) of ``kind`` in ``api_version``, from discovery."""
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            listing = self._call("GET", base)
            for resource in listing.get("resources") or []:
                if "/" not in resource["name"]:
                    found = (resource["name"], bool(resource["namespaced"]))
                    self._resources[(api_version, resource["kind"])] = found
        if key not in self._resources:
            raise ValueError(f"the API server serves no {kind} in {api_version}")
        return self._resources[key]

    def path(self, document: Object, namespace: str | None = None) -> str:
        """Return the collection URL of ``document`` (its own namespace wins)."""
        api_version, kind = document["apiVersion"], document["kind"]
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if not namespaced:
            return f"{base}/{plural}"
        target = objects.metadata(document).get("namespace") or namespace or "default"
        return f"{base}/namespaces/{target}/{plural}"

    def create(
        self, documents: Iterable[Object] | str, namespace: str | None = None
    ) -> list[Object]:
        """Create each document (YAML text or dicts) as YAML; return what the server stored."""
        if isinstance(documents, str):
            documents = [d for d in yaml.safe_load_all(documents) if d]
        return [
            self._call("POST", self.path(d, namespace), yaml.safe_dump(d, sort_keys=False))
            for d in documents
        ]

    def delete(self, document: Object, namespace: str | None = None) -> bool:
        """Delete the object ``document`` names; False when it was not there."""
        name = document["metadata"]["name"]
        try:
            self._call("DELETE", f"{self.path(document, namespace)}/{name}")
        except NotFoundError:
            return False
        return True

    def _call(self, method: str, path: str, body: str | None = None) -> Object:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = YAML
        request = self._api.param_serialize(
            method=method,
            resource_path=path,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        with translate_errors():
            response = self._api._call_with_legacy_options(
                request, {}, async_req=None, preload_content=False,
                request_timeout=REQUEST_TIMEOUT_S,
                return_http_data_only=True,
            )  # fmt: skip
            data = response.data
        result: Object = json.loads(data) if data else {}
        return result
