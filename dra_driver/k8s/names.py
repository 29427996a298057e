"""Kubernetes' rules for object names: DNS-1123 labels and subdomains."""

from __future__ import annotations

import re
from typing import Final

MAX_SUBDOMAIN: Final = 253
MAX_LABEL: Final = 63
DNS_LABEL: Final = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN: Final = re.compile(rf"{DNS_LABEL.pattern}(?:\.{DNS_LABEL.pattern})*")
SUBDOMAIN_RULE: Final = (
    "a DNS subdomain: at most 253 characters of lowercase letters, digits, '-' and '.', "
    "starting and ending with a letter or digit"
)
LABEL_RULE: Final = (
    "a DNS label: at most 63 characters of lowercase letters, digits and '-', starting and "
    "ending with a letter or digit"
)


def is_dns_subdomain(text: str) -> bool:
    """Whether ``text`` may name a Pod, a ResourceClaim or most other objects."""
    return len(text) <= MAX_SUBDOMAIN and DNS_SUBDOMAIN.fullmatch(text) is not None


def is_dns_label(text: str) -> bool:
    """Whether ``text`` may name a Namespace."""
    return len(text) <= MAX_LABEL and DNS_LABEL.fullmatch(text) is not None
