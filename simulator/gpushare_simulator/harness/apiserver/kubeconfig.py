"""Kubeconfig files and client configurations pointing at a fake API server."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import yaml
from kubernetes import client

TOKEN: Final = "fake-apiserver-token"  # noqa: S105 - a placeholder credential, never checked
CONTEXT: Final = "fake-apiserver"


def kubeconfig_document(url: str, namespace: str = "default") -> dict[str, object]:
    """Return a kubeconfig with one insecure-HTTP cluster and one bearer-token user."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {"token": TOKEN}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: str | Path, url: str) -> Path:
    """Write the kubeconfig for ``url`` to ``path`` (atomically) and return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(yaml.safe_dump(kubeconfig_document(url), sort_keys=False))
    temporary.replace(target)
    return target


def configuration(url: str) -> client.Configuration:
    """Return a fresh sync client configuration for ``url`` (never the library-global default)."""
    config = client.Configuration()
    config.host = url
    config.api_key = {"authorization": TOKEN}
    config.api_key_prefix = {"authorization": "Bearer"}
    return config
