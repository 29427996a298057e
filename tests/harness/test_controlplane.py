"""Real-binaries mode: gates per release, command lines, PKI, binaries, process handling.

The control plane itself needs real Kubernetes binaries (tests/realkube.py says where they
come from); the test that starts one is marked realk8s. All the rest runs everywhere: the
process handling runs against stand-in binaries (a small Python script that answers the same
health endpoints over the same TLS), so start-up, readiness, error reports with log tails and
the SIGTERM/SIGKILL shutdown are exercised without them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import realkube
from gpushare_simulator.harness import kubebin
from gpushare_simulator.harness.controlplane import (
    ControlPlaneError,
    KubeBinaries,
    Layout,
    RealControlPlane,
    component_commands,
    feature_gates,
    gates_flag,
    generate_pki,
    parse_kube_version,
    runtime_config,
)
from kubernetes import client

from dra_driver.api import DEFAULT_DRIVER_NAME

OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="the openssl command is not installed")
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
ALL_GATES = (
    "DynamicResourceAllocation",
    "DRAConsumableCapacity",
    "DRADeviceBindingConditions",
    "DRAResourceClaimDeviceStatus",
    "DRADeviceTaints",
    "DRADeviceTaintRules",
)
WANTED = "etcd, kube-apiserver, kube-controller-manager, kube-scheduler"


# ---- versions and feature gates --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("Kubernetes v1.36.0\n", (1, 36)),
        ("Kubernetes v1.37.0-beta.0", (1, 37)),
        ("Kubernetes v1.34.3+k3s1", (1, 34)),
        ("1.35", (1, 35)),
        ("v1.38.1", (1, 38)),
    ],
)
def test_kube_version_is_read_from_version_output(text: str, version: tuple[int, int]) -> None:
    """Release, pre-release, vendor-suffixed and bare versions all give (major, minor)."""
    assert parse_kube_version(text) == version


def test_unreadable_version_is_refused() -> None:
    """Output without a version is an error that quotes it."""
    with pytest.raises(ControlPlaneError, match=r"^cannot read a Kubernetes version from 'oops'$"):
        parse_kube_version("oops\n")


@pytest.mark.parametrize(
    ("version", "dropped"),
    [
        ((1, 34), ("DRADeviceTaintRules",)),
        ((1, 35), ("DynamicResourceAllocation",)),
        ((1, 36), ("DynamicResourceAllocation",)),
        ((1, 37), ("DynamicResourceAllocation", "DRAResourceClaimDeviceStatus")),
        ((1, 38), ("DynamicResourceAllocation", "DRAResourceClaimDeviceStatus")),
    ],
)
def test_feature_gates_follow_the_release(version: tuple[int, int], dropped: tuple[str]) -> None:
    """Every DRA gate the driver needs is on; gates unknown or GA-locked there are left out."""
    expected = {gate: True for gate in ALL_GATES if gate not in dropped}
    assert feature_gates(version) == expected


def test_feature_gates_flag_for_136() -> None:
    """On 1.36: consumable capacity, binding conditions, device status, taints, taint rules."""
    assert gates_flag(feature_gates((1, 36))) == (
        "DRAConsumableCapacity=true,DRADeviceBindingConditions=true,"
        "DRAResourceClaimDeviceStatus=true,DRADeviceTaints=true,DRADeviceTaintRules=true"
    )


@pytest.mark.parametrize(
    ("version", "taint_rules"),
    [((1, 34), None), ((1, 35), "v1alpha3"), ((1, 36), "v1beta2"), ((1, 37), None)],
)
def test_runtime_config_serves_device_taint_rules_where_they_are_off_by_default(
    version: tuple[int, int], taint_rules: str | None
) -> None:
    """resource.k8s.io/v1 always; DeviceTaintRule's pre-release version on 1.35 and 1.36."""
    expected = "resource.k8s.io/v1=true"
    if taint_rules:
        expected += f",resource.k8s.io/{taint_rules}/devicetaintrules=true"
    assert runtime_config(version) == expected


def test_release_before_134_is_refused() -> None:
    """1.33 serves no resource.k8s.io/v1, so starting it is refused up front."""
    with pytest.raises(ControlPlaneError) as caught:
        feature_gates((1, 33))
    assert str(caught.value) == (
        "Kubernetes 1.33 is too old: the driver needs resource.k8s.io/v1, served from 1.34"
    )


# ---- command lines ---------------------------------------------------------------------------


def commands_for(version: tuple[int, int], tmp_path: Path) -> tuple[Layout, dict[str, list[str]]]:
    layout = Layout(tmp_path / "work", 2379, 2380, 6443, 10257, 10259)
    paths = {name: tmp_path / "bin" / name for name in BINARIES}
    return layout, component_commands(paths, layout, feature_gates(version))


@pytest.mark.parametrize("version", [(1, 34), (1, 35), (1, 36), (1, 37)])
def test_commands_share_one_gate_set_and_stay_in_work_dir(
    version: tuple[int, int], tmp_path: Path
) -> None:
    """apiserver, controller manager and scheduler get the same gates; files live in work_dir."""
    layout, commands = commands_for(version, tmp_path)
    assert list(commands) == list(BINARIES)
    flag = f"--feature-gates={gates_flag(feature_gates(version))}"
    for name, command in commands.items():
        assert command[0] == str(tmp_path / "bin" / name)
        assert (flag in command) == (name != "etcd")
        for argument in command[1:]:
            assert argument.startswith("--")
            assert " " not in argument
            value = argument.partition("=")[2]
            if value.startswith("/"):
                assert Path(value).is_relative_to(layout.work_dir)


def test_apiserver_command_serves_dra_with_rbac_and_service_accounts(tmp_path: Path) -> None:
    """The API server serves resource.k8s.io/v1, signs service-account tokens, and authorizes."""
    layout, commands = commands_for((1, 36), tmp_path)
    apiserver = commands["kube-apiserver"]
    pki = layout.pki
    for expected in (
        "--runtime-config=resource.k8s.io/v1=true",
        "--authorization-mode=Node,RBAC",
        "--secure-port=6443",
        "--etcd-servers=http://127.0.0.1:2379",
        f"--service-account-key-file={pki.sa_public_key}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--client-ca-file={pki.ca_cert}",
        "--disable-admission-plugins=TaintNodesByCondition",
    ):
        assert expected in apiserver
    manager = commands["kube-controller-manager"]
    assert "--controllers=*,resourceclaim-controller,-node-lifecycle-controller" in manager
    assert f"--kubeconfig={layout.kubeconfig}" in commands["kube-scheduler"]


# ---- bin dir validation ----------------------------------------------------------------------


def make_bin_dir(path: Path, names: tuple[str, ...] = BINARIES, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name in names:
        (path / name).write_text("#!/bin/sh\n")
        (path / name).chmod(mode)
    return path


def test_binaries_must_be_a_directory(tmp_path: Path) -> None:
    """A path that is no directory is refused, saying what it must hold."""
    with pytest.raises(ControlPlaneError) as caught:
        kubebin.prepare(tmp_path / "absent")
    assert str(caught.value) == (
        f"{tmp_path / 'absent'}: not a directory of Kubernetes binaries (it must hold etcd and "
        "kube-apiserver, plain or .gz; see tests/README.md)"
    )


def test_binaries_need_etcd_and_apiserver_and_executable_files(tmp_path: Path) -> None:
    """etcd and kube-apiserver are required; the rest are optional; a plain one must be +x."""
    bin_dir = make_bin_dir(tmp_path / "bin", ("etcd",))
    with pytest.raises(ControlPlaneError, match=r"missing kube-apiserver \(plain or \.gz\)"):
        kubebin.prepare(bin_dir)
    make_bin_dir(bin_dir, ("kube-apiserver",))
    found = kubebin.prepare(bin_dir)
    assert set(found.paths) == {"etcd", "kube-apiserver"}  # envtest's pair
    assert not found.has("kube-scheduler")
    with pytest.raises(ControlPlaneError, match="has no kube-scheduler"):
        found.path("kube-scheduler")
    (bin_dir / "etcd").chmod(0o644)
    with pytest.raises(ControlPlaneError, match=r"etcd is not executable \(chmod \+x\)"):
        kubebin.prepare(bin_dir)


def test_compressed_binaries_are_unpacked_once_and_checked_against_their_sums(
    tmp_path: Path,
) -> None:
    """.gz binaries unpack into the cache, executable; a SHA256SUMS mismatch is refused."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("etcd", "kube-apiserver"):
        (source / f"{name}.gz").write_bytes(gzip.compress(f"#!/bin/sh\necho {name}\n".encode()))
    digest = hashlib.sha256(b"#!/bin/sh\necho etcd\n").hexdigest()
    (source / "SHA256SUMS").write_text(f"{digest}  etcd\n{'0' * 64}  kube-apiserver\n")
    with pytest.raises(ControlPlaneError, match="not the one SHA256SUMS gives for kube-apiserver"):
        kubebin.prepare(source, tmp_path / "cache")
    (source / "SHA256SUMS").write_text(f"{digest}  etcd\n")
    found = kubebin.prepare(source, tmp_path / "cache")
    etcd = found.path("etcd")
    assert etcd.is_relative_to(tmp_path / "cache")
    assert subprocess.run([etcd], capture_output=True, text=True, check=True).stdout == "etcd\n"
    assert kubebin.prepare(source, tmp_path / "cache").path("etcd") == etcd  # unpacked once


# ---- PKI -------------------------------------------------------------------------------------


def openssl_out(*args: str) -> str:
    assert OPENSSL is not None
    result = subprocess.run([OPENSSL, *args], capture_output=True, text=True, check=True)
    return result.stdout


@needs_openssl
def test_pki_chains_to_its_ca_with_the_right_names_and_usages(tmp_path: Path) -> None:
    """Both certificates verify against the CA; serving is for 127.0.0.1, admin is a master."""
    pki = generate_pki(tmp_path / "pki")
    verified = openssl_out("verify", "-CAfile", str(pki.ca_cert), str(pki.serving_cert))
    assert verified.strip() == f"{pki.serving_cert}: OK"
    openssl_out("verify", "-CAfile", str(pki.ca_cert), str(pki.admin_cert))
    serving = openssl_out("x509", "-in", str(pki.serving_cert), "-noout", "-text")
    assert "IP Address:127.0.0.1" in serving
    assert "DNS:kubernetes.default.svc" in serving
    assert "TLS Web Server Authentication" in serving
    admin = openssl_out(
        "x509", "-in", str(pki.admin_cert), "-noout", "-subject", "-ext", "extendedKeyUsage"
    )
    assert "O = system:masters" in admin
    assert "TLS Web Client Authentication" in admin
    derived = openssl_out("pkey", "-in", str(pki.sa_key), "-pubout")
    assert derived == pki.sa_public_key.read_text()
    for key in (pki.ca_key, pki.serving_key, pki.admin_key, pki.sa_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_missing_openssl_is_reported(tmp_path: Path) -> None:
    """A failing openssl command surfaces as ControlPlaneError naming the step."""
    with pytest.raises(ControlPlaneError, match=r"^openssl req failed: "):
        generate_pki(tmp_path / "pki", openssl=str(tmp_path / "no-openssl"))


# ---- process handling against stand-in binaries ---------------------------------------------

FAKE = """\
import http.server, json, os, signal, ssl, sys, time
name = os.path.basename(sys.argv[0])
mode = os.environ.get("FAKE_MODE", "")
if "--version" in sys.argv:
    print(os.environ.get("FAKE_VERSION", "Kubernetes v1.36.0"))
    sys.exit(0)
if "--help" in sys.argv:
    print("  -initial-cluster string")
    sys.exit(0)
flags = dict(a[2:].partition("=")[::2] for a in sys.argv[1:])
print(name, "started with", " ".join(sys.argv[1:]), flush=True)
with open(os.path.join(os.environ["FAKE_PID_DIR"], name), "w") as pid_file:
    pid_file.write(str(os.getpid()))
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "crash-" + name:
    print("fatal: boom", flush=True)
    sys.exit(3)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        status, body = 404, "not found"
        if name == "etcd" and self.path == "/health":
            status, body = 200, json.dumps({"health": "true", "reason": ""}, separators=(",", ":"))
        elif self.path in ("/readyz", "/healthz"):
            status, body = (500, "[-]etcd failed") if mode == "unready-" + name else (200, "ok")
        elif self.path == "/api/v1/namespaces/default/serviceaccounts/default":
            account = {"name": "default", "namespace": "default"}
            status, body = 200, json.dumps({"kind": "ServiceAccount", "metadata": account})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())
    def log_message(self, *args):
        pass
if name == "etcd":
    port = int(flags["listen-client-urls"].rsplit(":", 1)[1])
else:
    port = int(flags["secure-port"])
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
if name != "etcd":
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(flags["tls-cert-file"], flags["tls-private-key-file"])
    if name == "kube-apiserver":
        context.load_verify_locations(flags["client-ca-file"])
        context.verify_mode = ssl.CERT_REQUIRED
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


@pytest.fixture
def fake_bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KubeBinaries:
    """Return binaries whose four programs are the stand-in; their PIDs land in pids/."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    for name in BINARIES:
        (bin_dir / name).write_text(f"#!{sys.executable}\n{FAKE}")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "pids").mkdir()
    monkeypatch.setenv("FAKE_PID_DIR", str(tmp_path / "pids"))
    monkeypatch.delenv("FAKE_MODE", raising=False)
    return kubebin.prepare(bin_dir)


def raw(method: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """Call a generated client method with plain dicts and return the JSON answer as a dict."""
    response = method(*args, _preload_content=False)
    answer: dict[str, Any] = json.loads(response.data)
    return answer


def recorded_pids(tmp_path: Path) -> dict[str, int]:
    return {p.name: int(p.read_text()) for p in (tmp_path / "pids").iterdir()}


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_all_gone(pids: dict[str, int]) -> None:
    """Every recorded process has exited and been reaped (its PID no longer exists)."""
    assert pids
    assert {name: pid for name, pid in pids.items() if is_running(pid)} == {}


@needs_openssl
def test_stand_in_control_plane_starts_serves_the_kubeconfig_and_stops(
    fake_bin_dir: KubeBinaries, tmp_path: Path
) -> None:
    """Start-up waits for every component, the kubeconfig works with the client, exit kills all."""
    with RealControlPlane(fake_bin_dir, tmp_path / "work") as plane:
        assert plane.version == (1, 36)
        assert plane.url == f"https://127.0.0.1:{plane.layout.apiserver_port}"
        assert set(plane.pids()) == {
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        }
        with plane.api_client() as api:
            core = client.CoreV1Api(api)
            account = raw(core.read_namespaced_service_account, "default", "default")
        assert account["metadata"]["name"] == "default"
        log = (tmp_path / "work" / "logs" / "kube-apiserver.log").read_text()
        assert f"--feature-gates={gates_flag(feature_gates((1, 36)))}" in log
    assert_all_gone(recorded_pids(tmp_path))


@needs_openssl
def test_crashing_component_is_reported_with_log_tails(
    fake_bin_dir: KubeBinaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A component that exits during start-up fails it at once, with every log's tail."""
    monkeypatch.setenv("FAKE_MODE", "crash-kube-scheduler")
    with pytest.raises(ControlPlaneError) as caught:
        RealControlPlane(fake_bin_dir, tmp_path / "work").start()
    message = str(caught.value)
    assert message.startswith("kube-scheduler exited with status 3 while waiting for ")
    assert f"--- kube-scheduler ({tmp_path / 'work' / 'logs' / 'kube-scheduler.log'}" in message
    assert "fatal: boom" in message
    assert "--- etcd (" in message
    assert_all_gone(recorded_pids(tmp_path))


@needs_openssl
def test_component_never_ready_times_out_with_its_last_answer(
    fake_bin_dir: KubeBinaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API server that keeps failing /readyz ends start-up at the deadline, quoting it."""
    monkeypatch.setenv("FAKE_MODE", "unready-kube-apiserver")
    plane = RealControlPlane(fake_bin_dir, tmp_path / "work", timeout_s=3)
    with pytest.raises(ControlPlaneError) as caught:
        plane.start()
    assert str(caught.value).startswith(
        "kube-apiserver not ready within 3 s (last answer: HTTP 500: [-]etcd failed); "
        "log tails follow\n--- etcd ("
    )
    assert plane.pids() == {}
    assert_all_gone(recorded_pids(tmp_path))


@needs_openssl
def test_component_ignoring_sigterm_is_killed(
    fake_bin_dir: KubeBinaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Components that ignore SIGTERM are SIGKILLed after the grace period; none survives."""
    monkeypatch.setenv("FAKE_MODE", "stubborn")
    with RealControlPlane(fake_bin_dir, tmp_path / "work", grace_s=0.2):
        pids = recorded_pids(tmp_path)
    assert_all_gone(pids)  # they ignored SIGTERM: only the SIGKILL can have ended them


def test_old_release_is_refused_before_anything_starts(
    fake_bin_dir: KubeBinaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1.33 kube-apiserver is refused from its --version alone; no process is started."""
    monkeypatch.setenv("FAKE_VERSION", "Kubernetes v1.33.4")
    with pytest.raises(ControlPlaneError, match=r"Kubernetes 1\.33 is too old"):
        RealControlPlane(fake_bin_dir, tmp_path / "work").start()
    assert recorded_pids(tmp_path) == {}


def test_version_hint_replaces_detection(
    fake_bin_dir: KubeBinaries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube_version_hint is used instead of --version, e.g. for a dev build that says v0.0.0."""
    monkeypatch.setenv("FAKE_VERSION", "Kubernetes v0.0.0-master+$Format:%H$")
    with pytest.raises(ControlPlaneError, match=r"^kube-apiserver --version reports v0\.0\.0"):
        RealControlPlane(fake_bin_dir, tmp_path / "a").start()
    monkeypatch.setenv("FAKE_MODE", "crash-etcd")
    with pytest.raises(ControlPlaneError, match=r"^etcd exited with status 3"):
        RealControlPlane(fake_bin_dir, tmp_path / "b", kube_version_hint="1.37").start()


# ---- the real thing --------------------------------------------------------------------------


@pytest.mark.realk8s
@pytest.mark.timeout(300)  # start-up alone may take up to RealControlPlane's 120 s
def test_real_control_plane_keeps_consumable_capacity_and_creates_claims(tmp_path: Path) -> None:
    """On real binaries, slices and claims keep their capacity fields and KCM makes pod claims."""
    binaries = realkube.binaries("kube-controller-manager")
    driver = DEFAULT_DRIVER_NAME
    with RealControlPlane(binaries, tmp_path / "cp") as plane, plane.api_client() as api:
        resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
        selector = {"cel": {"expression": f"device.driver == '{driver}'"}}
        raw(resource.create_device_class,
            {"metadata": {"name": driver}, "spec": {"selectors": [selector]}})  # fmt: skip
        policy = {"default": "100", "validRange": {"min": "0", "max": "100", "step": "1"}}
        device = {"name": "gpu-0", "allowMultipleAllocations": True,
                  "capacity": {"cores": {"value": "100", "requestPolicy": policy}}}  # fmt: skip
        pool = {"name": "node-1", "generation": 1, "resourceSliceCount": 1}
        raw(resource.create_resource_slice, {
            "metadata": {"name": "node-1-slice"},
            "spec": {"driver": driver, "nodeName": "node-1", "pool": pool, "devices": [device]},
        })  # fmt: skip
        stored = raw(resource.read_resource_slice, "node-1-slice")["spec"]["devices"][0]
        # Without DRAConsumableCapacity the API server silently drops these two fields.
        assert stored["allowMultipleAllocations"] is True
        assert stored["capacity"]["cores"]["requestPolicy"] == policy
        capacity = {"requests": {"cores": "30"}}
        request = {"name": "gpu", "exactly": {"deviceClassName": driver, "capacity": capacity}}
        raw(resource.create_namespaced_resource_claim_template, "default", {
            "metadata": {"name": "share"}, "spec": {"spec": {"devices": {"requests": [request]}}},
        })  # fmt: skip
        container = {"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
        raw(core.create_namespaced_pod, "default", {
            "metadata": {"name": "user"},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "share"}],
                "containers": [container],
            },
        })  # fmt: skip
        deadline = time.monotonic() + 60
        while not (claims := raw(resource.list_namespaced_resource_claim, "default")["items"]):
            assert time.monotonic() < deadline, "kube-controller-manager created no claim"
            time.sleep(0.5)
        assert claims[0]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == capacity
        pids = plane.pids()
    assert [pid for pid in pids.values() if is_running(pid)] == []
