"""The chart's GpuShareQuota CRD on a real API server: what it stores, what it refuses, and why.

Quotas are applied as YAML with kubectl (strict field validation, kubectl's default, spelled
out), as a user would; the refusals are the API server's own, from the CRD's schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.api import DEFAULT_DRIVER_NAME
from realk8s.kit import Cluster, fresh_namespace

RESOURCE = f"gpusharequotas.{DEFAULT_DRIVER_NAME}"


@pytest.fixture(scope="module")
def namespace(cluster: Cluster) -> Iterator[str]:
    """One namespace for the module (a namespace takes seconds to delete): only quotas in it."""
    with fresh_namespace(cluster) as name:
        yield name


def quota(name: str, spec: str) -> str:
    """Return a GpuShareQuota document with ``spec`` (YAML, indented by two) as written."""
    return (
        f"apiVersion: {DEFAULT_DRIVER_NAME}/v1alpha1\n"
        "kind: GpuShareQuota\n"
        f"metadata: {{name: {name}}}\n"
        f"spec:\n{spec}"
    )


def apply(cluster: Cluster, namespace: str, document: str) -> tuple[int, str]:
    """``kubectl apply --validate=strict`` the document; return the exit status and stderr."""
    result = cluster.kubectl(
        "apply", "--validate=strict", "-n", namespace, "-f", "-", stdin=document, check=False
    )
    return result.returncode, result.stderr


def stored(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """Return the quota as the API server stored it, or None."""
    result = cluster.kubectl("get", RESOURCE, name, "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_the_charts_crd_is_established_under_the_driver_name(cluster: Cluster) -> None:
    """The API server accepts the CRD's names and serves it (the install waits for that)."""
    crd = cluster.json("customresourcedefinition", RESOURCE)
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert crd["status"]["acceptedNames"]["kind"] == "GpuShareQuota"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            '  hard: {cores: "150", memory: 40Gi, cards: "4"}\n  priority: offline\n',
            {"hard": {"cores": "150", "memory": "40Gi", "cards": "4"}, "priority": "offline"},
        ),
        ("  hard: {memory: 512Mi}\n", {"hard": {"memory": "512Mi"}}),
        # Plain YAML numbers are integers: int-or-string keeps them as written.
        (
            "  hard: {cores: 100, memory: 1073741824, cards: 0}\n",
            {"hard": {"cores": 100, "memory": 1073741824, "cards": 0}},
        ),
        (
            '  hard: {memory: "0.5Gi", cores: "0"}\n  priority: online\n',
            {"hard": {"memory": "0.5Gi", "cores": "0"}, "priority": "online"},
        ),
    ],
    ids=["all-three", "memory-only", "integers", "fractional-memory"],
)
def test_a_valid_quota_is_stored_as_written(
    cluster: Cluster,
    namespace: str,
    request: pytest.FixtureRequest,
    spec: str,
    expected: dict[str, Any],
) -> None:
    """Any non-empty subset of cores, memory and cards, with or without a priority, is stored."""
    name = f"valid-{request.node.callspec.id}"
    status, error = apply(cluster, namespace, quota(name, spec))
    assert status == 0, error
    found = stored(cluster, namespace, name)
    assert found is not None
    assert found["spec"] == expected
    assert found["metadata"]["generation"] == 1


REFUSED = [
    ("empty-hard", "  hard: {}\n", "spec.hard: Invalid value: 0", "at least 1 properties"),
    ("no-hard", "  priority: online\n", "spec.hard: Required value", ""),
    ("fractional-cores", '  hard: {cores: "1.5"}\n', 'spec.hard.cores: Invalid value: "1.5"', ""),
    ("negative-cores", '  hard: {cores: "-1"}\n', 'spec.hard.cores: Invalid value: "-1"', ""),
    (
        "negative-integer-cores",
        "  hard: {cores: -1}\n",
        "spec.hard.cores: Invalid value: -1",
        "greater than or equal to 0",
    ),
    ("float-cores", "  hard: {cores: 1.5}\n", "spec.hard.cores", "must be of type integer,string"),
    ("memory-lots", "  hard: {memory: lots}\n", 'spec.hard.memory: Invalid value: "lots"', ""),
    (
        "memory-exponent-out-of-range",
        '  hard: {memory: "1e41"}\n',
        'spec.hard.memory: Invalid value: "1e41"',
        "",
    ),
    ("negative-memory", "  hard: {memory: -1Gi}\n", 'spec.hard.memory: Invalid value: "-1Gi"', ""),
    ("cards-quantity", "  hard: {cards: 1k}\n", 'spec.hard.cards: Invalid value: "1k"', ""),
    (
        "priority-batch",
        '  hard: {cores: "100"}\n  priority: batch\n',
        'spec.priority: Unsupported value: "batch"',
        'supported values: "online", "offline"',
    ),
    (
        "unknown-key-in-hard",
        '  hard: {cores: "100", gpus: "2"}\n',
        'unknown field "spec.hard.gpus"',
        "",
    ),
    (
        "unknown-key-in-spec",
        '  hard: {cores: "1"}\n  burst: true\n',
        'unknown field "spec.burst"',
        "",
    ),
]


@pytest.mark.parametrize(
    ("spec", "refusal"),
    [(case[1], case[2:]) for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_an_invalid_quota_is_refused_naming_the_field(
    cluster: Cluster,
    namespace: str,
    request: pytest.FixtureRequest,
    spec: str,
    refusal: tuple[str, str],
) -> None:
    """The API server refuses it at kubectl apply, naming the field and value; nothing is stored."""
    field, detail = refusal
    name = f"refused-{request.node.callspec.id}"
    status, error = apply(cluster, namespace, quota(name, spec))
    assert status != 0
    assert field in error, error
    assert detail in error, error
    assert stored(cluster, namespace, name) is None


def table(text: str) -> list[dict[str, str]]:
    """Return the rows of ``kubectl get``'s table by column name (empty cells are blank)."""
    header, *rows = text.splitlines()
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return [
        {
            name: row[a:b].strip()
            for name, a, b in zip(names, starts, [*starts[1:], None], strict=True)
        }
        for row in rows
    ]


def test_the_controllers_status_is_accepted_and_shown_by_kubectl_get(
    cluster: Cluster, namespace: str
) -> None:
    """The leader's status patch passes the status schema; the columns show used beside hard."""
    status, error = apply(
        cluster, namespace, quota("counted", '  hard: {cores: "150", memory: 40Gi}\n')
    )
    assert status == 0, error

    def written() -> dict[str, Any] | None:
        found = stored(cluster, namespace, "counted")
        return (found or {}).get("status") or None

    quota_status = cluster.wait(written, "the controller to write the quota's status", namespace)
    assert quota_status["claims"] == 0
    assert quota_status["observedGeneration"] == 1
    assert set(quota_status["used"]) == {"cores", "memory", "cards"}
    (condition,) = quota_status["conditions"]
    assert (condition["type"], condition["status"]) == ("Exceeded", "False")
    (row,) = table(cluster.kubectl("get", RESOURCE, "counted", "-n", namespace).stdout)
    assert list(row) == [
        "NAME", "CORES USED", "CORES HARD", "MEMORY USED", "MEMORY HARD", "CARDS USED",
        "CARDS HARD", "EXCEEDED", "AGE",
    ]  # fmt: skip
    assert row["CORES USED"] == quota_status["used"]["cores"]
    assert (row["CORES HARD"], row["MEMORY HARD"], row["CARDS HARD"]) == ("150", "40Gi", "")
    assert row["MEMORY USED"] == quota_status["used"]["memory"]
    assert row["EXCEEDED"] == "False"
    wide_text = cluster.kubectl("get", RESOURCE, "counted", "-n", namespace, "-o", "wide").stdout
    (wide,) = table(wide_text)
    assert (wide["PRIORITY"], wide["CLAIMS"]) == ("", "0")


def test_status_is_not_taken_from_a_users_create(cluster: Cluster, namespace: str) -> None:
    """/status is a subresource: a status sent with a new quota is dropped (the controller's)."""
    document = quota("mine", '  hard: {cards: "1"}\n') + "status: {claims: 7}\n"
    result = cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-", stdin=document
    )
    created = json.loads(result.stdout)
    assert created["spec"] == {"hard": {"cards": "1"}}
    assert "status" not in created
