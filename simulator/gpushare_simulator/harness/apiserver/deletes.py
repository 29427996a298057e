"""DELETE and DELETE-collection: preconditions, finalizers, graceful pods, namespace teardown."""

from __future__ import annotations

from typing import Any, Final

from gpushare_simulator.harness.apiserver import errors, strategies
from gpushare_simulator.harness.apiserver.operations import NAMESPACES, Result, Writer
from gpushare_simulator.harness.apiserver.resources import REGISTRY, ResourceType
from gpushare_simulator.harness.apiserver.selectors import FieldSelector, LabelSelector
from gpushare_simulator.harness.apiserver.store import Entry, guaranteed
from gpushare_simulator.harness.apiserver.webhook_match import Request

JSON = dict[str, Any]
IMMORTAL_NAMESPACES: Final = frozenset({"default", "kube-system", "kube-public"})


def _success_status(rtype: ResourceType, name: str, uid: str) -> JSON:
    """Return the ``Status`` a delete answers for kinds that do not return the deleted object."""
    details: JSON = {"name": name}
    if rtype.group:
        details["group"] = rtype.group
    details.update({"kind": rtype.plural, "uid": uid})
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


class Deleter:
    """Deletes with the real server's semantics on top of a :class:`Writer`."""

    def __init__(self, writer: Writer, *, graceful_pods: bool = False) -> None:
        self.writer = writer
        self.store = writer.store
        self.graceful_pods = graceful_pods

    def _preconditions(self, rtype: ResourceType, current: Entry, options: JSON) -> None:
        wanted = options.get("preconditions") or {}
        meta = current.obj["metadata"]
        for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            if wanted.get(key) and wanted[key] != meta.get(key):
                raise rtype.conflict(
                    meta["name"],
                    f"Precondition failed: {label} in precondition: {wanted[key]}, "
                    f"{label} in object meta: {meta.get(key)}",
                )

    def _pod_grace(self, pod: JSON, options: JSON) -> int:
        """Seconds of graceful termination this delete asks for (0: delete at once)."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if not self.graceful_pods or not spec.get("nodeName"):
            return 0
        if status.get("phase") in {"Succeeded", "Failed"}:
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", 30)
        return max(0, int(grace))

    def delete(
        self,
        rtype: ResourceType,
        namespace: str,
        name: str,
        options: JSON | None = None,
        *,
        dry_run: bool = False,
        webhooks: bool = True,
    ) -> Result:
        """Delete one object: at once, or mark it (finalizers, pod grace) and let it finish.

        ``webhooks=False`` is a delete the server makes itself, inside another request (the
        eviction subresource's): admission ran for that request, not for this delete.
        """
        options = options or {}
        if rtype.key == "namespaces" and name in IMMORTAL_NAMESPACES:
            detail = "this namespace may not be deleted"
            raise errors.forbidden_request("", "namespaces", name, detail)

        def attempt() -> Result | None:
            current = self.store.get(rtype, namespace, name)
            if current is None:
                raise rtype.not_found(name)
            self._preconditions(rtype, current, options)
            meta = current.obj["metadata"]
            marked = bool(meta.get("deletionTimestamp"))
            marked_grace = int(meta.get("deletionGracePeriodSeconds", 0))
            grace = self._pod_grace(current.obj, options) if rtype.key == "pods" else 0
            if rtype.key == "namespaces" or grace > 0 or meta.get("finalizers"):
                if marked and (rtype.key == "namespaces" or marked_grace <= grace):
                    return Result(200, current)
                if webhooks:
                    self._admit(rtype, namespace, current, options, dry_run=dry_run)
                return self._mark(rtype, current, grace, dry_run=dry_run)
            if webhooks:
                self._admit(rtype, namespace, current, options, dry_run=dry_run)
            if dry_run:
                return Result(200, current)
            entry = self.store.delete(rtype, (namespace, name), current.rv)
            if entry is None:
                return None
            self.writer.after_removal(rtype, entry)
            if rtype.delete_returns_object:
                return Result(200, entry)
            return Result(200, _success_status(rtype, name, meta["uid"]))

        return guaranteed(attempt, f"{rtype.key} {name}")

    def _admit(
        self, rtype: ResourceType, namespace: str, current: Entry, options: JSON, *, dry_run: bool
    ) -> None:
        """Send the delete to the admission webhooks (``oldObject`` set, ``object`` null)."""
        request = Request.of(
            "DELETE", rtype, namespace, None, current.obj, dry_run=dry_run, options=options
        )
        self.writer.webhooks.mutate(request)
        self.writer.webhooks.validate(request)

    def _mark(
        self, rtype: ResourceType, current: Entry, grace: int, *, dry_run: bool
    ) -> Result | None:
        obj = current.copy()
        strategies.mark_deleting(obj, grace)
        if rtype.key == "namespaces":
            obj.setdefault("status", {})["phase"] = "Terminating"
        if dry_run:
            return Result(200, Entry(rtype, obj, current.raws))
        entry = self.store.replace(rtype, obj, current.rv, remove=False, raws=current.raws)
        if entry is None:
            return None
        if rtype.key == "namespaces":
            self._empty_namespace(current.obj["metadata"]["name"])
            self.writer.finalize_namespace(current.obj["metadata"]["name"])
            return Result(
                200, self.store.get(NAMESPACES, "", current.obj["metadata"]["name"]) or entry
            )
        return Result(200, entry)

    def _empty_namespace(self, namespace: str) -> None:
        """Delete everything in a terminating namespace, as the namespace controller does."""
        for rtype in REGISTRY.types:
            if not rtype.namespaced:
                continue
            entries, _ = self.store.snapshot(rtype, namespace)
            for entry in entries:
                try:
                    self.delete(
                        rtype, namespace, entry.obj["metadata"]["name"], {"gracePeriodSeconds": 0}
                    )
                except errors.ApiError:
                    continue

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        options: JSON | None = None,
        *,
        dry_run: bool = False,
    ) -> JSON:
        """DELETE on a collection: delete every matching object; answer the list of them."""
        entries, _ = self.store.snapshot(rtype, namespace)
        items = []
        for entry in entries:
            if not (labels.matches(entry.obj) and fields.matches(entry.obj)):
                continue
            meta = entry.obj["metadata"]
            try:
                result = self.delete(
                    rtype, meta.get("namespace", ""), meta["name"], options, dry_run=dry_run
                )
            except errors.ApiError as exc:
                if exc.code == 404:  # noqa: PLR2004 - gone meanwhile
                    continue
                raise
            items.append(result.as_dict())
        return {
            "kind": rtype.list_kind,
            "apiVersion": rtype.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
            "items": items,
        }
