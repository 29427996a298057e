"""Name and value format checks with the exact messages of k8s.io/apimachinery validation."""

from __future__ import annotations

import re
from typing import Final

DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT: Final = DNS1123_LABEL_FMT + r"(\." + DNS1123_LABEL_FMT + ")*"
QUALIFIED_NAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT: Final = "(" + QUALIFIED_NAME_FMT + ")?"
C_IDENTIFIER_FMT: Final = "[A-Za-z_][A-Za-z0-9_]*"

_LABEL_RE: Final = re.compile(f"^{DNS1123_LABEL_FMT}$")
_SUBDOMAIN_RE: Final = re.compile(f"^{DNS1123_SUBDOMAIN_FMT}$")
_QUALIFIED_RE: Final = re.compile(f"^{QUALIFIED_NAME_FMT}$")
_LABEL_VALUE_RE: Final = re.compile(f"^{LABEL_VALUE_FMT}$")
_C_IDENTIFIER_RE: Final = re.compile(f"^{C_IDENTIFIER_FMT}$")
_UUID_RE: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_SEMVER_RE: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253
QUALIFIED_NAME_MAX: Final = 63

_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)
_QUALIFIED_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_C_IDENTIFIER_MSG: Final = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_'"
)


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """Return apimachinery's ``RegexError`` text (its double space included)."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len_error(length: int) -> str:
    """Return apimachinery's ``MaxLenError`` text."""
    return f"must be no more than {length} characters"


def dns1123_label(value: str) -> list[str]:
    """Return the problems of ``value`` as an RFC 1123 label (``IsDNS1123Label``)."""
    errors = []
    if len(value) > DNS1123_LABEL_MAX:
        errors.append(max_len_error(DNS1123_LABEL_MAX))
    if not _LABEL_RE.match(value):
        if _SUBDOMAIN_RE.match(value):
            errors.append("must not contain dots")
        else:
            errors.append(regex_error(_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errors


def dns1123_subdomain(value: str) -> list[str]:
    """Return the problems of ``value`` as an RFC 1123 subdomain (``IsDNS1123Subdomain``)."""
    errors = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _SUBDOMAIN_RE.match(value):
        errors.append(regex_error(_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errors


def qualified_name(value: str) -> list[str]:
    """Return the problems of ``value`` as a qualified name (``IsQualifiedName``)."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:  # noqa: PLR2004 - prefix and name
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + msg for msg in dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name "
            + regex_error(_QUALIFIED_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errors.append("name part " + max_len_error(QUALIFIED_NAME_MAX))
    if not _QUALIFIED_RE.match(name):
        errors.append(
            "name part "
            + regex_error(_QUALIFIED_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def label_value(value: str) -> list[str]:
    """Return the problems of ``value`` as a label value (``IsValidLabelValue``)."""
    errors = []
    if len(value) > QUALIFIED_NAME_MAX:
        errors.append(max_len_error(QUALIFIED_NAME_MAX))
    if not _LABEL_VALUE_RE.match(value):
        errors.append(
            regex_error(_LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345")
        )
    return errors


def c_identifier(value: str) -> list[str]:
    """Return the problems of ``value`` as a C identifier (``IsCIdentifier``)."""
    if _C_IDENTIFIER_RE.match(value):
        return []
    return [regex_error(_C_IDENTIFIER_MSG, C_IDENTIFIER_FMT, "my_name", "MY_NAME", "MyName")]


def is_uuid(value: str) -> bool:
    """Whether ``value`` is a lowercase UUID in 8-4-4-4-12 form."""
    return bool(_UUID_RE.match(value))


def is_semver(value: str) -> bool:
    """Whether ``value`` is a semver.org 2.0.0 version."""
    return bool(_SEMVER_RE.match(value))
