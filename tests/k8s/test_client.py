"""Client construction: credentials from a kubeconfig or the Pod, with clear failures."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from dra_driver import __version__
from dra_driver.k8s.client import ClientConfigError, new_api_client, throttled_refresh
from dra_driver.k8s.settings import ApiTimeouts, KubeClientSettings


def write_kubeconfig(path: Path, server: str, token: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_kubeconfig_sets_server_and_token(tmp_path: Path) -> None:
    """A kubeconfig file yields a client for its server with its bearer token."""
    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:6443", "t0k3n")
    with new_api_client(KubeClientSettings(kubeconfig=str(kubeconfig)), "test") as api_client:
        configuration = api_client.configuration
        assert configuration.host == "http://127.0.0.1:6443"
        assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer t0k3n"


def test_two_clients_do_not_share_configuration(tmp_path: Path) -> None:
    """Two clients built in one process keep their own servers (no global default leaks)."""
    first = write_kubeconfig(tmp_path / "a", "http://127.0.0.1:1001", "a")
    second = write_kubeconfig(tmp_path / "b", "http://127.0.0.1:1002", "b")
    with (
        new_api_client(KubeClientSettings(kubeconfig=str(first)), "test") as a,
        new_api_client(KubeClientSettings(kubeconfig=str(second)), "test") as b,
    ):
        assert (a.configuration.host, b.configuration.host) == (
            "http://127.0.0.1:1001",
            "http://127.0.0.1:1002",
        )


def test_missing_kubeconfig_file_is_named(tmp_path: Path) -> None:
    """A kubeconfig path that does not exist fails with an error naming that path."""
    missing = tmp_path / "nope"
    with pytest.raises(ClientConfigError, match=f"kubeconfig '{missing}'"):
        new_api_client(KubeClientSettings(kubeconfig=str(missing)), "test")


def test_outside_a_cluster_without_kubeconfig_explains_both_sources(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without --kubeconfig outside a Pod, the error says in-cluster credentials were tried."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(ClientConfigError, match="in-cluster service account"):
        new_api_client(KubeClientSettings(), "test")


def test_a_client_names_its_component_and_bounds_its_requests(tmp_path: Path) -> None:
    """The client says which component it is and carries the timeouts of its settings."""
    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:6443", "t")
    settings = KubeClientSettings(
        kubeconfig=str(kubeconfig), api_connect_timeout=3, api_timeout=7, watch_timeout=11
    )
    with new_api_client(settings, "controller") as api_client:
        assert api_client.user_agent == f"gpushare-dra-controller/{__version__}"
        assert api_client.timeouts == ApiTimeouts(connect=3, request=7, watch=11)
        retries = api_client.configuration.retries
        assert (retries.connect, retries.read) == (1, False)


def test_a_refresh_hook_runs_at_most_once_per_interval() -> None:
    """throttled_refresh calls the hook on the first request, then not again within ``every``."""
    now = [100.0]
    calls: list[float] = []
    refresh = throttled_refresh(lambda _: calls.append(now[0]), every=1.0, clock=lambda: now[0])
    configuration = client.Configuration()
    for step in (0.0, 0.25, 0.5, 0.5, 0.25, 1.0):
        now[0] += step
        refresh(configuration)
    assert calls == [100.0, 101.25, 102.5]


def test_a_kubeconfig_client_refreshes_its_credentials_through_the_throttle(
    tmp_path: Path,
) -> None:
    """The loader's per-request refresh is wrapped, and still applies the kubeconfig's token."""
    kubeconfig = write_kubeconfig(tmp_path / "kc", "http://127.0.0.1:6443", "t0k3n")
    with new_api_client(KubeClientSettings(kubeconfig=str(kubeconfig)), "test") as api_client:
        configuration = api_client.configuration
        hook = configuration.refresh_api_key_hook
        assert hook.__qualname__ == "throttled_refresh.<locals>.refresh"
        configuration.api_key["authorization"] = "stale"
        assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer t0k3n"
