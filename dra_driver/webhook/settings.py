"""Settings of the admission webhook (``gpushare-dra webhook``, or hosted by the controller)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dra_driver.api import Backend
from dra_driver.settings import flag


@dataclasses.dataclass(frozen=True)
class WebhookSettings:
    """Admission webhook."""

    webhook_port: int = flag(9443, "HTTPS port for AdmissionReview requests")
    tls_cert_file: Path = flag(
        Path("/etc/gpushare/tls/tls.crt"), "serving certificate, reloaded when it changes"
    )
    tls_key_file: Path = flag(Path("/etc/gpushare/tls/tls.key"), "private key of the certificate")
    webhook_max_connections: int = flag(
        128, "connections served at once; more are closed at once (each holds a thread)"
    )
    webhook_request_timeout: float = flag(
        10.0, "seconds a client has to send a whole request once it started one"
    )
    backend: Backend = flag(
        Backend.HAMI_CORE,
        "the kubelet plugins' default backend (their --backend): how the webhook and the "
        "controller judge pods using claims whose config names no backend",
    )
    policy_gate: bool = flag(
        False,
        "label new ResourceClaimTemplates whose single request asks for this driver; the "
        "chart's MutatingAdmissionPolicy gates their pods without a review (gate.mode=policy)",
    )
    webhook_enabled: bool = flag(
        False,
        "controller only: also serve the admission webhook in this process "
        "(gpushare-dra webhook always serves it)",
    )
