"""``FakeApiServer``: the public face of the fake API server (lifecycle, clients, direct access)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_driver.k8s import objects
from dra_driver.k8s.client import TimedApiClient, bounded_retries
from dra_driver.k8s.settings import ApiTimeouts
from gpushare_simulator.harness.apiserver import binding, kubeconfig, patch
from gpushare_simulator.harness.apiserver.app import ApiApp, LoggedRequest
from gpushare_simulator.harness.apiserver.faults import Faults
from gpushare_simulator.harness.apiserver.reads import ListOptions, list_objects
from gpushare_simulator.harness.apiserver.resources import REGISTRY, ResourceType
from gpushare_simulator.harness.apiserver.server import ApiHTTPServer
from gpushare_simulator.harness.lifecycle import Lifecycle

JSON = dict[str, Any]
_PATCH_TYPES = {"merge": patch.MERGE, "json": patch.JSON_PATCH, "strategic": patch.STRATEGIC}


class FakeApiServer(Lifecycle):
    """An in-process Kubernetes API server that the real ``kubernetes`` client talks to over HTTP.

    Serves core/v1 namespaces, nodes, pods (+status, +binding, +eviction) and events;
    events.k8s.io/v1 events; coordination.k8s.io/v1 leases; policy/v1 poddisruptionbudgets
    (+status, which no disruption controller fills in: clients write it); resource.k8s.io/v1
    resourceslices, deviceclasses, resourceclaims (+status) and resourceclaimtemplates;
    admissionregistration.k8s.io/v1 mutating- and validatingwebhookconfigurations — with the
    real server's resourceVersion, conflict, watch, selector, patch, finalizer,
    status-subresource, disruption-budget, validation and admission webhook semantics (see the
    package documentation for what is knowingly left out).

    ``kube_version`` ("1.34".."1.37") picks the schema set writes are validated against and what
    ``/version`` reports; ``watch_history`` is how many events per resource stay replayable
    before a watch from an older resourceVersion gets 410 Expired; ``graceful_pod_deletion``
    makes deleting a bound pod set ``deletionTimestamp`` and wait for a kubelet's final delete
    (``gracePeriodSeconds=0``) instead of removing it at once. ``feature_gates`` overrides the
    release's DRA gate defaults (see :mod:`gpushare_simulator.harness.apiserver.gates`): fields of a
    disabled gate are dropped on write, as the real server does. ``service_urls`` says where
    webhooks configured with ``clientConfig.service`` are reached (see :attr:`service_urls`).
    Every write, the direct-access ones below included, goes through the configured admission
    webhooks (see :mod:`gpushare_simulator.harness.apiserver.admission`).

    One start/stop cycle per instance; use it as a context manager.
    """

    def __init__(
        self,
        kube_version: str = "1.36",
        *,
        validate: bool = True,
        watch_history: int = 1000,
        host: str = "127.0.0.1",
        port: int = 0,
        graceful_pod_deletion: bool = False,
        feature_gates: Mapping[str, bool] | None = None,
        service_urls: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        self.app = ApiApp(
            kube_version,
            validate=validate,
            watch_history=watch_history,
            graceful_pods=graceful_pod_deletion,
            feature_gates=feature_gates,
        )
        self.service_urls = service_urls or {}
        self.kube_version = kube_version
        self._host = host
        self._port = port
        self._httpd: ApiHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind the port and serve on a background thread."""
        if self._httpd is not None:
            raise RuntimeError("the fake API server is already started")
        if self.app.stopping.is_set():
            raise RuntimeError("a stopped fake API server cannot be restarted; make a new one")
        self._httpd = ApiHTTPServer((self._host, self._port), self.app)
        self._port = int(self._httpd.server_address[1])
        self.app.address = f"{self._host}:{self._port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"fake-apiserver-{self._port}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving: end watches, close every connection, free the port, join threads."""
        if self._httpd is None or self._thread is None:
            return
        self.app.stopping.set()
        self.app.store.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        self._thread.join()
        self._httpd = None
        self._thread = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        if self._httpd is None:
            raise RuntimeError("the fake API server is not started")
        return f"http://{self._host}:{self._port}"

    @property
    def port(self) -> int:
        """The TCP port (after :meth:`start`)."""
        return self._port

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig (plain HTTP, a token user, namespace ``default``); return its path."""
        return kubeconfig.write_kubeconfig(path, self.url)

    def configuration(self) -> client.Configuration:
        """Return a fresh sync client configuration for this server."""
        return kubeconfig.configuration(self.url)

    def api_client(
        self, timeouts: ApiTimeouts | None = None, component: str | None = None
    ) -> TimedApiClient:
        """Return a sync API client with its own configuration (never the global default).

        Its requests are bounded as a component's are: by ``timeouts``, else the defaults;
        ``component`` names it in the User-Agent as the driver's components are named.
        """
        configuration = self.configuration()
        bounded_retries(configuration)
        return TimedApiClient(configuration, timeouts or ApiTimeouts(), component)

    def blackhole(self, agent: str = "") -> int:
        """Silence every connection open now, as a partition would; return how many.

        Requests on them are swallowed, answers and watch events never sent, nothing closed;
        new connections work (see :mod:`gpushare_simulator.harness.apiserver.server`). ``agent``
        limits it to connections whose clients' User-Agent starts with it.
        """
        if self._httpd is None:
            raise RuntimeError("the fake API server is not started")
        return self._httpd.blackhole(agent)

    @property
    def requests(self) -> Counter[tuple[str, str]]:
        """Return the requests served by ``(verb, resource)``, e.g. ``("patch", "pods/status")``."""
        return self.app.requests

    @property
    def requests_by_agent(self) -> Counter[str]:
        """Return the requests served by the client's ``User-Agent`` header (``""``: none sent)."""
        return self.app.requests_by_agent

    @property
    def requests_by_agent_verb(self) -> Counter[tuple[str, str, str]]:
        """Return the requests served by ``(User-Agent, verb, resource)``."""
        return self.app.requests_by_agent_verb

    def record_requests(self) -> list[LoggedRequest]:
        """Log every request from now on, in order; return the (growing) log."""
        self.app.request_log = []
        return self.app.request_log

    def reset_requests(self) -> None:
        """Zero the request counters (a log being recorded goes on)."""
        self.app.requests.clear()
        self.app.requests_by_agent.clear()
        self.app.requests_by_agent_verb.clear()

    @property
    def faults(self) -> Faults:
        """Fault injection (see :mod:`gpushare_simulator.harness.apiserver.faults`)."""
        return self.app.faults

    @property
    def internal_errors(self) -> list[str]:
        """Return the tracebacks of requests that crashed the fake (each answered 500)."""
        return self.app.internal_errors

    @property
    def service_urls(self) -> dict[tuple[str, str], str]:
        """Where webhook services are reached: ``(namespace, name)`` → ``https://host:port``.

        The harness has no cluster network, so a webhook's ``clientConfig.service`` is called
        at the address mapped here (its ``path`` appended; its certificate must still name
        ``<name>.<namespace>.svc``); an unmapped service fails the call like a service that does
        not exist. The dict is live: tests may add entries while the server runs.
        """
        return self.app.writer.webhooks.service_urls

    @service_urls.setter
    def service_urls(self, urls: Mapping[tuple[str, str], str]) -> None:
        self.app.writer.webhooks.service_urls = dict(urls)

    @property
    def bookmark_interval(self) -> float:
        """Seconds between BOOKMARK events on watches that allow them (default 5)."""
        return self.app.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        self.app.bookmark_interval = seconds

    @property
    def resource_version(self) -> int:
        """The latest resourceVersion."""
        return self.app.store.rv

    def compact(self) -> None:
        """Drop all watch history: watching from any older resourceVersion now gets 410 Expired."""
        self.app.store.compact()

    # Direct access for test setup; the same semantics as the HTTP verbs, no request counted.

    @staticmethod
    def _type(resource: str) -> ResourceType:
        return REGISTRY.resolve(resource)

    def create(self, obj: JSON) -> JSON:
        """Create an object (typed by its apiVersion/kind) like a POST, but keep its ``status``."""
        rtype = REGISTRY.for_object(obj)
        namespace = str(objects.metadata(obj).get("namespace") or "")
        if rtype.namespaced and not namespace:
            namespace = "default"
        return self.app.writer.create(rtype, namespace, obj, seed=True).as_dict()

    def get(self, resource: str, namespace: str | None, name: str) -> JSON | None:
        """One object (a private copy), or ``None``; ``resource`` is a plural like ``pods``."""
        entry = self.app.store.get(self._type(resource), namespace or "", name)
        return entry.copy() if entry is not None else None

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        """Objects of a resource (private copies), optionally filtered like a LIST."""
        rtype = self._type(resource)
        query = {"labelSelector": label_selector, "fieldSelector": field_selector}
        items, _, _, _ = list_objects(
            self.app.store, rtype, namespace, ListOptions.parse(rtype, query)
        )
        return [entry.copy() for entry in items]

    def update(self, obj: JSON, *, subresource: str = "") -> JSON:
        """Replace an object like a PUT (``subresource="status"`` for ``/status``)."""
        rtype = REGISTRY.for_object(obj)
        meta = objects.metadata(obj)
        return self.app.writer.update(
            rtype,
            str(meta.get("namespace") or ""),
            str(meta.get("name")),
            obj,
            subresource=subresource,
        ).as_dict()

    def update_status(self, obj: JSON) -> JSON:
        """Replace an object's status like a PUT to ``/status``."""
        return self.update(obj, subresource="status")

    def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        body: object,
        *,
        patch_type: str = "merge",
        subresource: str = "",
    ) -> JSON:
        """Patch an object; ``patch_type`` is ``merge``, ``json`` or ``strategic``."""
        return self.app.writer.patch(
            self._type(resource), namespace or "", name, body, _PATCH_TYPES[patch_type],
            subresource=subresource,
        ).as_dict()  # fmt: skip

    def delete(
        self, resource: str, namespace: str | None, name: str, options: JSON | None = None
    ) -> JSON:
        """Delete an object like a DELETE (``options`` is a DeleteOptions body)."""
        return self.app.deleter.delete(
            self._type(resource), namespace or "", name, options
        ).as_dict()

    def bind(self, namespace: str, pod: str, node: str) -> None:
        """Bind a pod to a node like a POST to ``pods/<name>/binding``."""
        body = {"metadata": {"name": pod}, "target": {"kind": "Node", "name": node}}
        binding.bind(self.app.store, namespace, pod, body)

    def evict(self, namespace: str, pod: str, delete_options: JSON | None = None) -> JSON:
        """Evict a pod like a POST to ``pods/<name>/eviction`` (raises the 429 of a budget)."""
        body = {"metadata": {"name": pod, "namespace": namespace}, "deleteOptions": delete_options}
        return self.app.evictor.evict(namespace, pod, body).as_dict()
