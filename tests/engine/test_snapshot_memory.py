"""What the snapshot keeps per counted claim: quota uses only where asked, shared marks."""

from __future__ import annotations

from controller.kit import NAMES, claim, cluster, commit, node, pod, request, share_ids

from dra_driver.api import Placement
from dra_driver.engine import Placed, Policy, Snapshot, place_pod
from dra_driver.k8s.objects import Object
from dra_driver.k8s.quantity import parse_quantity

BINPACK = Policy.uniform(Placement.BINPACK)
SHARE_IDS = share_ids()


def _count(snapshot: Snapshot, name: str, namespace: str) -> Object:
    """Place a quarter-card claim in ``namespace`` and count it; return it as written."""
    made = claim(name, request(cores="25", memory="4Gi"), namespace=namespace)
    decision = place_pod(snapshot, pod(), [made], BINPACK, share_id=SHARE_IDS)
    assert isinstance(decision, Placed)
    (written,) = commit(snapshot, [made], decision)
    return written


def _uses(snapshot: Snapshot, namespace: str) -> dict[str, tuple[str, str]]:
    """Return claim UID -> (namespace, name) of what the snapshot counts against quotas."""
    return {uid: (u.namespace, u.name) for uid, u in snapshot.quota_uses(namespace).items()}


def test_quota_uses_are_worked_out_when_asked_and_kept_in_step_after() -> None:
    """Asked after claims were counted, then changed: the same as a snapshot built afresh."""
    snapshot = cluster(node("node-a", 2))
    first = _count(snapshot, "a-1", "team-a")
    _count(snapshot, "b-1", "team-b")
    assert _uses(snapshot, "team-a") == {first["metadata"]["uid"]: ("team-a", "a-1")}
    second = _count(snapshot, "a-2", "team-a")  # counted after the namespace was asked about
    snapshot.remove_claim(first["metadata"]["uid"])
    fresh = cluster(node("node-a", 2), claims=snapshot.counted.values())
    assert _uses(snapshot, "team-a") == _uses(fresh, "team-a")
    assert _uses(snapshot, "team-a") == {second["metadata"]["uid"]: ("team-a", "a-2")}
    assert sorted(snapshot._quota_uses) == ["team-a"]  # team-b was never asked about


def test_claims_with_one_share_of_a_card_share_one_marks_tuple() -> None:
    """Two claims sharing a card at one priority hold the same marks object, not copies."""
    snapshot = cluster(node("node-a", 1))
    one, two = (_count(snapshot, name, "default") for name in ("one", "two"))
    marks_one = snapshot.marks[one["metadata"]["uid"]]
    marks_two = snapshot.marks[two["metadata"]["uid"]]
    assert marks_one is marks_two
    ((device_id, _priority),) = marks_one
    assert device_id is snapshot.by_id[device_id].id  # the device's own id, not a copy
    assert NAMES.driver == device_id[0]


def test_shares_of_one_size_hold_one_set_of_amounts() -> None:
    """Two shares consuming the same amounts keep one object of amounts between them."""
    snapshot = cluster(node("node-a", 1))
    for name in ("one", "two"):
        _count(snapshot, name, "default")
    ((_device, entries),) = snapshot.state._share_entries.items()
    first, second = (amounts for _share_id, amounts in entries)
    assert first is second
    assert dict(first) == {"cores": parse_quantity("25"), "memory": parse_quantity("4Gi")}
