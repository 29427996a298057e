"""Calling the generated client with raw JSON in and out.

Components work on plain dicts: they are what the API server sends, they carry fields the
client's models may not know yet, and they cost nothing to parse into models we do not use.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes import client

from dra_driver.k8s.errors import translate_errors
from dra_driver.k8s.objects import Object


def call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Object:  # noqa: ANN401
    """Call a generated API method and return the response body as a dict.

    Client and transport failures surface as :class:`~dra_driver.k8s.errors.ApiError`.
    """
    with translate_errors():
        response = method(*args, _preload_content=False, **kwargs)
        data = response.data
    if not data:
        return {}
    body: Object = json.loads(data)
    return body


def get(api_client: client.ApiClient, path: str, **path_params: str) -> Object:
    """GET ``path`` (e.g. ``/api/v1/nodes/{name}``) and return the body as a dict.

    For callers that would otherwise build a generated API class only for one read:
    ``CoreV1Api`` alone imports some 230 model modules, 20 MB in every kubelet plugin.
    """
    return _request(api_client, "GET", path, None, path_params)


def post(api_client: client.ApiClient, path: str, body: Object, **path_params: str) -> Object:
    """POST ``body`` to ``path`` and return the answer as a dict.

    For subresources whose generated method insists on a model for the body (an Eviction).
    """
    return _request(api_client, "POST", path, body, path_params)


def _request(
    api_client: client.ApiClient,
    method: str,
    path: str,
    body: Object | None,
    path_params: dict[str, str],
) -> Object:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = api_client.param_serialize(
        method=method,
        resource_path=path,
        path_params=path_params,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    with translate_errors():
        # The generated methods' own path for _preload_content=False: raises on non-2xx.
        response = api_client._call_with_legacy_options(
            request, {}, async_req=None, preload_content=False, request_timeout=None,
            return_http_data_only=True,
        )  # fmt: skip
        data = response.data
    answer: Object = json.loads(data) if data else {}
    return answer


JSON_PATCH = "application/json-patch+json"
"""Content type for an RFC 6902 JSON patch: a list of operations, ``test`` among them."""

# No strategic merge patch: the server applies one by re-encoding the whole object, which
# re-sorts the keys of a claim's opaque parameters, and a claim's spec must stay byte for byte.
MERGE_PATCH = "application/merge-patch+json"
"""Content type for an RFC 7386 merge patch: lists in the patch replace lists in the object."""
