"""The API server's request handling, independent of HTTP: route → verb → response bytes."""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from gpushare_simulator.harness.apiserver import (
    binding,
    discovery,
    errors,
    patch,
    rawext,
    rawjson,
)
from gpushare_simulator.harness.apiserver.deletes import Deleter
from gpushare_simulator.harness.apiserver.eviction import Evictor
from gpushare_simulator.harness.apiserver.faults import Faults
from gpushare_simulator.harness.apiserver.operations import Result, Writer
from gpushare_simulator.harness.apiserver.rawext import Raws
from gpushare_simulator.harness.apiserver.reads import (
    ListOptions,
    get_object,
    list_body,
    list_objects,
)
from gpushare_simulator.harness.apiserver.resources import REGISTRY, ResourceType
from gpushare_simulator.harness.apiserver.routing import RequestInfo
from gpushare_simulator.harness.apiserver.store import Entry, Store
from gpushare_simulator.harness.apiserver.validation import Admission

JSON = dict[str, Any]
LOG: Final = logging.getLogger("gpushare_simulator.harness.apiserver")
_DUMPS: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
BOOTSTRAP_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")
YAML: Final = "application/yaml"
WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})
"""The verbs that change what the server stores (and carry a body, but for deletes)."""


@dataclass
class LoggedRequest:
    """One request as served: when it came and was answered, by whom, what, on which object.

    Times are monotonic seconds; ``done`` stays ``None`` for a watch, and for a request that
    was never answered.
    """

    at: float
    agent: str
    verb: str
    resource: str
    name: str
    done: float | None = None


@dataclass
class Response:
    """An HTTP answer: status code, body, content type and extra headers."""

    code: int
    body: bytes
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def of(
        cls, code: int, payload: Entry | JSON | str, warnings: list[str] | None = None
    ) -> Response:
        """Serialize an object, a dict or plain text."""
        if isinstance(payload, Entry):
            body, kind = payload.full, "application/json"
        elif isinstance(payload, str):
            body, kind = payload.encode(), "text/plain; charset=utf-8"
        else:
            body, kind = _DUMPS(payload).encode(), "application/json"
        headers = [("Warning", "299 - " + json.dumps(w)) for w in warnings or []]
        return cls(code, body, kind, headers)

    @classmethod
    def error(cls, error: errors.ApiError) -> Response:
        """Return the Status answer of an error."""
        response = cls.of(error.code, error.status())
        response.headers.extend(error.headers)
        return response


def _decode_body(info: RequestInfo, raw: bytes) -> object:
    if info.verb not in WRITE_VERBS:
        return None
    if not raw.strip():
        if info.verb in {"delete", "deletecollection"}:
            return {}
        raise errors.bad_request("the request body is empty")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        if info.verb == "patch":
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        kind = info.rtype.kind if info.rtype else "object"
        raise errors.bad_request(
            f"the object provided is unrecognized (must be of type {kind}): couldn't get "
            f"version/kind; json parse error: {exc}"
        ) from None


def _yaml_as_json(info: RequestInfo, raw: bytes, media_type: str) -> bytes:
    """Return a YAML create/update body as the JSON the server decodes instead (keys sorted)."""
    if media_type != YAML or info.verb not in {"create", "update"} or not raw.strip():
        return raw
    try:
        return rawjson.yaml_to_json(raw).encode()
    except yaml.YAMLError as exc:
        raise errors.bad_request(f"error converting YAML to JSON: {exc}") from None


def _delete_options(body: object, query: Mapping[str, str]) -> JSON:
    options: JSON = dict(body) if isinstance(body, dict) else {}
    if "gracePeriodSeconds" in query:
        try:
            options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
        except ValueError:
            raise errors.bad_request("gracePeriodSeconds must be an integer") from None
    return options


class ApiApp:
    """Store, admission and verbs of one fake API server, plus its request counter and faults."""

    def __init__(
        self,
        kube_version: str,
        *,
        validate: bool = True,
        watch_history: int = 1000,
        graceful_pods: bool = False,
        feature_gates: Mapping[str, bool] | None = None,
    ) -> None:
        self.kube_version = kube_version
        self.store = Store(REGISTRY.types, watch_history)
        self.admission = Admission(kube_version, enabled=validate, feature_gates=feature_gates)
        self.writer = Writer(self.store, self.admission)
        self.deleter = Deleter(self.writer, graceful_pods=graceful_pods)
        self.evictor = Evictor(self.deleter)
        self.faults = Faults()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.requests_by_agent: Counter[str] = Counter()
        self.requests_by_agent_verb: Counter[tuple[str, str, str]] = Counter()
        self.request_log: list[LoggedRequest] | None = None
        """Every request in order, while a benchmark asks for it (``None``: not recorded)."""
        self.internal_errors: list[str] = []
        self.stopping = threading.Event()
        self.bookmark_interval = 5.0
        self.address = ""
        self._count_lock = threading.Lock()
        namespaces = REGISTRY.resolve("namespaces")
        for name in BOOTSTRAP_NAMESPACES:
            self.writer.create(namespaces, "", {"metadata": {"name": name}})

    def count(self, info: RequestInfo, user_agent: str) -> LoggedRequest | None:
        """Record one request by (verb, resource), by User-Agent, and both; log it if asked.

        Returns the log's entry, for the caller to note when the request was answered.
        """
        with self._count_lock:
            self.requests[(info.verb, info.resource)] += 1
            self.requests_by_agent[user_agent] += 1
            self.requests_by_agent_verb[(user_agent, info.verb, info.resource)] += 1
            if self.request_log is None:
                return None
            entry = LoggedRequest(time.monotonic(), user_agent, info.verb, info.resource, info.name)
            self.request_log.append(entry)
            return entry

    def execute(self, info: RequestInfo, raw: bytes, content_type: str) -> Response:
        """Run one non-watch request; API errors become Status responses."""
        try:
            return self._execute(info, raw, content_type)
        except errors.ApiError as exc:
            return Response.error(exc)
        except Exception as exc:
            LOG.exception("fake API server failed on %s %s", info.method, info.path)
            self.internal_errors.append(f"{info.method} {info.path}: {traceback.format_exc()}")
            return Response.error(errors.internal(f"{type(exc).__name__}: {exc}"))

    def _execute(self, info: RequestInfo, raw: bytes, content_type: str) -> Response:
        if info.verb == "discovery":
            doc = discovery.discovery(REGISTRY, info.path, self.kube_version, self.address)
            return Response.of(200, doc)
        rtype = info.rtype
        assert rtype is not None  # noqa: S101 - routing guarantees it for API verbs
        media_type = content_type.split(";", maxsplit=1)[0].strip().lower()
        raw = _yaml_as_json(info, raw, media_type)
        body = _decode_body(info, raw)
        namespace = info.namespace or ""
        query = info.query
        dry_run = query.get("dryRun") == "All"
        validation = query.get("fieldValidation", "Strict")
        if info.verb == "get":
            return Response.of(200, get_object(self.store, rtype, namespace, info.name))
        if info.verb == "list":
            options = ListOptions.parse(rtype, query)
            items, rv, token, remaining = list_objects(self.store, rtype, info.namespace, options)
            return Response(200, list_body(rtype, items, rv, token, remaining))
        if info.verb == "create":
            raws = rawext.from_body(rtype, raw)
            return self._create(info, rtype, body, raws, dry_run=dry_run, validation=validation)
        if info.verb == "update":
            result = self.writer.update(
                rtype, namespace, info.name, body, subresource=info.subresource,
                dry_run=dry_run, field_validation=validation, raws=rawext.from_body(rtype, raw),
            )  # fmt: skip
        elif info.verb == "patch":
            if media_type not in patch.PATCH_TYPES:
                raise errors.unsupported_media_type(media_type)
            op_texts = rawext.op_values(rtype, raw) if media_type == patch.JSON_PATCH else {}
            result = self.writer.patch(
                rtype, namespace, info.name, body, media_type, subresource=info.subresource,
                dry_run=dry_run, field_validation=validation, op_texts=op_texts,
            )  # fmt: skip
        elif info.verb == "delete":
            deletion = _delete_options(body, query)
            result = self.deleter.delete(rtype, namespace, info.name, deletion, dry_run=dry_run)
        else:  # deletecollection
            selection = ListOptions.parse(rtype, query)
            listed = self.deleter.delete_collection(
                rtype, info.namespace, selection.labels, selection.fields,
                _delete_options(body, query), dry_run=dry_run,
            )  # fmt: skip
            return Response.of(200, listed)
        return Response.of(result.code, result.body, result.warnings)

    def _create(
        self,
        info: RequestInfo,
        rtype: ResourceType,
        body: object,
        raws: Raws,
        *,
        dry_run: bool,
        validation: str,
    ) -> Response:
        namespace = info.namespace or ""
        result: Result
        if info.subresource == "eviction":
            result = self.evictor.evict(namespace, info.name, body, dry_run=dry_run)
        elif info.subresource == "binding" or rtype.plural == "bindings":
            meta = body.get("metadata") if isinstance(body, dict) else None
            name = info.name or str((meta or {}).get("name", ""))
            result = binding.bind(self.store, namespace, name, body, dry_run=dry_run)
        else:
            result = self.writer.create(
                rtype, namespace, body, dry_run=dry_run, field_validation=validation, raws=raws
            )
        return Response.of(result.code, result.body, result.warnings)
