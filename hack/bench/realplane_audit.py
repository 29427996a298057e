"""The API server's audit log, read back as requests per pod by client and verb.

kube-apiserver's own metrics count requests by verb and resource but not by client; its audit
log names the user of each request, so it tells the controller's requests from
kube-scheduler's and kube-controller-manager's. Metadata level, one line per finished request
(the log backend writes each as it happens, so a byte offset marks a moment). Its timestamps also
give each pod's path hop by hop: when each component's request about the pod or its claim
finished, counted from the pod's create.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from benchlib import percentile

from dra_driver.k8s.timestamps import epoch_seconds

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

    def _events(self, since: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Yield (client, ``verb resource[/sub]``, event) for every request since ``since``."""
        with self.path.open("rb") as log:
            log.seek(since)
            for line in log:
                event = json.loads(line)
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", event.get("requestURI", "?").split("?")[0])
                if ref.get("subresource"):
                    resource += "/" + ref["subresource"]
                user = event.get("user", {}).get("username", "")
                yield (
                    client_of(user, event.get("userAgent", "")),
                    f"{event['verb']} {resource}",
                    event,
                )

    def per_pod(self, since: int, pods: int) -> dict[str, dict[str, float]]:
        """Return requests since ``since`` per pod: client -> ``verb resource[/sub]`` -> count."""
        counts: Counter[tuple[str, str]] = Counter()
        for who, what, _ in self._events(since):
            counts[who, what] += 1
        table: dict[str, dict[str, float]] = {}
        for (who, what), count in sorted(counts.items()):
            table.setdefault(who, {})[what] = round(count / pods, 2)
        return table

    def timeline(
        self, since: int, namespace: str, pod_of_claim: Mapping[str, str]
    ) -> dict[str, dict[str, float]]:
        """Return each hop of the pods' way to their binding, in milliseconds from the create.

        ``client verb resource[/sub]`` -> p50 and p99 of when that request finished, over the
        pods of ``namespace`` that made it; ``pod_of_claim`` names each claim's pod. Only the
        first such request of a pod counts, and nothing after its binding (its deletion).
        """
        paths: dict[str, dict[str, tuple[float, float]]] = {}
        for who, what, event in self._events(since):
            ref = event.get("objectRef") or {}
            if ref.get("namespace") != namespace:
                continue
            name = ref.get("name", "")  # a claim's create has none yet: its name is generated
            pod = name if ref.get("resource") == "pods" else pod_of_claim.get(name)
            if pod:
                span = (
                    epoch_seconds(event["requestReceivedTimestamp"]),
                    epoch_seconds(event["stageTimestamp"]),
                )
                paths.setdefault(pod, {}).setdefault(f"{who} {what}", span)
        hops: dict[str, list[float]] = {}
        for path in paths.values():
            created = next(
                (span[0] for what, span in path.items() if what.endswith(" create pods")), None
            )
            bound = next(
                (span[1] for what, span in path.items() if what.endswith("pods/binding")), None
            )
            if created is None or bound is None:
                continue
            for what, (_, finished) in path.items():
                if finished <= bound:
                    hops.setdefault(what, []).append((finished - created) * 1000)
        ordered = sorted(hops.items(), key=lambda item: percentile(item[1], 50))
        return {
            what: {
                "p50_ms": round(percentile(times, 50), 1),
                "p99_ms": round(percentile(times, 99), 1),
            }
            for what, times in ordered
        }
