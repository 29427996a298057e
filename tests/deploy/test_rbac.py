"""RBAC is least privilege and matches the API calls the code makes, component by component.

The table below maps every Kubernetes client method the deployed components call to the
permission it needs. A test scans the components' modules for client calls, so a new call
without an entry here fails; other tests check that the rendered Roles grant exactly what the
table says, and nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from deploy.chartkit import DEFAULT_DRIVER, NAMESPACE, ROOT, Rendered, render
from kubernetes import client

Permission = tuple[str, str, str]
"""(API group, resource or resource/subresource, verb)."""

CORE, RESOURCE, COORDINATION = "", "resource.k8s.io", "coordination.k8s.io"
QUOTA = DEFAULT_DRIVER
"""GpuShareQuota's API group: the driver name (the default one in these renders)."""

# Client method -> permissions it needs. Every list_* of a deployed component feeds an
# informer (k8s/informer.py), which lists then watches.
CALLS: dict[str, frozenset[Permission]] = {
    # The controller's informers, in controller/view.py.
    "list_pod_for_all_namespaces": frozenset({(CORE, "pods", "list"), (CORE, "pods", "watch")}),
    "list_node": frozenset({(CORE, "nodes", "list"), (CORE, "nodes", "watch")}),
    "list_resource_claim_for_all_namespaces": frozenset(
        {(RESOURCE, "resourceclaims", "list"), (RESOURCE, "resourceclaims", "watch")}
    ),
    "list_resource_slice": frozenset(
        {(RESOURCE, "resourceslices", "list"), (RESOURCE, "resourceslices", "watch")}
    ),
    "list_device_class": frozenset(
        {(RESOURCE, "deviceclasses", "list"), (RESOURCE, "deviceclasses", "watch")}
    ),
    # Served as v1, v1beta2 or v1alpha3 (k8s/versions.py): one resource whatever the version.
    "list_device_taint_rule": frozenset(
        {(RESOURCE, "devicetaintrules", "list"), (RESOURCE, "devicetaintrules", "watch")}
    ),
    # GpuShareQuotas, the one custom resource (CustomObjectsApi) the components call: the
    # informer in controller/view.py and webhook/cache.py (through k8s/custom.py), and the
    # leader's status writer in controller/quotas.py.
    "list_cluster_custom_object": frozenset(
        {(QUOTA, "gpusharequotas", "list"), (QUOTA, "gpusharequotas", "watch")}
    ),
    "patch_namespaced_custom_object_status": frozenset({(QUOTA, "gpusharequotas/status", "patch")}),
    # The controller's writes, in controller/writes.py: patches only (docs/api-writes.md).
    "patch_namespaced_resource_claim": frozenset({(RESOURCE, "resourceclaims", "patch")}),
    "read_namespaced_resource_claim": frozenset({(RESOURCE, "resourceclaims", "get")}),
    # Status writes need resourceclaims/binding too from 1.36, where the
    # DRAResourceClaimGranularStatusAuthorization gate is beta and on.
    "patch_namespaced_resource_claim_status": frozenset(
        {
            (RESOURCE, "resourceclaims/status", "patch"),
            (RESOURCE, "resourceclaims/binding", "patch"),
        }
    ),
    "patch_namespaced_pod": frozenset({(CORE, "pods", "patch")}),
    "read_namespaced_pod": frozenset({(CORE, "pods", "get")}),
    "list_namespaced_pod": frozenset({(CORE, "pods", "list")}),
    # Preemption picks victims whose PodDisruptionBudgets allow their eviction (view.py).
    "list_pod_disruption_budget_for_all_namespaces": frozenset(
        {("policy", "poddisruptionbudgets", "list"), ("policy", "poddisruptionbudgets", "watch")}
    ),
    # The controller's events, in k8s/events.py.
    "create_namespaced_event": frozenset({(CORE, "events", "create")}),
    # The webhook hosted by the controller, in webhook/cache.py.
    "list_resource_claim_template_for_all_namespaces": frozenset(
        {
            (RESOURCE, "resourceclaimtemplates", "list"),
            (RESOURCE, "resourceclaimtemplates", "watch"),
        }
    ),
    "read_namespaced_resource_claim_template": frozenset(
        {(RESOURCE, "resourceclaimtemplates", "get")}
    ),
    # The kubelet plugin, in kubeletplugin/publisher.py and plugin.py.
    "create_resource_slice": frozenset({(RESOURCE, "resourceslices", "create")}),
    "replace_resource_slice": frozenset({(RESOURCE, "resourceslices", "update")}),
    "delete_resource_slice": frozenset({(RESOURCE, "resourceslices", "delete")}),
    "read_node": frozenset({(CORE, "nodes", "get")}),
    # /version is readable by every authenticated user (system:public-info-viewer).
    "get_code": frozenset(),
}

# Where a component's call needs other permissions than the controller's same call.
COMPONENT_CALLS: dict[str, dict[str, frozenset[Permission]]] = {
    # The plugin writes status.devices only (kubeletplugin/devicestatus.py): from 1.36 that is
    # the "driver" subresource, for claims on its own node; never /binding (the allocation).
    "kubelet-plugin": {
        "patch_namespaced_resource_claim_status": frozenset(
            {
                (RESOURCE, "resourceclaims/status", "patch"),
                (RESOURCE, "resourceclaims/driver", "associated-node:patch"),
            }
        ),
    },
}

# Leader election (k8s/leader.py) works on one Lease in the release namespace: a Role.
LEASE_CALLS: dict[str, frozenset[Permission]] = {
    "read_namespaced_lease": frozenset({(COORDINATION, "leases", "get")}),
    "create_namespaced_lease": frozenset({(COORDINATION, "leases", "create")}),
    "replace_namespaced_lease": frozenset({(COORDINATION, "leases", "update")}),
}

# The uninstall cleanup (`gpushare-dra cleanup`, the chart's post-delete hook Job): it lists once
# (no informer, so no watch) and writes by JSON patch (no update).
CLEANUP_CALLS: dict[str, frozenset[Permission]] = {
    # The wait: the release's controller and plugin pods, in the release namespace.
    "list_namespaced_pod": frozenset({(CORE, "pods", "list")}),
    "list_pod_for_all_namespaces": frozenset({(CORE, "pods", "list")}),
    "read_namespaced_pod": frozenset({(CORE, "pods", "get")}),
    # Remove the scheduling gate (spec.schedulingGates).
    "patch_namespaced_pod": frozenset({(CORE, "pods", "patch")}),
    "list_resource_claim_for_all_namespaces": frozenset({(RESOURCE, "resourceclaims", "list")}),
    "read_namespaced_resource_claim": frozenset({(RESOURCE, "resourceclaims", "get")}),
    # Remove the finalizer (metadata.finalizers).
    "patch_namespaced_resource_claim": frozenset({(RESOURCE, "resourceclaims", "patch")}),
}
# ops/command.py's cleanup() only builds the client (its other commands need none of this).
CLEANUP_MODULES = ["ops/cleanup.py"]

# The modules each deployed component runs (the webhook runs inside the controller).
COMPONENT_MODULES = {
    "controller": ["controller", "webhook", "k8s/events.py", "k8s/leader.py", "k8s/custom.py"],
    "kubelet-plugin": ["kubeletplugin"],
}

API_CLASSES = (
    client.CoreV1Api,
    client.ResourceV1Api,
    client.CoordinationV1Api,
    client.VersionApi,
    client.CustomObjectsApi,
    client.PolicyV1Api,
)

_METHOD = re.compile(r"\.((?:list|read|create|replace|patch|delete|get)_\w+)\b")
# raw.get / raw.post(api_client, "<path>", ...): requests by path, without a generated API
# class (and for an Eviction, without the model the generated method insists on).
_RAW_CALL = re.compile(r'raw\.(get|post)\(\s*[\w.]+,\s*"([^"]+)"')
RAW_CALLS: dict[tuple[str, str], frozenset[Permission]] = {
    ("get", "/api/v1/nodes/{name}"): frozenset({("", "nodes", "get")}),
    ("get", "/version/"): frozenset(),  # non-resource URL, readable by every authenticated user
    # controller/evictions.py: preemption evicts through the Eviction API.
    ("post", "/api/v1/namespaces/{namespace}/pods/{name}/eviction"): frozenset(
        {("", "pods/eviction", "create")}
    ),
}


def module_files(component: str) -> list[Path]:
    files: list[Path] = []
    for entry in COMPONENT_MODULES[component]:
        path = ROOT / "dra_driver" / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def client_calls(files: Iterable[Path]) -> set[str]:
    """Kubernetes client methods named in ``files`` (attribute uses, called or passed on)."""
    found = set()
    for path in files:
        for name in _METHOD.findall(path.read_text()):
            if any(hasattr(api, name) for api in API_CLASSES):
                found.add(name)
    return found


def raw_paths(files: Iterable[Path]) -> set[tuple[str, str]]:
    """Return (method, path) of the ``raw.get`` and ``raw.post`` calls in ``files``."""
    return {(m, path) for f in files for m, path in _RAW_CALL.findall(f.read_text())}


def needed(
    component: str, *, webhook: bool = True, preemption: bool = True
) -> tuple[set[Permission], set[Permission]]:
    """(cluster-wide, lease) permissions the component's code needs, from the table."""
    files = module_files(component)
    if not webhook:
        files = [f for f in files if "webhook" not in f.relative_to(ROOT).parts]
    if not preemption:  # the evictions are never made; the budgets are still read
        files = [f for f in files if f.name != "evictions.py"]
    cluster: set[Permission] = set()
    lease: set[Permission] = set()
    own = COMPONENT_CALLS.get(component, {})
    for call in client_calls(files):
        if call in LEASE_CALLS:
            lease |= LEASE_CALLS[call]
        else:
            cluster |= own.get(call, CALLS[call])
    for call in raw_paths(files):
        cluster |= RAW_CALLS[call]
    return cluster, lease


def granted(role: dict[str, Any]) -> set[Permission]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
    }


def all_roles(r: Rendered) -> list[dict[str, Any]]:
    return r.of_kind("ClusterRole") + r.of_kind("Role")


@pytest.mark.parametrize("component", sorted(COMPONENT_MODULES))
def test_every_api_call_of_a_component_has_a_permission_entry(component: str) -> None:
    """A client call the table does not know fails here, so RBAC cannot lag behind the code."""
    calls = client_calls(module_files(component))
    assert calls, f"no client call found for {component}: is the scan broken?"
    unknown = calls - set(CALLS) - set(LEASE_CALLS)
    assert unknown == set(), f"add these {component} calls to CALLS with their permissions"
    paths = raw_paths(module_files(component)) - set(RAW_CALLS)
    assert paths == set(), f"add these {component} raw.get/raw.post paths to RAW_CALLS"


def test_scan_finds_the_calls_it_must() -> None:
    """The scanner sees the known calls (a regex that matched nothing would pass vacuously)."""
    assert {
        "patch_namespaced_resource_claim_status",
        "patch_namespaced_pod",
        "list_cluster_custom_object",
        "patch_namespaced_custom_object_status",
    } <= client_calls(module_files("controller"))
    assert {"create_resource_slice", "read_namespaced_resource_claim"} <= (
        client_calls(module_files("kubelet-plugin"))
    )
    assert {("get", "/api/v1/nodes/{name}"), ("get", "/version/")} <= raw_paths(
        module_files("kubelet-plugin")
    )
    assert ("post", "/api/v1/namespaces/{namespace}/pods/{name}/eviction") in raw_paths(
        module_files("controller")
    )


@pytest.mark.parametrize("case", ["defaults", "webhook-off", "preemption-off"])
def test_controller_cluster_role_grants_exactly_what_the_code_needs(
    rendered: Callable[[str], Rendered], case: str
) -> None:
    """The controller's ClusterRole equals the table's permissions for its calls, no more."""
    r = rendered(case)
    cluster, _ = needed(
        "controller", webhook=case != "webhook-off", preemption=case != "preemption-off"
    )
    assert granted(r.one("ClusterRole", "gpushare-controller")) == cluster


def test_quota_permissions_follow_the_driver_name(rendered: Callable[[str], Rendered]) -> None:
    """GpuShareQuota's group is the driver name: read and status-patch there, no spec write."""
    role = rendered("custom-driver-name").one("ClusterRole", "gpushare-controller")
    quota = {p for p in granted(role) if p[1].startswith("gpusharequotas")}
    assert quota == {
        ("gpu.example.com", "gpusharequotas", "list"),
        ("gpu.example.com", "gpusharequotas", "watch"),
        ("gpu.example.com", "gpusharequotas/status", "patch"),
    }


def test_controller_lease_role_is_scoped_to_its_lease(rendered: Callable[[str], Rendered]) -> None:
    """Leases only in the release namespace; get/update only on the Lease <driver>-controller."""
    r = rendered("defaults")
    _, lease = needed("controller")
    role = r.one("Role", "gpushare-controller-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert granted(role) == lease
    for rule in role["rules"]:
        if set(rule["verbs"]) & {"get", "update"}:
            assert rule["resourceNames"] == ["gpushare.dra.dev-controller"]
        else:
            assert rule["verbs"] == ["create"]  # create cannot name its object
    assert r.of_kind("Role") == [role]
    assert rendered("all-options").of_kind("Role") == []  # no leader election, no Lease access


def test_kubelet_plugin_cluster_role_grants_exactly_what_the_code_needs(
    rendered: Callable[[str], Rendered],
) -> None:
    """The plugin's ClusterRole equals the table's permissions for the plugin's calls."""
    cluster, lease = needed("kubelet-plugin")
    assert lease == set()
    role = rendered("defaults").one("ClusterRole", "gpushare-kubelet-plugin")
    assert granted(role) == cluster


def test_kubelet_plugin_cannot_touch_pods_or_allocations(
    rendered: Callable[[str], Rendered],
) -> None:
    """The plugin reads claims and writes slices and its driver's device status, nothing else."""
    role = rendered("defaults").one("ClusterRole", "gpushare-kubelet-plugin")
    perms = granted(role)
    assert {p for p in perms if p[1].startswith("pods")} == set()
    assert {p for p in perms if p[1].startswith("resourceclaims")} == {
        (RESOURCE, "resourceclaims", "get"),
        (RESOURCE, "resourceclaims/status", "patch"),
        (RESOURCE, "resourceclaims/driver", "associated-node:patch"),
    }
    (driver_rule,) = [r for r in role["rules"] if "resourceclaims/driver" in r["resources"]]
    assert driver_rule["resourceNames"] == ["gpushare.dra.dev"]
    writes = {p for p in perms if p[2] not in ("get", "list", "watch")}
    assert {p[1] for p in writes} == {
        "resourceslices",
        "resourceclaims/status",
        "resourceclaims/driver",
    }


def test_without_device_status_the_plugin_writes_no_claim(helm: Path) -> None:
    """kubeletPlugin.deviceStatus=false: no claim status permission, DEVICE_STATUS false."""
    r = render(helm, {"kubeletPlugin": {"deviceStatus": False}})
    perms = granted(r.one("ClusterRole", "gpushare-kubelet-plugin"))
    assert {p for p in perms if p[1].startswith("resourceclaims")} == {
        (RESOURCE, "resourceclaims", "get")
    }
    container = r.one("DaemonSet", "gpushare-kubelet-plugin")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in container["containers"][0]["env"]}
    assert env["DEVICE_STATUS"] == "false"


@pytest.mark.parametrize("case", ["defaults", "custom-driver-name", "all-options"])
def test_only_the_controller_writes_allocations(
    rendered: Callable[[str], Rendered], case: str
) -> None:
    """resourceclaims/binding (allocation, reservedFor) is granted to the controller alone."""
    writers = {
        role["metadata"]["name"]
        for role in all_roles(rendered(case))
        for group, resource, verb in granted(role)
        if resource in ("resourceclaims/binding", "resourceclaims/*")
        and verb not in ("get", "list", "watch")
    }
    assert len(writers) == 1
    assert writers.pop().endswith("-controller")


@pytest.mark.parametrize("case", ["defaults", "all-options"])
def test_no_rbac_rule_uses_a_wildcard(rendered: Callable[[str], Rendered], case: str) -> None:
    """No verb, resource, API group or name in any rule is a wildcard."""
    for role in all_roles(rendered(case)):
        for rule in role["rules"]:
            for key in ("verbs", "resources", "apiGroups", "resourceNames"):
                assert not any("*" in item for item in rule.get(key, [])), (role, rule)
            assert "nonResourceURLs" not in rule


def test_each_binding_binds_its_own_service_account(rendered: Callable[[str], Rendered]) -> None:
    """Each role is bound to its component's ServiceAccount in the release namespace only."""
    r = rendered("defaults")
    accounts = set(r.names("ServiceAccount"))
    assert accounts == {"gpushare-controller", "gpushare-kubelet-plugin", "gpushare-cleanup"}
    bindings = r.of_kind("ClusterRoleBinding") + r.of_kind("RoleBinding")
    assert len(bindings) == 4
    for binding in bindings:
        subject = binding["subjects"]
        assert len(subject) == 1
        assert subject[0]["kind"] == "ServiceAccount"
        assert subject[0]["namespace"] == NAMESPACE
        assert binding["roleRef"]["name"].startswith(subject[0]["name"])
    workloads = {w["metadata"]["name"]: w for w in r.of_kind("Deployment") + r.of_kind("DaemonSet")}
    assert workloads["gpushare-controller"]["spec"]["template"]["spec"]["serviceAccountName"] == (
        "gpushare-controller"
    )
    plugin = workloads["gpushare-kubelet-plugin"]["spec"]["template"]["spec"]
    assert plugin["serviceAccountName"] == "gpushare-kubelet-plugin"


def test_installer_has_no_api_access(rendered: Callable[[str], Rendered]) -> None:
    """The HAMi-core installer gets a ServiceAccount without token and no role at all."""
    r = rendered("all-options")
    account = r.one("ServiceAccount", "gpushare-hami-core-installer")
    assert account["automountServiceAccountToken"] is False
    pod = r.one("DaemonSet", "gpushare-hami-core-installer")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    subjects = [
        s["name"]
        for b in r.of_kind("ClusterRoleBinding") + r.of_kind("RoleBinding")
        for s in b["subjects"]
    ]
    assert "gpushare-hami-core-installer" not in subjects


def test_admission_policy_pins_each_plugin_to_its_own_nodes_slices(
    rendered: Callable[[str], Rendered],
) -> None:
    """The VAP applies to the plugin's ServiceAccount only and compares the token's node name."""
    r = rendered("defaults")
    policy = r.one("ValidatingAdmissionPolicy", "gpushare-kubelet-plugin-slices")["spec"]
    assert policy["failurePolicy"] == "Fail"
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["resourceslices"]
    assert rule["apiGroups"] == [RESOURCE]
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    (condition,) = policy["matchConditions"]
    assert condition["expression"] == (
        'request.userInfo.username == "system:serviceaccount:gpushare:gpushare-kubelet-plugin"'
    )
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    assert (
        "request.userInfo.extra[?'authentication.kubernetes.io/node-name']"
        in (variables["userNodeName"])
    )
    assert "oldObject" in variables["slices"]  # DELETE and UPDATE check the stored slice too
    checks = " ".join(v["expression"] for v in policy["validations"])
    assert "s.spec.?nodeName.orValue('') == variables.userNodeName" in checks
    assert 's.spec.driver == "gpushare.dra.dev"' in checks
    binding = r.one("ValidatingAdmissionPolicyBinding", "gpushare-kubelet-plugin-slices")
    assert binding["spec"]["policyName"] == "gpushare-kubelet-plugin-slices"
    assert binding["spec"]["validationActions"] == ["Deny"]


def cleanup_files() -> list[Path]:
    return [ROOT / "dra_driver" / name for name in CLEANUP_MODULES]


def test_every_api_call_of_the_cleanup_has_a_permission_entry() -> None:
    """The cleanup's client calls are all in CLEANUP_CALLS (a new call fails here)."""
    calls = client_calls(cleanup_files())
    assert {"patch_namespaced_pod", "patch_namespaced_resource_claim"} <= calls  # scan works
    assert calls - set(CLEANUP_CALLS) == set(), "add these cleanup calls to CLEANUP_CALLS"
    assert raw_paths(cleanup_files()) == set()


def test_cleanup_cluster_role_grants_exactly_what_the_code_needs(
    rendered: Callable[[str], Rendered],
) -> None:
    """The hook's ClusterRole equals the permissions of the cleanup's calls: no watch, no update."""
    needed_by_cleanup = set().union(*(CLEANUP_CALLS[c] for c in client_calls(cleanup_files())))
    for case in ("defaults", "webhook-off", "custom-driver-name"):
        role = rendered(case).one("ClusterRole", "gpushare-cleanup")
        assert granted(role) == needed_by_cleanup
    assert needed_by_cleanup == {
        (CORE, "pods", "get"),
        (CORE, "pods", "list"),
        (CORE, "pods", "patch"),
        (RESOURCE, "resourceclaims", "get"),
        (RESOURCE, "resourceclaims", "list"),
        (RESOURCE, "resourceclaims", "patch"),
    }


def test_cleanup_rbac_is_a_hook_bound_to_the_hook_account_only(
    rendered: Callable[[str], Rendered],
) -> None:
    """The cleanup's account holds only its own role, and the role goes with the hook."""
    r = rendered("defaults")
    bindings = [
        b
        for b in r.of_kind("ClusterRoleBinding") + r.of_kind("RoleBinding")
        if any(s["name"] == "gpushare-cleanup" for s in b["subjects"])
    ]
    (binding,) = bindings
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpushare-cleanup",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpushare-cleanup", "namespace": NAMESPACE}
    ]
    for obj in (binding, r.one("ClusterRole", "gpushare-cleanup")):
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == "post-delete"
