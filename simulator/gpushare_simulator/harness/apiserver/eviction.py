"""``pods/eviction``: a pod delete that honours PodDisruptionBudgets, as kube-apiserver 1.36 does.

The order is the real ``EvictionREST.Create``'s. A pod that is Pending, terminal, being deleted
(or not bound) is deleted without looking at budgets. Otherwise every budget of its namespace
that selects it is found: more than one is a 500; one whose controller has not caught up with
its spec (``status.observedGeneration`` behind ``metadata.generation``), or that allows no
disruption now, is a 429; else one disruption is debited from its ``status`` (a status write,
the pod recorded under ``disruptedPods``). An unready pod is spared the debit when its budget is
healthy anyway (or says ``unhealthyPodEvictionPolicy: AlwaysAllow``). Then the pod gets the
``DisruptionTarget`` condition, where the delete's preconditions are checked first (so a UID
that does not match is a 409 only after the budget was debited, as on a real server), and is
deleted as a DELETE with the eviction's ``deleteOptions`` would delete it (gracefully, when
the server deletes bound pods gracefully). Success is ``201`` with a ``Status``.

The eviction itself goes to no admission webhook (as ``pods/binding`` does not, here), and the
server's own pod update and delete inside it go to none either, as on a real server; the budget's
status write does, as the real server's loopback client's does.
"""

from __future__ import annotations

from typing import Any, Final

from gpushare_simulator.harness.apiserver import budgets, errors, strategies
from gpushare_simulator.harness.apiserver.deletes import Deleter
from gpushare_simulator.harness.apiserver.operations import Result
from gpushare_simulator.harness.apiserver.resources import POLICY, REGISTRY
from gpushare_simulator.harness.apiserver.store import Entry, guaranteed

JSON = dict[str, Any]
PODS: Final = REGISTRY.resolve("pods")
BUDGETS: Final = REGISTRY.resolve("poddisruptionbudgets")
API_VERSIONS: Final = ("policy/v1", "policy/v1beta1")
ATTEMPTS: Final = 20
"""The steps of the server's ``EvictionsRetry``; the fake retries at once, not every 500 ms."""
MAX_DISRUPTED_PODS: Final = 2000
VIOLATION: Final = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE: Final = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)
SUCCESS: Final = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
_IGNORED_PHASES: Final = frozenset({"Pending", "Succeeded", "Failed"})
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})


def _options(body: object, namespace: str, name: str, *, dry_run: bool) -> JSON:
    """Check an Eviction body; return its ``deleteOptions`` with the request's dry run in them."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body must be an Eviction object")
    kind = str(body.get("kind") or "Eviction")
    api_version = str(body.get("apiVersion") or "policy/v1")
    if kind != "Eviction":
        raise errors.bad_request(
            f'{kind} in version "{api_version}" cannot be handled as a Eviction: the object '
            "provided is unrecognized (must be of type Eviction)"
        )
    if api_version not in API_VERSIONS:
        raise errors.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            "version (policy/v1)"
        )
    meta, options = body.get("metadata") or {}, body.get("deleteOptions") or {}
    if not isinstance(meta, dict) or not isinstance(options, dict):
        raise errors.bad_request("metadata and deleteOptions must be objects")
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if meta.get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = dict(options)
    if dry_run and not options.get("dryRun"):
        options["dryRun"] = ["All"]
    return options


def _phase(pod: JSON) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _ignores_budgets(pod: JSON) -> bool:
    """``canIgnorePDB``: such a pod disrupts nothing more by going (unbound ones are Pending)."""
    bound = bool((pod.get("spec") or {}).get("nodeName"))
    deleting = bool(pod["metadata"].get("deletionTimestamp"))
    return _phase(pod) in _IGNORED_PHASES or deleting or not bound


def _enforces_version(pod: JSON) -> bool:
    """``shouldEnforceResourceVersion``: a live pod must not change (become ready) meanwhile."""
    return _phase(pod) not in _TERMINAL and not pod["metadata"].get("deletionTimestamp")


def _ready(pod: JSON) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _spares_unready(budget: JSON) -> bool:
    """Whether an unready pod goes without a debit: the budget is met without it anyway."""
    if (budget.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    status = budget.get("status") or {}
    desired = int(status.get("desiredHealthy") or 0)
    return desired > 0 and int(status.get("currentHealthy") or 0) >= desired


def _has_version(options: JSON) -> bool:
    return bool((options.get("preconditions") or {}).get("resourceVersion"))


def _with_version(options: JSON, version: str) -> JSON:
    preconditions = {**(options.get("preconditions") or {}), "resourceVersion": version}
    return {**options, "preconditions": preconditions}


def _dry(options: JSON) -> bool:
    return "All" in (options.get("dryRun") or [])


def too_many_requests(cause: str, retry_after: int = 0) -> errors.ApiError:
    """Return the 429 of a budget that does not allow the eviction now, with its cause."""
    details: JSON = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    headers: tuple[tuple[str, str], ...] = ()
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers = (("Retry-After", str(retry_after)),)
    return errors.ApiError(429, "TooManyRequests", VIOLATION, details, headers)


def _processing(name: str) -> errors.ApiError:
    cause = f"The disruption budget {name} is still being processed by the server."
    return too_many_requests(cause, retry_after=10)


class Evictor:
    """Evictions on top of a :class:`Deleter` (and its writer, for budgets' status)."""

    def __init__(self, deleter: Deleter) -> None:
        self.deleter = deleter
        self.writer = deleter.writer
        self.store = deleter.store

    def evict(self, namespace: str, name: str, body: object, *, dry_run: bool = False) -> Result:
        """POST ``pods/<name>/eviction``: delete the pod if its disruption budget allows."""
        options = _options(body, namespace, name, dry_run=dry_run)
        last: errors.ApiError | None = None
        for _ in range(ATTEMPTS):
            current = self.store.get(PODS, namespace, name)
            if current is None:
                raise PODS.not_found(name)
            if not _ignores_budgets(current.obj):
                return self._guarded(current, options)
            deletion = options
            if _enforces_version(current.obj) and not _has_version(options):
                deletion = _with_version(options, str(current.rv))
            try:
                self._delete(namespace, name, deletion)
            except errors.ApiError as exc:
                # Conflicts are retried on the fresh pod unless the caller pinned a version.
                if exc.code != 409 or _has_version(options):  # noqa: PLR2004
                    raise
                last = exc
                continue
            return Result(201, {**SUCCESS, "code": 201})
        assert last is not None  # noqa: S101 - the loop ran and every round conflicted
        raise last

    def _guarded(self, current: Entry, options: JSON) -> Result:
        """Evict a pod that budgets protect: check and debit its one budget, then delete."""
        pod = current.obj
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        labels = pod["metadata"].get("labels") or {}
        entries, _ = self.store.snapshot(BUDGETS, namespace)
        covering = [entry for entry in entries if budgets.selects(entry.obj, labels)]
        if len(covering) > 1:
            raise errors.ApiError(500, "", MULTIPLE)
        spared = False
        budget_name = ""
        if covering:
            budget_name = covering[0].obj["metadata"]["name"]
            spared = not _ready(pod) and _spares_unready(covering[0].obj)
            if not spared:
                self._debit(covering[0], name, dry_run=_dry(options))
        deletion = _with_version(options, str(current.rv)) if spared else options
        try:
            self._delete(namespace, name, deletion)
        except errors.ApiError as exc:
            # The unready pod changed since (became ready?): the client should try again.
            if exc.code == 409 and spared and not _has_version(options):  # noqa: PLR2004
                raise _processing(budget_name) from None
            raise
        return Result(201, {**SUCCESS, "code": 201})

    def _debit(self, entry: Entry, pod_name: str, *, dry_run: bool) -> None:
        """``checkAndDecrement``, retried on a fresh budget while its status write conflicts."""
        last: errors.ApiError | None = None
        for _ in range(ATTEMPTS):
            budget = entry.copy()
            meta, status = budget["metadata"], budget.setdefault("status", {})
            name = str(meta["name"])
            if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
                raise _processing(name)
            allowed = int(status.get("disruptionsAllowed") or 0)
            if allowed < 0:
                detail = "pdb disruptions allowed is negative"
                raise errors.forbidden_request(POLICY, "poddisruptionbudget", name, detail)
            if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
                detail = (
                    "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
                )
                raise errors.forbidden_request(POLICY, "poddisruptionbudget", name, detail)
            if allowed == 0:
                desired, healthy = status.get("desiredHealthy", 0), status.get("currentHealthy", 0)
                raise too_many_requests(
                    f"The disruption budget {name} needs {desired} healthy pods and has "
                    f"{healthy} currently"
                )
            now = strategies.timestamp()
            status["disruptionsAllowed"] = allowed - 1
            if allowed == 1:
                budgets.set_allowed_condition(status, now)
            if dry_run:
                return
            status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: now}
            try:
                self.writer.update(BUDGETS, meta["namespace"], name, budget, subresource="status")
            except errors.ApiError as exc:
                if exc.reason != "Conflict":
                    raise
                last = exc
                fresh = self.store.get(BUDGETS, meta["namespace"], name)
                if fresh is None:
                    raise BUDGETS.not_found(name) from None
                entry = fresh
                continue
            return
        assert last is not None  # noqa: S101 - the loop ran and every round conflicted
        raise last

    def _delete(self, namespace: str, name: str, options: JSON) -> None:
        """``addConditionAndDeletePod``: mark the pod as a disruption target, then delete it."""
        options = self._mark(namespace, name, options)
        self.deleter.delete(PODS, namespace, name, options, dry_run=_dry(options), webhooks=False)

    def _mark(self, namespace: str, name: str, options: JSON) -> JSON:
        """Give the pod ``DisruptionTarget``; return ``options`` pinned to its new version.

        The preconditions are checked here, in the server's words, even for a dry run (which
        writes nothing): the real server's delete checks them with the same message.
        """
        wanted, dry_run = options.get("preconditions") or {}, _dry(options)

        def attempt() -> Entry | None:
            current = self.store.get(PODS, namespace, name)
            if current is None:
                raise PODS.not_found(name)
            meta = current.obj["metadata"]
            for key, label, tail in (
                ("uid", "UID", "deleted and then recreated"),
                ("resourceVersion", "ResourceVersion", "modified"),
            ):
                if wanted.get(key) and wanted[key] != meta.get(key):
                    raise errors.conflict(
                        "", "Pod", name,
                        f"the {label} in the precondition ({wanted[key]}) does not match the "
                        f"{label} in record ({meta.get(key)}). The object might have been {tail}",
                    )  # fmt: skip
            pod = current.copy()
            if dry_run or not _set_disruption_target(pod):
                return current
            return self.store.replace(PODS, pod, current.rv, remove=False, raws=current.raws)

        marked = guaranteed(attempt, f"pods {name}")
        if _has_version(options):
            return _with_version(options, str(marked.rv))
        return options


def _set_disruption_target(pod: JSON) -> bool:
    """``UpdatePodCondition`` with the eviction's condition; whether the pod changed."""
    status = pod.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    reason = {"reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}
    for index, condition in enumerate(conditions):
        if condition.get("type") != "DisruptionTarget":
            continue
        if condition.get("status") == "True" and all(
            condition.get(k) == v for k, v in reason.items()
        ):
            return False
        kept = condition.get("lastTransitionTime") if condition.get("status") == "True" else None
        conditions[index] = _target(kept or strategies.timestamp(), reason)
        return True
    conditions.append(_target(strategies.timestamp(), reason))
    return True


def _target(moment: str, reason: dict[str, str]) -> JSON:
    return {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": moment, **reason}
