"""Calling the generated client with raw JSON in and out.

Components work on plain dicts: they are what the API server sends, they carry fields the
client's models may not know yet, and they cost nothing to parse into models we do not use.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dra_driver.k8s.errors import translate_errors

Object = dict[str, Any]


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


MERGE_PATCH = "application/merge-patch+json"
"""Content type for an RFC 7386 merge patch: lists in the patch replace lists in the object."""
