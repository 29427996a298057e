"""The API server's audit log, read back as requests per pod by client and verb.

kube-apiserver's own metrics count requests by verb and resource but not by client; its audit
log names the user of each request, so it tells the controller's requests from
kube-scheduler's and kube-controller-manager's. Metadata level, one line per finished request
(the log backend writes each as it happens, so a byte offset marks a moment).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Final

POLICY: Final = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
"""


def audit_flags(work: Path) -> list[str]:
    """Return kube-apiserver's flags for an audit log at ``work``/audit.log, every request."""
    policy = work / "audit-policy.yaml"
    work.mkdir(parents=True, exist_ok=True)
    policy.write_text(POLICY)
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={work / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ]


def client_of(username: str, agent: str) -> str:
    """Return a short name for the component behind ``username`` (and its User-Agent).

    The harness runs kube-scheduler with the admin's credentials, as the benchmark itself:
    the User-Agent tells them apart.
    """
    if username.startswith("system:serviceaccount:kube-system:"):
        return "kcm/" + username.rsplit(":", 1)[1].removesuffix("-controller")
    if username.startswith("system:serviceaccount:"):
        return username.rsplit(":", 1)[1]  # the driver's: its ServiceAccount's name
    if username.startswith("system:node:"):
        return "kubelet"
    known = {"system:kube-scheduler": "kube-scheduler", "system:apiserver": "kube-apiserver",
             "system:kube-controller-manager": "kcm"}  # fmt: skip
    if username in known:
        return known[username]
    return "kube-scheduler" if agent.startswith("kube-scheduler/") else "bench"


class AuditLog:
    """Reads requests from the audit log between two marks."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """Return the present end of the log."""
        return self.path.stat().st_size if self.path.exists() else 0

    def per_pod(self, since: int, pods: int) -> dict[str, dict[str, float]]:
        """Return requests since ``since`` per pod: client -> ``verb resource[/sub]`` -> count."""
        counts: Counter[tuple[str, str]] = Counter()
        with self.path.open("rb") as log:
            log.seek(since)
            for line in log:
                event = json.loads(line)
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", event.get("requestURI", "?").split("?")[0])
                if ref.get("subresource"):
                    resource += "/" + ref["subresource"]
                user = event.get("user", {}).get("username", "")
                who = client_of(user, event.get("userAgent", ""))
                counts[who, f"{event['verb']} {resource}"] += 1
        table: dict[str, dict[str, float]] = {}
        for (who, what), count in sorted(counts.items()):
            table.setdefault(who, {})[what] = round(count / pods, 2)
        return table
