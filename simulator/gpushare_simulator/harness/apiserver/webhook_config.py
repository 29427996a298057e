"""``admissionregistration.k8s.io/v1`` webhook configurations: defaulting and validation.

Mirrors ``pkg/apis/admissionregistration/v1/defaults.go`` and
``pkg/apis/admissionregistration/validation/validation.go`` for Mutating- and
ValidatingWebhookConfigurations, with the server's field paths and messages (the create rules; an
update is validated the same way, without the real server's leniency for stored objects that
predate a rule).
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import urlsplit

from gpushare_simulator.harness.apiserver import errors, formats
from gpushare_simulator.harness.apiserver.dra_common import messages
from gpushare_simulator.harness.apiserver.errors import FieldError
from gpushare_simulator.harness.apiserver.selectors import operator_errors

JSON = dict[str, Any]
REVIEW_VERSIONS: Final = ("v1", "v1beta1")
SIDE_EFFECTS: Final = ("None", "NoneOnDryRun")
FAILURE_POLICIES: Final = ("Fail", "Ignore")
MATCH_POLICIES: Final = ("Equivalent", "Exact")
REINVOCATION_POLICIES: Final = ("IfNeeded", "Never")
OPERATIONS: Final = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
SCOPES: Final = ("*", "Cluster", "Namespaced")
MAX_TIMEOUT: Final = 30
MAX_PORT: Final = 65535
_DNS1035_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_RE: Final = re.compile(f"^{_DNS1035_FMT}$")
_DNS1035_MSG: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_URL_FORM: Final = "; desired format: https://host[/path]"


def set_defaults(obj: JSON, *, mutating: bool) -> None:
    """Apply ``SetDefaults_{Mutating,Validating}Webhook``, ``_Rule`` and ``_ServiceReference``."""
    for hook in obj.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", 10)
        if mutating:
            hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def validate_mutating(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidateMutatingWebhookConfiguration`` (metadata is checked by the generic rules)."""
    return _configuration(obj, mutating=True)


def validate_validating(obj: JSON, _minor: int) -> list[FieldError]:
    """``ValidateValidatingWebhookConfiguration`` (metadata is checked by the generic rules)."""
    return _configuration(obj, mutating=False)


def _configuration(obj: JSON, *, mutating: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    names: set[str] = set()
    for index, hook in enumerate(obj.get("webhooks") or []):
        path = f"webhooks[{index}]"
        if not isinstance(hook, dict):
            continue
        errs += _webhook(hook, path, mutating=mutating)
        errs += _review_versions(
            hook.get("admissionReviewVersions"), f"{path}.admissionReviewVersions"
        )
        name = str(hook.get("name") or "")
        if name and name in names:
            errs.append(errors.duplicate(f"{path}.name", name))
        names.add(name)
    return errs


def _one_of(hook: JSON, key: str, path: str, allowed: tuple[str, ...]) -> list[FieldError]:
    value = hook.get(key)
    if value is not None and value not in allowed:
        return [errors.not_supported(f"{path}.{key}", value, allowed)]
    return []


def _webhook(hook: JSON, path: str, *, mutating: bool) -> list[FieldError]:
    errs = _fully_qualified(str(hook.get("name") or ""), f"{path}.name")
    for index, rule in enumerate(hook.get("rules") or []):
        if isinstance(rule, dict):
            errs += _rule(rule, f"{path}.rules[{index}]")
    errs += _one_of(hook, "failurePolicy", path, FAILURE_POLICIES)
    errs += _one_of(hook, "matchPolicy", path, MATCH_POLICIES)
    if hook.get("sideEffects") is None:
        errs.append(
            errors.required(f"{path}.sideEffects", "must specify one of None, NoneOnDryRun")
        )
    errs += _one_of(hook, "sideEffects", path, SIDE_EFFECTS)
    timeout = hook.get("timeoutSeconds")
    if isinstance(timeout, int) and not 1 <= timeout <= MAX_TIMEOUT:
        detail = "the timeout value must be between 1 and 30 seconds"
        errs.append(errors.invalid(f"{path}.timeoutSeconds", timeout, detail))
    for key in ("namespaceSelector", "objectSelector"):
        errs += operator_errors(hook.get(key), f"{path}.{key}")
    if mutating:
        errs += _one_of(hook, "reinvocationPolicy", path, REINVOCATION_POLICIES)
    return errs + _client_config(hook.get("clientConfig") or {}, f"{path}.clientConfig")


def _fully_qualified(name: str, path: str) -> list[FieldError]:
    """``utilvalidation.IsFullyQualifiedName``."""
    if not name:
        return [errors.required(path)]
    problems = formats.dns1123_subdomain(name)
    if problems:
        return [errors.invalid(path, name, ",".join(problems))]
    if len(name.split(".")) < 3:  # noqa: PLR2004 - three segments, as the server wants
        detail = "should be a domain with at least three segments separated by dots"
        return [errors.invalid(path, name, detail)]
    return []


def _list(rule: JSON, key: str, path: str, what: str) -> list[FieldError]:
    values = rule.get(key) or []
    if not values:
        return [errors.required(f"{path}.{key}")]
    if len(values) > 1 and "*" in values:
        detail = f"if '*' is present, must not specify other {what}"
        return [errors.invalid(f"{path}.{key}", values, detail)]
    return []


def _rule(rule: JSON, path: str) -> list[FieldError]:
    """``validateRuleWithOperations`` (subresources allowed)."""
    errs = _list(rule, "operations", path, "operations")
    for index, operation in enumerate(rule.get("operations") or []):
        if operation not in OPERATIONS:
            errs.append(errors.not_supported(f"{path}.operations[{index}]", operation, OPERATIONS))
    errs += _list(rule, "apiGroups", path, "API groups")
    errs += _list(rule, "apiVersions", path, "API versions")
    for index, version in enumerate(rule.get("apiVersions") or []):
        if not version:
            errs.append(errors.required(f"{path}.apiVersions[{index}]"))
    errs += _resources(rule.get("resources") or [], f"{path}.resources")
    if rule.get("scope") is not None and rule["scope"] not in SCOPES:
        errs.append(errors.not_supported(f"{path}.scope", rule["scope"], SCOPES))
    return errs


def _resources(resources: list[str], path: str) -> list[FieldError]:
    """``validateResources``: wildcard combinations the server refuses."""
    if not resources:
        return [errors.required(path)]
    errs: list[FieldError] = []
    wild_sub: set[str] = set()
    wild_res: set[str] = set()
    plain = False
    for index, entry in enumerate(resources):
        if not entry:
            errs.append(errors.required(f"{path}[{index}]"))
            continue
        if "/" not in entry:
            plain = entry != "*"
            continue
        res, sub = entry.split("/", 1)
        if res in wild_sub:
            detail = f"if '{res}/*' is present, must not specify {entry}"
            errs.append(errors.invalid(f"{path}[{index}]", entry, detail))
        if sub in wild_res:
            detail = f"if '*/{sub}' is present, must not specify {entry}"
            errs.append(errors.invalid(f"{path}[{index}]", entry, detail))
        if sub == "*":
            wild_sub.add(res)
        if res == "*":
            wild_res.add(sub)
    if len(resources) > 1 and "*/*" in resources:
        detail = "if '*/*' is present, must not specify other resources"
        errs.append(errors.invalid(path, resources, detail))
    if "*" in resources and plain:
        detail = "if '*' is present, must not specify other resources without subresources"
        errs.append(errors.invalid(path, resources, detail))
    return errs


def _client_config(config: JSON, path: str) -> list[FieldError]:
    url, service = config.get("url"), config.get("service")
    if (url is None) == (service is None):
        return [errors.required(path, "exactly one of url or service is required")]
    if url is not None:
        return _url(str(url), f"{path}.url")
    errs: list[FieldError] = []
    service = service if isinstance(service, dict) else {}
    port = service.get("port", 443)
    if not isinstance(port, int) or not 1 <= port <= MAX_PORT:
        detail = "port is not valid: must be between 1 and 65535, inclusive"
        errs.append(errors.invalid(f"{path}.service.port", port, detail))
    where = service.get("path")
    if where and where != "/" and not str(where).startswith("/"):
        errs.append(errors.invalid(f"{path}.service.path", where, "must start with a '/'"))
    return errs


def _url(url: str, path: str) -> list[FieldError]:
    """``webhook.ValidateWebhookURL`` with ``forceHttps``."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return [errors.required(path, f"url must be a valid URL: {exc}{_URL_FORM}")]
    errs = []
    if parts.scheme != "https":
        detail = "'https' is the only allowed URL scheme" + _URL_FORM
        errs.append(errors.invalid(path, parts.scheme, detail))
    if not parts.netloc:
        errs.append(errors.invalid(path, "", "host must be provided" + _URL_FORM))
    if "@" in parts.netloc:
        user = parts.netloc.rsplit("@", 1)[0]
        errs.append(errors.invalid(path, user, "user information is not permitted in the URL"))
    if parts.fragment:
        detail = "fragments are not permitted in the URL"
        errs.append(errors.invalid(path, parts.fragment, detail))
    if parts.query:
        detail = "query parameters are not permitted in the URL"
        errs.append(errors.invalid(path, parts.query, detail))
    return errs


def _review_versions(versions: object, path: str) -> list[FieldError]:
    """``validateAdmissionReviewVersions``: at least one version this server can send."""
    if not isinstance(versions, list) or not versions:
        return [errors.required(path, "must specify one of v1, v1beta1")]
    errs: list[FieldError] = []
    seen: set[str] = set()
    for index, version in enumerate(versions):
        text = str(version)
        if text in seen:
            errs.append(errors.invalid(f"{path}[{index}]", text, "duplicate version"))
            continue
        seen.add(text)
        problems = []
        if len(text) > formats.DNS1123_LABEL_MAX:
            problems.append(formats.max_len_error(formats.DNS1123_LABEL_MAX))
        if not _DNS1035_RE.match(text):
            problems.append(formats.regex_error(_DNS1035_MSG, _DNS1035_FMT, "my-name", "abc-123"))
        errs += messages(f"{path}[{index}]", text, problems)
    if not seen.intersection(REVIEW_VERSIONS):
        detail = "must include at least one of v1, v1beta1"
        errs.append(errors.invalid(path, [str(v) for v in versions], detail))
    return errs
