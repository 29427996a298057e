"""Names that become file names, environment values and CDI device names, and their checks.

Claim UIDs, device names, share IDs and card UUIDs reach the node from the API server. Each one
is checked here, against a rule strict enough that it can never leave its place: no path
separator or ``..`` for a file name, no ``=``, ``,``, newline or NUL for an environment value,
nothing outside the CDI device-name alphabet for a CDI name. A refusal raises
:class:`UnsafeNameError`, whose message names the field, shows the value (JSON-quoted, so a
newline or NUL is visible) and states the rule::

    invalid claim UID "../etc": must contain only lowercase letters, digits and "-", and start
    and end with a letter or digit
"""

from __future__ import annotations

import re
from typing import Final

from dra_driver.api import DriverNames
from dra_driver.api.errors import quote

# Kubernetes object UIDs, DNS labels and the request names of a claim: all at most 63 chars.
MAX_LABEL_LENGTH: Final = 63
# A card UUID as NVML reports it is 40 characters; this only bounds what an env value may hold.
MAX_CARD_UUID_LENGTH: Final = 128

_LABEL: Final = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CARD_UUID: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9]*[A-Za-z0-9])?")
# CDI's parser.ValidateDeviceName: ASCII letters and digits first and last, "_-.:" between.
_CDI_DEVICE_NAME: Final = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.:]*[A-Za-z0-9])?")
# Anything a shell, an env file or a log line could misread: C0 controls (newline, NUL), DEL.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")

LABEL_RULE: Final = (
    'must contain only lowercase letters, digits and "-", and start and end with a letter or digit'
)
SHARE_ID_RULE: Final = (
    "must be a UUID in canonical lowercase form (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex digits)"
)
CARD_UUID_RULE: Final = (
    'must contain only letters, digits and "-", and start and end with a letter or digit'
)
CDI_DEVICE_NAME_RULE: Final = (
    'must contain only letters, digits, "_", "-", "." and ":", and start and end with a letter '
    "or digit"
)
ENV_VALUE_RULE: Final = 'must not contain "=", "," or control characters such as newline or NUL'


class UnsafeNameError(ValueError):
    """A name from outside breaks the rule that makes it safe to use on the node.

    ``field`` names what was checked (``"claim UID"``), ``value`` is the refused value and
    ``rule`` the sentence that says what is allowed.
    """

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        shown = quote(value) if isinstance(value, str) else repr(value)
        super().__init__(f"invalid {field} {shown}: {rule}")


def _string(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise UnsafeNameError(field, value, f"must be a string, not {type(value).__name__}")
    if not value:
        raise UnsafeNameError(field, value, "must not be empty")
    return value


def _label(field: str, value: object) -> str:
    text = _string(field, value)
    if len(text) > MAX_LABEL_LENGTH:
        raise UnsafeNameError(
            field, text, f"must have at most {MAX_LABEL_LENGTH} characters, has {len(text)}"
        )
    if not _LABEL.fullmatch(text):
        raise UnsafeNameError(field, text, LABEL_RULE)
    return text


def check_claim_uid(uid: object) -> str:
    """Return ``uid`` if it is a safe Kubernetes UID (a DNS label); raise UnsafeNameError."""
    return _label("claim UID", uid)


def check_device_name(name: object) -> str:
    """Return ``name`` if it is a DNS label, as a ResourceSlice device name is."""
    return _label("device name", name)


def check_request_name(name: object) -> str:
    """Return ``name`` if it is a DNS label, as a claim's request name is."""
    return _label("request name", name)


def check_share_id(share_id: object) -> str:
    """Return ``share_id`` if it is a canonical lowercase UUID, as the scheduler writes it."""
    text = _string("share ID", share_id)
    if not _UUID.fullmatch(text):
        raise UnsafeNameError("share ID", text, SHARE_ID_RULE)
    return text


def check_card_uuid(uuid: object) -> str:
    """Return ``uuid`` if it can stand in a comma-separated env value (``GPU-…``, ``MIG-…``)."""
    text = _string("card UUID", uuid)
    if len(text) > MAX_CARD_UUID_LENGTH:
        raise UnsafeNameError(
            "card UUID",
            text,
            f"must have at most {MAX_CARD_UUID_LENGTH} characters, has {len(text)}",
        )
    if not _CARD_UUID.fullmatch(text):
        raise UnsafeNameError("card UUID", text, CARD_UUID_RULE)
    return text


def check_env_value(field: str, value: object) -> str:
    """Return ``value`` if it may be one item of an environment value; raise otherwise.

    This is the last line of defence for values from outside: the typed checks above are
    stricter, and every value they pass also passes this one.
    """
    text = _string(field, value)
    if "=" in text or "," in text or _CONTROL.search(text):
        raise UnsafeNameError(field, text, ENV_VALUE_RULE)
    return text


def check_cdi_device_name(name: object) -> str:
    """Return ``name`` if CDI accepts it as a device name (``parser.ValidateDeviceName``)."""
    text = _string("CDI device name", name)
    if not _CDI_DEVICE_NAME.fullmatch(text):
        raise UnsafeNameError("CDI device name", text, CDI_DEVICE_NAME_RULE)
    return text


def cdi_device_name(claim_uid: str, device: str, share_id: str | None) -> str:
    """Return ``<claimUID>-<device>[-<shareID>]``, the per-claim CDI device name.

    docs/enforcement.md describes the spec these names appear in.
    """
    parts = [check_claim_uid(claim_uid), check_device_name(device)]
    if share_id is not None:
        parts.append(check_share_id(share_id))
    return check_cdi_device_name("-".join(parts))


def qualified_name(names: DriverNames, device_name: str) -> str:
    """Return the CDI ID ``<vendor>/<class>=<name>`` the kubelet hands to the runtime."""
    return f"{names.cdi_kind}={check_cdi_device_name(device_name)}"


def spec_file_name(names: DriverNames, claim_uid: str) -> str:
    """Return ``<vendor>-<class>_<claimUID>.json``, CDI's transient spec name for the claim."""
    return f"{names.cdi_vendor}-{names.cdi_class}_{check_claim_uid(claim_uid)}.json"
