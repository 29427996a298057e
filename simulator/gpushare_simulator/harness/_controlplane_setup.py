"""Pure pieces of the real control plane: versions, feature gates, command lines, PKI, kubeconfig.

Everything here is computed without starting a process (except :func:`generate_pki`, which runs
the ``openssl`` command), so the unit tests check it on any machine. The public names are
re-exported by :mod:`gpushare_simulator.harness.controlplane`.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

MIN_VERSION: Final = (1, 34)  # resource.k8s.io/v1 is served from 1.34
NEWEST_KNOWN_VERSION: Final = (1, 37)  # later releases reuse 1.37's gate set
SERVICE_CIDR: Final = "10.0.0.0/24"
SA_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
_VERSION: Final = re.compile(r"\bv?(\d+)\.(\d+)(?:\.\d+)?")
_OPENSSL_TIMEOUT_S: Final = 60
_CERT_DAYS: Final = "3"

# (gate, first release that knows it, first release in which it is GA and locked, or None).
# A gate unknown to a release is refused by it ("unrecognized feature gate"); a locked gate
# cannot be turned off and disappears a few releases later, so it is left out from its locking
# release on: it is on anyway. Source: each gate's version history in Kubernetes' feature gate
# definitions (pkg/features); tests/README.md shows the resulting sets.
_EVER: Final = (1, 0)
_GATES: Final[tuple[tuple[str, tuple[int, int], tuple[int, int] | None], ...]] = (
    ("DynamicResourceAllocation", _EVER, (1, 35)),  # GA 1.34, locked 1.35, removed 1.38
    ("DRAConsumableCapacity", _EVER, None),  # alpha 1.34-1.35, beta (on) 1.36-1.37
    ("DRADeviceBindingConditions", _EVER, None),  # alpha 1.34-1.35, beta (on) 1.36-1.37
    ("DRAResourceClaimDeviceStatus", _EVER, (1, 37)),  # beta (on) 1.33-1.36, GA locked 1.37
    ("DRADeviceTaints", _EVER, None),  # alpha 1.33-1.35, beta (on) 1.36, GA 1.37
    ("DRADeviceTaintRules", (1, 35), None),  # alpha 1.35, beta (off) 1.36, GA 1.37
)
# Where DeviceTaintRule is served when its gate is on but its API version is not by default.
_TAINT_RULE_API: Final = {(1, 35): "v1alpha3", (1, 36): "v1beta2"}

_OPENSSL_CONFIG: Final = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[serving]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,\
DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""


class ControlPlaneError(RuntimeError):
    """The real control plane cannot be set up, started or reached; the message says why."""


def parse_kube_version(text: str) -> tuple[int, int]:
    """Return (major, minor) from ``kube-apiserver --version`` output or a hint like ``1.36``."""
    match = _VERSION.search(text)
    if match is None:
        raise ControlPlaneError(f"cannot read a Kubernetes version from {text.strip()!r}")
    return int(match.group(1)), int(match.group(2))


def feature_gates(version: tuple[int, int]) -> dict[str, bool]:
    """Return the feature gates to set on every component of Kubernetes ``version``.

    All DRA features the driver uses are turned on: consumable capacity, and binding conditions
    with device status (without them the API server drops ``allocationTimestamp``). Gates that
    are GA and locked in ``version`` are left out. Versions newer than 1.37 get 1.37's set.
    """
    if version < MIN_VERSION:
        shown = ".".join(map(str, version))
        raise ControlPlaneError(
            f"Kubernetes {shown} is too old: the driver needs resource.k8s.io/v1, served from 1.34"
        )
    return {
        gate: True
        for gate, since, locked in _GATES
        if since <= version and (locked is None or version < locked)
    }


def runtime_config(version: tuple[int, int]) -> str:
    """Return kube-apiserver's ``--runtime-config``: ``resource.k8s.io/v1``, and DeviceTaintRule.

    Before 1.37 DeviceTaintRule lives in a pre-release API version, which is off by default.
    """
    config = ["resource.k8s.io/v1=true"]
    if version in _TAINT_RULE_API:
        config.append(f"resource.k8s.io/{_TAINT_RULE_API[version]}/devicetaintrules=true")
    return ",".join(config)


def gates_flag(gates: dict[str, bool]) -> str:
    """Render gates as the value of ``--feature-gates``."""
    return ",".join(f"{gate}={str(on).lower()}" for gate, on in gates.items())


@dataclass(frozen=True)
class Pki:
    """The files of the throwaway PKI.

    A CA, one serving certificate (for every component), one admin client certificate and the
    service-account signing key pair.
    """

    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_public_key: Path

    @classmethod
    def in_directory(cls, directory: Path) -> Pki:
        """Return where :func:`generate_pki` puts each file in ``directory``."""
        return cls(
            ca_cert=directory / "ca.crt",
            ca_key=directory / "ca.key",
            serving_cert=directory / "serving.crt",
            serving_key=directory / "serving.key",
            admin_cert=directory / "admin.crt",
            admin_key=directory / "admin.key",
            sa_key=directory / "sa.key",
            sa_public_key=directory / "sa.pub",
        )


def generate_pki(directory: Path, openssl: str | None = None) -> Pki:
    """Create the control plane's PKI in ``directory`` with the openssl CLI.

    That is a CA, a serving certificate for 127.0.0.1 (and the in-cluster names of the API
    server), an admin client certificate in group ``system:masters`` and a service-account
    key pair. Keys are RSA 2048, certificates valid for 3 days. Raise
    :class:`ControlPlaneError` with openssl's output when it is missing or fails.
    """
    tool = openssl or shutil.which("openssl")
    if tool is None:
        raise ControlPlaneError(
            "the openssl command is needed to create the control plane's certificates "
            "(Debian/Ubuntu: apt-get install openssl)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki.in_directory(directory)
    config = directory / "openssl.cnf"
    config.write_text(_OPENSSL_CONFIG)
    new_key: list[str | Path] = ["-newkey", "rsa:2048", "-nodes", "-config", config]
    days: list[str | Path] = ["-days", _CERT_DAYS]
    ca_subject = "/CN=gpushare-e2e-ca"
    _openssl(tool, "req", "-x509", *new_key, "-extensions", "ca", *days, "-subj", ca_subject,
             "-keyout", pki.ca_key, "-out", pki.ca_cert)  # fmt: skip
    for cert, key, subject, extensions in (
        (pki.serving_cert, pki.serving_key, "/CN=kube-apiserver", "serving"),
        (pki.admin_cert, pki.admin_key, "/O=system:masters/CN=gpushare-e2e-admin", "client"),
    ):
        request = cert.with_suffix(".csr")
        _openssl(tool, "req", "-new", *new_key, "-subj", subject, "-keyout", key, "-out", request)
        serial = str(secrets.randbits(63))
        _openssl(tool, "x509", "-req", "-in", request, "-CA", pki.ca_cert, "-CAkey", pki.ca_key,
                 "-set_serial", serial, *days, "-extfile", config, "-extensions", extensions,
                 "-out", cert)  # fmt: skip
    _openssl(tool, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
             "-out", pki.sa_key)  # fmt: skip
    _openssl(tool, "pkey", "-in", pki.sa_key, "-pubout", "-out", pki.sa_public_key)
    for key in (pki.ca_key, pki.serving_key, pki.admin_key, pki.sa_key):
        key.chmod(0o600)
    return pki


def _openssl(tool: str, *args: str | Path) -> None:
    command = [tool, *map(str, args)]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=_OPENSSL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ControlPlaneError(f"openssl {args[0]} failed: {error}") from error
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()
        raise ControlPlaneError(f"openssl {args[0]} exited {result.returncode}: {output}")


def kubeconfig_yaml(url: str, pki: Pki, cert: Path | None = None, key: Path | None = None) -> str:
    """Return a kubeconfig for the API server at ``url`` with a client certificate (admin's)."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": url, "certificate-authority": str(pki.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(cert or pki.admin_cert),
                        "client-key": str(key or pki.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        },
        sort_keys=False,
    )


@dataclass(frozen=True)
class Layout:
    """Where everything of one control plane lives: ports on 127.0.0.1 and paths in work_dir."""

    work_dir: Path
    etcd_client_port: int
    etcd_peer_port: int
    apiserver_port: int
    controller_manager_port: int
    scheduler_port: int

    @property
    def url(self) -> str:
        """The API server's base URL."""
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig, also used by the controller manager and the scheduler."""
        return self.work_dir / "admin.kubeconfig"

    @property
    def pki(self) -> Pki:
        """The certificate and key files."""
        return Pki.in_directory(self.work_dir / "pki")


def component_commands(
    binaries: Mapping[str, Path],
    layout: Layout,
    gates: dict[str, bool],
    *,
    etcd_cluster_flag: bool = True,
    runtime: str = "resource.k8s.io/v1=true",
) -> dict[str, list[str]]:
    """Return the command line of each component in ``binaries``, in start order (etcd first).

    Choices (documented in tests/README.md): authorization ``Node,RBAC`` as in a real cluster
    (the harness's admin is in ``system:masters``, so RBAC never stands in its way, and tests
    may impersonate the driver's service accounts to check its RBAC); admission plugins are the
    defaults plus ``NodeRestriction``, minus ``TaintNodesByCondition``; the controller
    manager's ``node-lifecycle-controller`` is off. There are no kubelets: Node objects are
    created through the API and would otherwise be tainted not-ready and then unreachable.
    """
    pki, gate_flag = layout.pki, f"--feature-gates={gates_flag(gates)}"
    etcd_client = f"http://127.0.0.1:{layout.etcd_client_port}"
    etcd_peer = f"http://127.0.0.1:{layout.etcd_peer_port}"
    serving = [f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}"]
    delegated = [
        f"--kubeconfig={layout.kubeconfig}",
        f"--authentication-kubeconfig={layout.kubeconfig}",
        f"--authorization-kubeconfig={layout.kubeconfig}",
        "--bind-address=127.0.0.1",
        *serving,
        "--leader-elect=false",
        gate_flag,
        "--v=2",
    ]
    commands = {
        "etcd": [
            str(binaries["etcd"]),
            "--name=e2e",
            f"--data-dir={layout.work_dir / 'etcd'}",
            f"--listen-client-urls={etcd_client}",
            f"--advertise-client-urls={etcd_client}",
            f"--listen-peer-urls={etcd_peer}",
            f"--initial-advertise-peer-urls={etcd_peer}",
            # A one-member embed of etcd's server (as the project's test binaries are) has
            # no such flag, and needs none.
            *([f"--initial-cluster=e2e={etcd_peer}"] if etcd_cluster_flag else []),
            "--log-level=warn",
        ],
        "kube-apiserver": [
            str(binaries["kube-apiserver"]),
            "--advertise-address=127.0.0.1",
            "--bind-address=127.0.0.1",
            f"--secure-port={layout.apiserver_port}",
            f"--etcd-servers={etcd_client}",
            *serving,
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki.sa_public_key}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--disable-admission-plugins=TaintNodesByCondition",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            f"--runtime-config={runtime}",
            gate_flag,
            "--profiling=false",
            "--v=2",
        ],
        "kube-controller-manager": [
            str(binaries.get("kube-controller-manager", "")),
            *delegated,
            f"--secure-port={layout.controller_manager_port}",
            "--controllers=*,resourceclaim-controller,-node-lifecycle-controller",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            f"--cluster-signing-cert-file={pki.ca_cert}",
            f"--cluster-signing-key-file={pki.ca_key}",
        ],
        "kube-scheduler": [
            str(binaries.get("kube-scheduler", "")),
            *delegated,
            f"--secure-port={layout.scheduler_port}",
        ],
    }
    # envtest ships etcd and kube-apiserver alone: the others run where they are given.
    return {name: command for name, command in commands.items() if name in binaries}


def gates_with(gates: dict[str, bool], extra: Mapping[str, bool]) -> dict[str, bool]:
    """Return ``gates`` with ``extra`` on top (``DRAConsumableCapacity=False``: 1.35 as shipped)."""
    return {**gates, **extra}


def client_cert(pki: Pki, name: str, subject: str, openssl: str | None = None) -> tuple[Path, Path]:
    """Issue a client certificate for ``subject`` from the plane's CA; return (cert, key).

    Kubelets authenticate so: ``/O=system:nodes/CN=system:node:<node>``, which the Node
    authorizer and the NodeRestriction admission plugin then hold to their own node.
    """
    tool = openssl or shutil.which("openssl")
    if tool is None:
        raise ControlPlaneError("the openssl command is needed to issue client certificates")
    directory = pki.ca_cert.parent
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    if cert.is_file() and key.is_file():
        return cert, key
    config = directory / "openssl.cnf"
    request = directory / f"{name}.csr"
    _openssl(tool, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-config", config,
             "-subj", subject, "-keyout", key, "-out", request)  # fmt: skip
    _openssl(tool, "x509", "-req", "-in", request, "-CA", pki.ca_cert, "-CAkey", pki.ca_key,
             "-set_serial", str(secrets.randbits(63)), "-days", _CERT_DAYS, "-extfile", config,
             "-extensions", "client", "-out", cert)  # fmt: skip
    key.chmod(0o600)
    return cert, key
