"""Admission webhooks: calling the configured webhooks on a write, and what their answers do.

Follows the dispatchers of ``k8s.io/apiserver/pkg/admission/plugin/webhook`` (which webhooks
match is :mod:`~gpushare_simulator.harness.apiserver.webhook_match`, the HTTPS call
:mod:`~gpushare_simulator.harness.apiserver.webhook_client`):

- mutating webhooks run first, configurations in name order and webhooks in order within one,
  each seeing the previous one's result; their ``JSONPatch`` is applied with the server's JSON
  patch, the result decoded leniently (unknown fields dropped) and then validated as any write;
  a ``reinvocationPolicy: IfNeeded`` webhook is called once more if a later one changed the
  object; validating webhooks run after schema and semantic validation, on the final object;
- a denial fails the request with the webhook's ``status`` (its code, or 400 when that is below
  400) and the message ``admission webhook "<name>" denied the request: <message>`` (``...
  denied the request without explanation`` when it gave no message or reason);
- a webhook that cannot be called, times out or answers nonsense fails the request with a 500
  ``Internal error occurred: failed calling webhook "<name>": <reason>`` under
  ``failurePolicy: Fail``, and is skipped (and logged) under ``Ignore``; a patch that does not
  apply is a 500 whatever the policy;
- ``response.warnings`` become ``Warning: 299 - "<text>"`` headers of a successful write.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Final

from gpushare_simulator.harness.apiserver import (
    errors,
    patch,
    strategies,
    webhook_client,
    webhook_match,
)
from gpushare_simulator.harness.apiserver.resources import REGISTRY, ResourceType
from gpushare_simulator.harness.apiserver.store import Store
from gpushare_simulator.harness.apiserver.webhook_config import (
    MAX_TIMEOUT,
    REVIEW_VERSIONS,
    SIDE_EFFECTS,
)
from gpushare_simulator.harness.apiserver.webhook_match import LOG, Hook, Request

JSON = dict[str, Any]
MUTATING: Final = REGISTRY.resolve("mutatingwebhookconfigurations.admissionregistration.k8s.io")
VALIDATING: Final = REGISTRY.resolve("validatingwebhookconfigurations.admissionregistration.k8s.io")
DEFAULT_USER: Final = {"username": "system:admin", "groups": ["system:masters"]}


class Webhooks:
    """The admission webhooks of one fake API server, read from its store on every request."""

    def __init__(self, store: Store, drop_unknown: Callable[[ResourceType, JSON], None]) -> None:
        self.store = store
        self.drop_unknown = drop_unknown
        self.service_urls: dict[tuple[str, str], str] = {}
        self.user_info: JSON = copy.deepcopy(DEFAULT_USER)

    def _review(self, request: Request, uid: str, version: str) -> JSON:
        rtype = request.rtype
        kind = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        resource = {"group": rtype.group, "version": rtype.version, "resource": rtype.plural}
        sub = {"subResource": request.subresource} if request.subresource else {}
        body: JSON = {"uid": uid, "kind": kind, "resource": resource, **sub}
        body |= {"requestKind": kind, "requestResource": resource}
        body |= {"requestSubResource": request.subresource} if request.subresource else {}
        body |= {"name": request.name} if request.name else {}
        body |= {"namespace": request.namespace} if request.namespace else {}
        body |= {"operation": request.operation, "userInfo": self.user_info}
        body |= {"object": request.obj, "oldObject": request.old, "dryRun": request.dry_run}
        body["options"] = request.options
        return {
            "kind": "AdmissionReview",
            "apiVersion": f"admission.k8s.io/{version}",
            "request": body,
        }

    def _call(
        self, hook: Hook, request: Request, warnings: list[str], *, mutating: bool
    ) -> list[Any]:
        """Call one webhook; return its JSON patch (``[]`` if none, or if it failed open)."""
        spec = hook.spec
        if request.dry_run and spec.get("sideEffects") not in SIDE_EFFECTS:
            raise errors.bad_request(f'admission webhook "{hook.name}" does not support dry run')
        try:
            ops = self._exchange(hook, request, warnings, mutating=mutating)
        except webhook_client.CallError as exc:
            message = f'failed calling webhook "{hook.name}": {exc}'
            if spec.get("failurePolicy") == "Ignore":
                LOG.warning("Failed calling webhook, failing open %s: %s", hook.name, message)
                return []
            LOG.warning("Failed calling webhook, failing closed %s: %s", hook.name, message)
            raise errors.internal(message) from None
        return ops

    def _exchange(
        self, hook: Hook, request: Request, warnings: list[str], *, mutating: bool
    ) -> list[Any]:
        spec = hook.spec
        versions = [v for v in spec.get("admissionReviewVersions") or [] if v in REVIEW_VERSIONS]
        if not versions:
            raise webhook_client.CallError(
                "could not create admission objects: webhook does not accept known "
                "AdmissionReview versions (v1, v1beta1)"
            )
        uid = str(uuid.uuid4())
        body = json.dumps(self._review(request, uid, versions[0])).encode()
        timeout = min(max(int(spec.get("timeoutSeconds") or 10), 1), MAX_TIMEOUT)
        review = webhook_client.post(
            spec.get("clientConfig") or {}, body, timeout, self.service_urls
        )
        answer = webhook_client.verify(review, uid, versions[0], mutating=mutating)
        warnings.extend(answer.warnings)
        if not answer.allowed:
            raise denied(hook.name, answer.status)
        if not answer.patch:
            return []
        undecodable = "received undecodable patch in webhook response: "
        try:
            ops = json.loads(answer.patch)
        except (ValueError, UnicodeDecodeError) as exc:
            raise webhook_client.CallError(f"{undecodable}{exc}") from None
        if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
            detail = "json: cannot unmarshal into Go value of type jsonpatch.Patch"
            raise webhook_client.CallError(undecodable + detail)
        if ops and answer.patch_type != "JSONPatch":
            raise webhook_client.CallError(f'unsupported patch type "{answer.patch_type}"')
        return ops

    def _apply(self, hook: Hook, obj: JSON | None, ops: list[Any], rtype: ResourceType) -> JSON:
        if obj is None:
            raise errors.internal(
                f'admission webhook "{hook.name}" attempted to modify the object, which is not '
                "supported for this operation"
            )
        try:
            patched = patch.json_patch(obj, ops)
        except errors.ApiError as exc:
            raise errors.internal(exc.message) from None
        if not isinstance(patched, dict):
            raise errors.internal(
                f'admission webhook "{hook.name}" patched the object into a non-object'
            )
        self.drop_unknown(rtype, patched)  # the server decodes the patched object leniently
        return patched

    def mutate(self, request: Request) -> tuple[JSON | None, list[str]]:
        """Run the mutating webhooks; return the (possibly patched) object and their warnings."""
        hooks = webhook_match.hooks(self.store, MUTATING, request)
        warnings: list[str] = []
        obj = request.obj
        if not hooks:
            return obj, warnings
        if obj is not None:  # webhooks see the object as decoded, defaults applied
            obj = copy.deepcopy(obj)
            strategies.default_fields(request.rtype, obj)
        invoked: set[str] = set()  # IfNeeded webhooks called since the object last changed
        reinvoke: set[str] = set()
        for round_ in (0, 1):
            for hook in hooks:
                if round_ and hook.uid not in reinvoke:
                    continue
                current = replace(request, obj=obj)
                if not webhook_match.should_call(self.store, hook, current):
                    continue
                ops = self._call(hook, current, warnings, mutating=True)
                patched = self._apply(hook, obj, ops, request.rtype) if ops else obj
                if patched != obj:
                    reinvoke |= invoked
                    invoked.clear()
                    obj = patched
                if hook.spec.get("reinvocationPolicy") == "IfNeeded":
                    invoked.add(hook.uid)
            if not reinvoke:
                break
        return obj, warnings

    def validate(self, request: Request) -> list[str]:
        """Run the validating webhooks (in order, not concurrently); return their warnings."""
        warnings: list[str] = []
        for hook in webhook_match.hooks(self.store, VALIDATING, request):
            if webhook_match.should_call(self.store, hook, request):
                self._call(hook, request, warnings, mutating=False)
        return warnings


def denied(webhook: str, status: JSON | None) -> errors.ApiError:
    """``webhookerrors.ToStatusErr``: the webhook's Status, its message prefixed."""
    result = status or {}
    code = result.get("code")
    code = code if isinstance(code, int) and code >= 400 else 400  # noqa: PLR2004
    reason, message = str(result.get("reason") or ""), str(result.get("message") or "")
    prefix = f'admission webhook "{webhook}" denied the request'
    text = (
        f"{prefix}: {message or reason}" if message or reason else f"{prefix} without explanation"
    )
    details = result.get("details")
    return errors.ApiError(code, reason, text, details if isinstance(details, dict) else None)
