"""The write verbs: create, update and patch, with the real server's preconditions.

Every update is a compare-and-swap on the stored resourceVersion, retried (like the server's
``GuaranteedUpdate``) when a concurrent writer got in first and the request carried no
resourceVersion precondition. No-op writes do not bump the resourceVersion.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from dra_driver.k8s import objects
from gpushare_simulator.harness.apiserver import errors, patch, rawext, rawjson, strategies
from gpushare_simulator.harness.apiserver.admission import Webhooks
from gpushare_simulator.harness.apiserver.claim_status import IMMUTABLE
from gpushare_simulator.harness.apiserver.rawext import EMPTY, Raws
from gpushare_simulator.harness.apiserver.resources import REGISTRY, ResourceType
from gpushare_simulator.harness.apiserver.store import Entry, Store, guaranteed
from gpushare_simulator.harness.apiserver.validation import Admission
from gpushare_simulator.harness.apiserver.webhook_match import Request

JSON = dict[str, Any]
NAMESPACES: Final = REGISTRY.resolve("namespaces")
EMPTY_TEXTS: Final[Mapping[int, str]] = MappingProxyType({})


@dataclass
class Result:
    """What a verb answers: HTTP code, an object (stored ``Entry`` or a dict) and warnings."""

    code: int
    body: Entry | JSON
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> JSON:
        """Return the body as a private dict."""
        return (
            self.body.copy() if isinstance(self.body, Entry) else json.loads(json.dumps(self.body))
        )


def _same(old: JSON, new: JSON) -> bool:
    def strip(obj: JSON) -> JSON:
        meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "resourceVersion"}
        return {**obj, "metadata": meta}

    return strip(old) == strip(new)


def _deleting_done(obj: JSON) -> bool:
    meta = objects.metadata(obj)
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


class Writer:
    """Create/update/patch against a :class:`Store`, with admission and admission webhooks."""

    def __init__(self, store: Store, admission: Admission) -> None:
        self.store = store
        self.admission = admission
        self.smp = patch.StrategicMerge(admission.schemas)
        self.webhooks = Webhooks(store, admission.drop_unknown)

    def _body(self, rtype: ResourceType, body: object, namespace: str) -> JSON:
        if not isinstance(body, dict):
            raise errors.bad_request(
                f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: '
                "json: cannot unmarshal into Go value: the body must be a JSON object"
            )
        obj: JSON = {k: rawjson.strip_nulls(v) for k, v in body.items() if v is not None}
        kind, api_version = (
            obj.setdefault("kind", rtype.kind),
            obj.setdefault("apiVersion", rtype.api_version),
        )
        if (kind, api_version) != (rtype.kind, rtype.api_version):
            raise errors.bad_request(
                f'{kind} in version "{api_version}" cannot be handled as a {rtype.kind}: '
                f"the object provided is unrecognized (must be of type {rtype.kind})"
            )
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rtype.namespaced:
            if not meta.get("namespace"):
                meta["namespace"] = namespace
            elif meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
        else:
            meta.pop("namespace", None)
        return obj

    def check_namespace(self, rtype: ResourceType, namespace: str, name: str) -> None:
        """NamespaceLifecycle admission: the namespace exists and is not terminating."""
        if not rtype.namespaced:
            return
        entry = self.store.get(NAMESPACES, "", namespace)
        if entry is None:
            raise errors.not_found("", "namespaces", namespace)
        if entry.obj["metadata"].get("deletionTimestamp"):
            detail = (
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated"
            )
            raise errors.forbidden_request(rtype.group, rtype.plural, name, detail)

    def create(
        self,
        rtype: ResourceType,
        namespace: str,
        body: object,
        *,
        dry_run: bool = False,
        field_validation: str = "Strict",
        seed: bool = False,
        raws: Raws = EMPTY,
    ) -> Result:
        """POST: a new object with uid, creationTimestamp and resourceVersion; 409 if taken.

        ``raws`` are the texts of the body's RawExtension values, by path.
        """
        obj = self._body(rtype, body, namespace)
        meta = obj["metadata"]
        if meta.pop("resourceVersion", None) and not seed:
            raise errors.internal("resourceVersion should not be set on objects to be created")
        # Admission runs before a name is generated; the server's messages name the prefix then.
        shown = meta.get("name") or meta.get("generateName") or "Unknown"
        self.check_namespace(rtype, namespace, str(shown))
        request = Request.of("CREATE", rtype, namespace, obj, dry_run=dry_run)
        mutated, hook_warnings = self.webhooks.mutate(request)
        obj = self._body(rtype, mutated, namespace)
        meta = obj["metadata"]
        generated = not meta.get("name") and bool(meta.get("generateName"))
        for _ in range(8):
            if generated:
                meta["name"] = strategies.generate_name(str(meta["generateName"]))
            attempt = json.loads(json.dumps(obj))
            strategies.prepare_create(rtype, attempt, keep_status=seed)
            settled = rawext.settle(rtype, attempt, raws, EMPTY, status_write=False)
            warnings = hook_warnings + self.admission.admit(
                rtype, attempt, field_validation=field_validation
            )
            warnings += self.webhooks.validate(request.with_object(attempt))
            if dry_run:
                return Result(201, Entry(rtype, attempt, settled), warnings)
            try:
                return Result(201, self.store.create(rtype, attempt, settled), warnings)
            except errors.ApiError as exc:
                if not (generated and exc.reason == "AlreadyExists"):
                    raise
        raise errors.internal("could not generate a unique name")

    @staticmethod
    def _identity(obj: JSON, name: str) -> None:
        body_name = obj["metadata"].get("name") or ""
        if body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )

    def commit(
        self,
        rtype: ResourceType,
        current: Entry,
        new: JSON,
        *,
        subresource: str = "",
        field_validation: str = "Strict",
        dry_run: bool = False,
        raws: Raws = EMPTY,
    ) -> Result | None:
        """Admit and compare-and-swap ``new`` over ``current``; ``None`` if someone got first.

        ``raws`` are the RawExtension texts the write brought (see :func:`rawext.settle`).
        """
        status_write = subresource == "status"
        settled = rawext.settle(rtype, new, raws, current.raws, status_write=status_write)
        meta, old_meta = new["metadata"], current.obj["metadata"]
        if (
            rtype.generation
            and not status_write
            and meta.get("generation") == old_meta.get("generation")
            and rawext.spec_bytes_changed(current.raws, settled)
        ):
            meta["generation"] = int(old_meta.get("generation", 0)) + 1
        warnings = self.admission.admit(
            rtype, new, current.obj, subresource=subresource, field_validation=field_validation,
            raw_errors=rawext.immutable_errors(rtype, current.obj, new, current.raws, settled),
        )  # fmt: skip
        namespace = str(current.obj["metadata"].get("namespace") or "")
        request = Request.of(
            "UPDATE", rtype, namespace, new, current.obj, subresource=subresource, dry_run=dry_run
        )
        warnings += self.webhooks.validate(request)
        remove = _deleting_done(new)
        if not remove and _same(current.obj, new) and dict(settled) == dict(current.raws):
            return Result(200, current, warnings)
        if dry_run:
            return Result(200, Entry(rtype, new, settled), warnings)
        entry = self.store.replace(rtype, new, current.rv, remove=remove, raws=settled)
        if entry is None:
            return None
        if remove:
            self.after_removal(rtype, entry)
        return Result(200, entry, warnings)

    def update(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        body: object,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "Strict",
        raws: Raws = EMPTY,
    ) -> Result:
        """PUT: replace the object; a stale ``metadata.resourceVersion`` is a 409 Conflict.

        ``raws`` are the texts of the body's RawExtension values, by path.
        """
        obj = self._body(rtype, body, namespace)
        self._identity(obj, name)
        meta = obj["metadata"]

        def revise(current: Entry) -> tuple[JSON, Raws]:
            stored = current.obj["metadata"]
            if meta.get("resourceVersion") and meta["resourceVersion"] != stored["resourceVersion"]:
                raise rtype.conflict(name)
            if meta.get("uid") and meta["uid"] != stored["uid"]:
                raise rtype.conflict(
                    name,
                    f"Precondition failed: UID in precondition: {meta['uid']}, "
                    f"UID in object meta: {stored['uid']}",
                )
            return obj, raws

        def missing() -> Result:
            if not rtype.create_on_update or subresource:
                raise rtype.not_found(name)
            return self.create(
                rtype, namespace, obj, dry_run=dry_run, field_validation=field_validation, raws=raws
            )

        return self._rewrite(
            rtype, namespace, name, revise, missing=missing,
            subresource=subresource, field_validation=field_validation, dry_run=dry_run,
        )  # fmt: skip

    def _rewrite(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        revise: Callable[[Entry], tuple[JSON, Raws]],
        *,
        missing: Callable[[], Result] | None = None,
        subresource: str,
        field_validation: str,
        dry_run: bool,
    ) -> Result:
        """Write ``revise(stored)`` over the object, retried; ``missing`` answers if there is none.

        ``revise`` raises where a precondition fails. Without ``missing``, no object is a 404.
        """

        def attempt() -> Result | None:
            current = self.store.get(rtype, namespace, name)
            if current is None:
                if missing is None:
                    raise rtype.not_found(name)
                return missing()
            obj, raws = revise(current)
            new, hook_warnings = self._mutate(rtype, current, obj, subresource, dry_run=dry_run)
            result = self.commit(
                rtype, current, new, subresource=subresource,
                field_validation=field_validation, dry_run=dry_run, raws=raws,
            )  # fmt: skip
            if result is not None:
                result.warnings[:0] = hook_warnings
            return result

        return guaranteed(attempt, f"{rtype.key} {name}")

    def _mutate(
        self, rtype: ResourceType, current: Entry, obj: JSON, subresource: str, *, dry_run: bool
    ) -> tuple[JSON, list[str]]:
        """Run the mutating webhooks on an update's object, then the update strategy."""
        namespace = str(current.obj["metadata"].get("namespace") or "")
        request = Request.of(
            "UPDATE", rtype, namespace, json.loads(json.dumps(obj)), current.obj,
            subresource=subresource, dry_run=dry_run,
        )  # fmt: skip
        mutated, warnings = self.webhooks.mutate(request)
        new = self._body(rtype, mutated, namespace)
        self._identity(new, str(current.obj["metadata"]["name"]))
        return strategies.prepare_update(rtype, current.copy(), new, subresource), warnings

    def patch(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        body: object,
        content_type: str,
        *,
        subresource: str = "",
        dry_run: bool = False,
        field_validation: str = "Strict",
        op_texts: Mapping[int, str] = EMPTY_TEXTS,
    ) -> Result:
        """PATCH in any of the three formats; a ``metadata.resourceVersion`` is a precondition.

        ``op_texts`` are the texts of a JSON patch's operation values, by operation index.
        """

        def revise(current: Entry) -> tuple[JSON, Raws]:
            patched, raws = self._apply(rtype, current, body, content_type, op_texts)
            obj = self._body(rtype, patched, namespace)
            self._identity(obj, name)
            wanted = obj["metadata"].get("resourceVersion")
            if wanted and wanted != current.obj["metadata"]["resourceVersion"]:
                raise rtype.conflict(name)
            uid = obj["metadata"].get("uid")
            if uid and uid != current.obj["metadata"]["uid"]:
                # A patch names no precondition on the UID: it changes it, which is refused.
                raise rtype.invalid(name, [errors.invalid("metadata.uid", uid, IMMUTABLE)])
            return obj, raws

        return self._rewrite(
            rtype, namespace, name, revise,
            subresource=subresource, field_validation=field_validation, dry_run=dry_run,
        )  # fmt: skip

    def _apply(
        self,
        rtype: ResourceType,
        current: Entry,
        body: object,
        content_type: str,
        op_texts: Mapping[int, str],
    ) -> tuple[object, Raws]:
        """Patch a copy of ``current``; return it with the texts of its RawExtension values.

        JSON and merge patches work on the object as JSON (kept texts compacted, marked so they
        travel with their values); strategic merge works on maps, re-encoding every value.
        """
        original = current.copy()
        patched: object
        if content_type == patch.STRATEGIC:
            patched = self.smp.apply(original, body, self.admission.schemas.kind_schema(rtype))
            return patched, rawext.collect(rtype, patched, rawext.mapped_text)
        marked = rawext.wrap(rtype, original, current.raws)
        if content_type == patch.MERGE:
            if not isinstance(body, dict):
                raise errors.bad_request("merge patch must be a JSON object")
            patched = patch.merge_patch(marked, body)
        elif content_type == patch.JSON_PATCH:
            patched = patch.json_patch(marked, body, rawext.op_hook(rtype, op_texts))
        else:
            raise errors.unsupported_media_type(content_type)
        return patched, rawext.collect(rtype, patched, rawext.patched_text)

    def after_removal(self, rtype: ResourceType, entry: Entry) -> None:
        """Finish a terminating namespace once its last object is gone (namespace controller)."""
        if not rtype.namespaced:
            return
        namespace = entry.obj["metadata"].get("namespace", "")
        self.finalize_namespace(namespace)

    def finalize_namespace(self, namespace: str) -> None:
        """Remove a terminating namespace that holds no objects any more."""
        current = self.store.get(NAMESPACES, "", namespace)
        if current is None or not current.obj["metadata"].get("deletionTimestamp"):
            return
        for rtype in REGISTRY.types:
            if rtype.namespaced and self.store.count(rtype, namespace):
                return
        try:
            self.store.delete(NAMESPACES, ("", namespace), current.rv)
        except errors.ApiError:
            return
