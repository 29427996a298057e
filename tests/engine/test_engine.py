"""Table tests of the allocation engine: every request feature, on the plugin's real slices."""

from __future__ import annotations

import pytest
from controller.kit import (
    DRIVER,
    NAMES,
    PCI,
    allocated,
    card,
    claim,
    cluster,
    commit,
    config,
    devices_of,
    first_available,
    node,
    pod,
    request,
    selector_class,
    share_ids,
    slices_of,
)

from dra_driver.api import Placement
from dra_driver.engine import Placed, Policy, Unplaceable, place_pod
from dra_driver.nvml.inventory import Taint

BINPACK = Policy.uniform(Placement.BINPACK)
SPREAD = Policy.uniform(Placement.SPREAD)


def place(snapshot, claims, policy=BINPACK, the_pod=None, **kwargs):
    """Run the engine with deterministic share IDs."""
    return place_pod(snapshot, the_pod or pod(), claims, policy, share_id=share_ids(), **kwargs)


def placed(snapshot, claims, policy=BINPACK, the_pod=None, **kwargs) -> Placed:
    """Run the engine and require success."""
    decision = place(snapshot, claims, policy, the_pod, **kwargs)
    assert isinstance(decision, Placed), decision
    return decision


def unplaceable(snapshot, claims, policy=BINPACK, the_pod=None, **kwargs) -> Unplaceable:
    """Run the engine and require failure."""
    decision = place(snapshot, claims, policy, the_pod, **kwargs)
    assert isinstance(decision, Unplaceable), decision
    return decision


# -- the acceptance scenarios of docs/scenarios.md ------------------------------------------


def test_whole_card_without_capacity_request_consumes_everything():
    """Scenario 1: a claim with no capacity request takes all cores and all memory."""
    snapshot = cluster(node("node-1", [card(0, "15360Mi")]))
    result = placed(snapshot, [claim("a")]).claims[0].results[0]
    assert result["consumedCapacity"] == {"cores": "100", "memory": "15Gi"}
    assert result["shareID"] == "11111111-2222-4333-8444-000000000001"


def test_second_whole_card_waits_with_a_reason_and_fits_after_release():
    """Scenario 1: a second whole-card claim on a one-card node is refused until the first ends."""
    snapshot = cluster(node("node-1", [card(0, "15360Mi")]))
    first = [claim("a")]
    written = commit(snapshot, first, placed(snapshot, first))
    refused = unplaceable(snapshot, [claim("b")])
    assert refused.reason.startswith("0/1 nodes are available: 1 node: claim default/b request gpu")
    assert "closest: node-1/gpu-0 has 0 cores, 0 memory free" in refused.reason
    snapshot.remove_claim(written[0]["metadata"]["uid"])
    assert isinstance(place(snapshot, [claim("b")]), Placed)


def test_two_shares_run_on_one_card():
    """Scenario 2: 5Gi/40 cores and 5Gi/30 cores share one card."""
    snapshot = cluster(node("node-1", [card(0, "15360Mi")]))
    a, b = (
        claim("a", request(cores="40", memory="5Gi")),
        claim("b", request(cores="30", memory="5Gi")),
    )
    commit(snapshot, [a], placed(snapshot, [a]))
    second = placed(snapshot, [b])
    assert devices_of(second) == ["node-1/gpu-0"]
    assert second.claims[0].results[0]["consumedCapacity"] == {"cores": "30", "memory": "5Gi"}


@pytest.mark.parametrize(
    ("placement", "same_card"), [(Placement.BINPACK, True), (Placement.SPREAD, False)]
)
def test_binpack_shares_a_card_and_spread_uses_two(placement, same_card):
    """Scenario 3: binpack puts two shares on one PCI bus ID, spread on different ones."""
    snapshot = cluster(node("node-2", 2))
    buses = []
    for name in ("a", "b"):
        c = claim(name, request(cores="40", memory="5Gi"))
        decision = placed(snapshot, [c], Policy.uniform(placement))
        commit(snapshot, [c], decision)
        device = snapshot.by_id[(DRIVER, "node-2", decision.claims[0].results[0]["device"])]
        buses.append(device.attributes[PCI])
    assert (buses[0] == buses[1]) is same_card


@pytest.mark.parametrize("cores", ["100", None])
def test_hundred_cores_or_no_request_is_a_whole_card(cores):
    """Scenario 3: ``cores: 100`` or no request leaves no room for another share."""
    snapshot = cluster(node("node-1", 1))
    c = claim("a", request(cores=cores, memory="1Gi") if cores else request())
    commit(snapshot, [c], placed(snapshot, [c]))
    assert isinstance(place(snapshot, [claim("b", request(cores="1", memory="1Gi"))]), Unplaceable)


def test_memory_larger_than_any_card_names_memory_and_the_closest_card():
    """Scenario 6: more memory than any card has is refused naming memory and the best card."""
    snapshot = cluster(node("node-1", [card(0, "15360Mi")]), node("node-2", 2))
    refused = unplaceable(snapshot, [claim("big", request(memory="20Gi", cores="10"))])
    assert "request gpu: no card with 10 cores, 20Gi memory free" in refused.reason
    assert "(closest: node-2/gpu-0 has 100 cores, 16Gi memory free)" in refused.reason


# -- request features -----------------------------------------------------------------


def test_count_two_takes_two_different_cards():
    """``count: 2`` with no capacity request means two whole cards, never one card twice."""
    snapshot = cluster(node("n", 3))
    decision = placed(snapshot, [claim("a", request(count=2, cores="10", memory="1Gi"))])
    assert devices_of(decision) == ["n/gpu-0", "n/gpu-1"]


def test_count_larger_than_the_node_fails():
    """``count: 3`` on a two-card node does not fit."""
    snapshot = cluster(node("n", 2))
    assert isinstance(place(snapshot, [claim("a", request(count=3))]), Unplaceable)


def test_all_mode_takes_every_matching_card():
    """``allocationMode: All`` takes a share on every card that matches."""
    snapshot = cluster(node("n", 3))
    decision = placed(snapshot, [claim("a", request(all_devices=True, cores="10", memory="1Gi"))])
    assert devices_of(decision) == ["n/gpu-0", "n/gpu-1", "n/gpu-2"]


def test_all_mode_leaves_out_cards_without_room():
    """``All`` takes the cards with room for the share and leaves full ones out (as upstream)."""
    snapshot = cluster(node("n", 3))
    used = []
    for full in (claim("whole"), claim("busy", request(cores="95", memory="1Gi"))):
        decision = placed(snapshot, [full])
        used += devices_of(decision)
        commit(snapshot, [full], decision)
    decision = placed(snapshot, [claim("a", request(all_devices=True, cores="10"))])
    assert devices_of(decision) == sorted({"n/gpu-0", "n/gpu-1", "n/gpu-2"} - set(used))


def test_all_mode_fails_when_no_card_has_room():
    """``All`` with every matching card full fails and says so."""
    snapshot = cluster(node("n", 1))
    whole = claim("whole")
    commit(snapshot, [whole], placed(snapshot, [whole]))
    decision = place(snapshot, [claim("a", request(all_devices=True, cores="10"))])
    assert isinstance(decision, Unplaceable)
    assert "claim default/a request gpu: no card with 10 cores" in decision.reason


def test_all_mode_fails_on_a_card_the_pods_earlier_request_filled():
    """A card that had room before the pod's own picks stays in "all", so the pod fails."""
    snapshot = cluster(node("n", 1))
    first = claim("first", request(cores="95", memory="1Gi"))
    every = claim("every", request(all_devices=True, cores="10", memory="1Gi"))
    assert isinstance(place(snapshot, [first, every]), Unplaceable)
    assert devices_of(placed(snapshot, [every])) == ["n/gpu-0"]


def test_first_available_falls_back_in_order_and_records_the_sub_request():
    """``firstAvailable`` tries alternatives in order; the result names ``request/sub``."""
    snapshot = cluster(node("n", 1))
    c = claim(
        "a",
        first_available(
            "gpu",
            request("a100", selectors=[f'device.attributes["{DRIVER}"].productName == "A100"']),
            request("t4", cores="20", memory="2Gi"),
        ),
    )
    result = placed(snapshot, [c]).claims[0].results[0]
    assert result["request"] == "gpu/t4"
    assert result["consumedCapacity"] == {"cores": "20", "memory": "2Gi"}


def test_first_available_prefers_the_first_alternative_across_nodes():
    """A node that satisfies an earlier alternative wins over one that only fits a later one."""
    snapshot = cluster(
        node("a-node", [card(0, product="Tesla T4")]), node("b-node", [card(0, product="A100")])
    )
    c = claim(
        "a",
        first_available(
            "gpu",
            request("a100", selectors=[f'device.attributes["{DRIVER}"].productName == "A100"']),
            request("any"),
        ),
    )
    decision = placed(snapshot, [c])
    assert decision.node == "b-node"
    assert decision.claims[0].results[0]["request"] == "gpu/a100"


@pytest.mark.parametrize(
    ("memory", "consumed"),
    [("5Gi", "5Gi"), ("5000000000", "4769Mi"), ("1", "1Mi"), ("1536Ki", "2Mi")],
)
def test_memory_requests_round_up_to_the_mebibyte_grid(memory, consumed):
    """Memory requests round up to the published ``validRange`` step, as kube-scheduler does."""
    snapshot = cluster(node("n", 1))
    result = placed(snapshot, [claim("a", request(cores="10", memory=memory))]).claims[0].results[0]
    assert result["consumedCapacity"]["memory"] == consumed


def test_cores_above_the_maximum_is_explained():
    """``cores: 150`` fits no card; the reason quotes the request policy."""
    snapshot = cluster(node("n", 1))
    refused = unplaceable(snapshot, [claim("a", request(cores="150"))])
    assert "gpu-0: request cores 150 exceeds max 100" in refused.reason


def test_defaults_apply_per_capacity():
    """Requesting only memory takes the cores default (100: the whole compute)."""
    snapshot = cluster(node("n", 1))
    result = placed(snapshot, [claim("a", request(memory="1Gi"))]).claims[0].results[0]
    assert result["consumedCapacity"] == {"cores": "100", "memory": "1Gi"}


def test_exclusive_isolation_takes_the_whole_card_and_needs_an_idle_one():
    """``isolation: exclusive`` consumes everything and is refused a card that has a share."""
    snapshot = cluster(node("n", 2))
    small = claim("small", request(cores="10", memory="1Gi"))
    commit(snapshot, [small], placed(snapshot, [small]))
    exclusive = claim(
        "x", request(cores="10", memory="1Gi"), configs=[config(isolation="exclusive")]
    )
    decision = placed(snapshot, [exclusive])
    result = decision.claims[0].results[0]
    assert result["device"] == "gpu-1"
    assert result["consumedCapacity"] == {"cores": "100", "memory": "16Gi"}


def test_a_device_allocated_without_share_id_is_used_whole():
    """A result without a shareID (someone's exclusive allocation) blocks the card."""
    foreign = claim("foreign")
    foreign["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n", "device": "gpu-0"}]
            }
        }
    }
    snapshot = cluster(node("n", 1), claims=[foreign])
    refused = unplaceable(snapshot, [claim("a", request(cores="1", memory="1Mi"))])
    assert "node-1" not in refused.reason
    assert "n/gpu-0 is used whole by another claim" in refused.reason


def test_claims_allocated_by_the_scheduler_are_counted():
    """Shares kube-scheduler allocated (no config of ours) take their capacity."""
    snapshot = cluster(node("n", 1))
    scheduler = claim("s", request(cores="80", memory="1Gi"))
    written = allocated([scheduler], placed(snapshot, [scheduler]))
    snapshot = cluster(node("n", 1), claims=written)
    refused = unplaceable(snapshot, [claim("a", request(cores="30", memory="1Gi"))])
    assert "has 20 cores, 15Gi memory free" in refused.reason


# -- CEL selectors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "device"),
    [
        (f'device.attributes["{DRIVER}"].productName == "A100"', "gpu-1"),
        (f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("540.0.0"))', "gpu-1"),
        (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0', "gpu-1"),
        ('device.attributes["resource.kubernetes.io"].pciBusID == "0000:01:00.0"', "gpu-0"),
    ],
)
def test_request_selectors_pick_the_matching_card(expression, device):
    """Request CEL selectors see attributes, versions, quantities and qualified names."""
    snapshot = cluster(
        node("n", [card(0), card(1, "80Gi", product="A100", driver_version="550.54.15")])
    )
    decision = placed(
        snapshot, [claim("a", request(cores="10", memory="1Gi", selectors=[expression]))]
    )
    assert decision.claims[0].results[0]["device"] == device


def test_class_selectors_apply_before_request_selectors():
    """A DeviceClass's own selectors restrict the cards its claims can get."""
    a100 = selector_class(
        "a100.gpushare.dra.dev", f'device.attributes["{DRIVER}"].productName == "A100"'
    )
    snapshot = cluster(node("n", [card(0), card(1, "80Gi", product="A100")]), classes=[a100])
    decision = placed(
        snapshot,
        [claim("a", request(cores="10", memory="1Gi", device_class="a100.gpushare.dra.dev"))],
    )
    assert decision.claims[0].results[0]["device"] == "gpu-1"


def test_unsupported_cel_function_is_refused_with_the_field():
    """An expression with a function the engine cannot evaluate fails closed, naming the field."""
    snapshot = cluster(node("n", 1))
    refused = unplaceable(snapshot, [claim("a", request(selectors=["device.driver.frobnicate()"]))])
    assert refused.refused
    assert refused.reason.startswith(
        "claim default/a: spec.devices.requests[0].exactly.selectors[0]: "
    )
    assert "frobnicate" in refused.reason


def test_cel_runtime_error_means_no_match_with_the_error_shown():
    """A selector that errors on a device (missing attribute) does not match it, and says why."""
    snapshot = cluster(node("n", 1))
    refused = unplaceable(
        snapshot, [claim("a", request(selectors=[f'device.attributes["{DRIVER}"].nope == 1']))]
    )
    assert "nope" in refused.reason


def test_missing_device_class_is_refused():
    """A request for a class that does not exist is refused naming the class."""
    snapshot = cluster(node("n", 1))
    refused = unplaceable(snapshot, [claim("a", request(device_class="nope.example.com"))])
    assert refused.refused
    assert (
        refused.reason == "claim default/a: spec.devices.requests[0].exactly: "
        "device class nope.example.com does not exist"
    )


# -- constraints --------------------------------------------------------------------------


def test_distinct_attribute_keeps_two_requests_on_different_cards():
    """``distinctAttribute`` on the UUID puts two shares of one claim on two cards."""
    snapshot = cluster(node("n", 2))
    c = claim(
        "a",
        request("one", cores="10", memory="1Gi"),
        request("two", cores="10", memory="1Gi"),
        constraints=[{"distinctAttribute": f"{DRIVER}/uuid"}],
    )
    assert devices_of(placed(snapshot, [c])) == ["n/gpu-0", "n/gpu-1"]


def test_without_distinct_attribute_binpack_may_use_one_card_twice():
    """Two requests of one claim may share a card, as in kube-scheduler."""
    snapshot = cluster(node("n", 2))
    c = claim(
        "a", request("one", cores="10", memory="1Gi"), request("two", cores="10", memory="1Gi")
    )
    assert devices_of(placed(snapshot, [c])) == ["n/gpu-0", "n/gpu-0"]


def test_match_attribute_backtracks_to_cards_with_equal_values():
    """``matchAttribute`` forces both requests onto cards of the same product, backtracking."""
    snapshot = cluster(
        node(
            "n",
            [
                card(0, product="T4"),
                card(1, "80Gi", product="A100"),
                card(2, "80Gi", product="A100"),
            ],
        )
    )
    c = claim(
        "a",
        request("one", cores="10", memory="1Gi"),
        request("two", cores="10", memory="30Gi"),
        constraints=[
            {"matchAttribute": f"{DRIVER}/productName"},
            {"distinctAttribute": f"{DRIVER}/uuid"},
        ],
    )
    assert devices_of(placed(snapshot, [c])) == ["n/gpu-1", "n/gpu-2"]


def test_unsatisfiable_constraint_is_explained():
    """Constraints no pair of cards can meet give the "together" reason."""
    snapshot = cluster(node("n", 1))
    c = claim(
        "a",
        request("one", cores="10", memory="1Gi"),
        request("two", cores="10", memory="1Gi"),
        constraints=[{"distinctAttribute": f"{DRIVER}/uuid"}],
    )
    refused = unplaceable(snapshot, [c])
    assert "cannot all be satisfied together" in refused.reason


# -- pods and nodes -----------------------------------------------------------------------


def test_all_claims_of_a_pod_land_on_one_node():
    """Two claims of one pod go to the one node that can hold both."""
    snapshot = cluster(node("a", 1), node("b", 2))
    claims = [
        claim("x", request(cores="60", memory="1Gi")),
        claim("y", request(cores="60", memory="1Gi")),
    ]
    decision = placed(snapshot, claims)
    assert decision.node == "b"
    assert [a.node for a in decision.claims] == ["b", "b"]


def test_pinned_node_selector_of_an_allocated_claim_is_respected():
    """A pod whose other claim is allocated on node b only gets node b."""
    snapshot = cluster(node("a", 1), node("b", 1))
    pinned = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}
        ]
    }
    assert placed(snapshot, [claim("x")], pinned=[pinned]).node == "b"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"nodeSelector": {"gpu": "a100"}}, "b"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "gpu", "operator": "In", "values": ["a100"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            },
            "b",
        ),
        ({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}, "a"),
    ],
)
def test_pod_node_selector_affinity_and_tolerations(spec, expected):
    """Pod nodeSelector, required node affinity and tolerations choose the node."""
    snapshot = cluster(
        node("a", 1, taints=[Taint(key="dedicated", effect="NoSchedule")]),
        node("b", 1, labels={"gpu": "a100"}),
        node("c", 1, unschedulable=True),
    )
    the_pod = pod(**spec)
    # With binpack and equal nodes the name decides: "a" would win if it were allowed.
    assert placed(snapshot, [claim("x")], the_pod=the_pod).node == expected


def test_unfit_nodes_are_counted_by_reason():
    """The reason lists each node's problem, grouped like kube-scheduler's."""
    snapshot = cluster(
        node("a", 1, taints=[Taint(key="dedicated", effect="NoSchedule")]),
        node("c", 1, unschedulable=True),
        node("d", 0),
    )
    refused = unplaceable(snapshot, [claim("x")])
    assert refused.reason == (
        "0/3 nodes are available: 1 node: node had untolerated taint {dedicated: }; "
        "1 node: node has no devices of gpushare.dra.dev; 1 node: node is unschedulable"
    )


def test_device_taints_need_request_tolerations():
    """A tainted device is skipped unless the request tolerates the taint."""
    tainted = cluster(node("n", 1), slices=[_taint(s) for s in slices_of([node("n", 1)])])
    refused = unplaceable(tainted, [claim("a")])
    assert "gpu-0 tainted gpu-broken=:NoSchedule, not tolerated" in refused.reason
    toleration = {"key": "gpu-broken", "operator": "Exists", "effect": "NoSchedule"}
    result = placed(tainted, [claim("b", request(tolerations=[toleration]))]).claims[0].results[0]
    assert result["tolerations"] == [toleration]


def _taint(slice_):
    """Taint every device of a slice."""
    for device in slice_["spec"]["devices"]:
        device["taints"] = [{"key": "gpu-broken", "effect": "NoSchedule"}]
    return slice_


# -- configs and placement ----------------------------------------------------------------


def test_allocation_copies_class_config_then_claim_config():
    """Config is copied FromClass (per result request) and then FromClaim, in that order."""
    snapshot = cluster(node("n", 1))
    c = claim(
        "a",
        request(device_class=NAMES.offline_device_class),
        configs=[config(isolation="fixed-share")],
    )
    entries = placed(snapshot, [c]).claims[0].config
    assert [e["source"] for e in entries] == ["FromClass", "FromClaim"]
    assert entries[0]["requests"] == ["gpu"]
    assert entries[0]["opaque"]["parameters"]["priority"] == "offline"


def test_invalid_claim_config_is_refused_naming_the_field():
    """A bad GpuShareConfig value is refused with the field path and allowed values."""
    snapshot = cluster(node("n", 1))
    refused = unplaceable(snapshot, [claim("a", configs=[config(isolation="sometimes")])])
    assert refused.refused
    assert "isolation" in refused.reason
    assert "sometimes" in refused.reason
    assert "best-effort" in refused.reason


def test_claim_placement_overrides_the_controller_default():
    """``placement: spread`` in a claim's config beats a binpack default."""
    snapshot = cluster(node("n", 2))
    first = claim("a", request(cores="10", memory="1Gi"))
    commit(snapshot, [first], placed(snapshot, [first]))
    spread = claim("b", request(cores="10", memory="1Gi"), configs=[config(placement="spread")])
    assert devices_of(placed(snapshot, [spread])) == ["n/gpu-1"]


def test_offline_share_prefers_a_card_running_online_work():
    """Offline work goes beside online work to harvest its idle compute, even under spread."""
    snapshot = cluster(node("n", 3))
    online = claim("on", request(cores="30", memory="2Gi", device_class=NAMES.online_device_class))
    commit(
        snapshot,
        [online],
        placed(snapshot, [online], the_pod=pod("on"), policy=Policy(online=Placement.SPREAD)),
    )
    on_device = devices_of(
        placed(snapshot, [claim("probe", request(cores="1", memory="1Mi"))], SPREAD)
    )
    offline = claim(
        "off", request(cores="30", memory="2Gi", device_class=NAMES.offline_device_class)
    )
    decision = placed(snapshot, [offline], SPREAD)
    assert devices_of(decision) == ["n/gpu-0"]
    assert on_device != ["n/gpu-0"]  # an online share under spread would avoid that card


def test_node_level_binpack_and_spread_choose_different_nodes():
    """Node-level binpack fills the busier node; spread picks the idler one."""
    snapshot = cluster(node("a", 1), node("b", 1))
    first = claim("a", request(cores="50", memory="1Gi"))
    commit(snapshot, [first], placed(snapshot, [first]))
    second = [claim("b", request(cores="10", memory="1Gi"))]
    assert placed(snapshot, second, BINPACK).node == "a"
    assert placed(snapshot, second, SPREAD).node == "b"


def test_same_input_gives_the_same_allocation():
    """Decisions are deterministic: ties end in names, never in dict or set order."""

    def run():
        snapshot = cluster(node("b", 2), node("a", 2))
        return placed(snapshot, [claim("x", request(cores="10", memory="1Gi"))], SPREAD)

    first, second = run(), run()
    assert first.node == second.node == "a"
    assert devices_of(first) == devices_of(second)


def test_status_allocation_has_node_selector_and_timestamp():
    """The allocation pins the node and carries allocationTimestamp (kube-scheduler 1.36)."""
    snapshot = cluster(node("n", 1))
    status = placed(snapshot, [claim("a")]).claims[0].status("2026-11-22T10:00:00Z")
    assert status["allocationTimestamp"] == "2026-11-22T10:00:00Z"
    assert status["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n"]


# -- review findings: search cost, malformed objects, messages ------------------------------


def test_count_that_fits_nowhere_costs_few_steps_over_many_nodes():
    """count: 8 on 50 busy 8-card nodes is refused early per node, within a small budget."""
    nodes = [node(f"n{i:02d}", 8) for i in range(50)]
    snapshot = cluster(*nodes, node("z-idle", 8))
    for i in range(50):
        busy = claim(f"busy{i}", request(cores="10", memory="1Gi"))
        commit(
            snapshot,
            [busy],
            placed(
                snapshot,
                [busy],
                the_pod=pod(f"b{i}", nodeSelector={"kubernetes.io/hostname": f"n{i:02d}"}),
            ),
        )
    decision = placed(snapshot, [claim("eight", request(count=8))], budget=500)
    assert decision.node == "z-idle"


def test_count_shortage_is_explained():
    """A count larger than the cards that can take it says how many are needed and free."""
    snapshot = cluster(node("n", 2))
    refused = unplaceable(snapshot, [claim("a", request(count=3, cores="10", memory="1Gi"))])
    assert "gpu: needs 3 cards, 2 can take the share now" in refused.reason


def test_first_available_reason_names_the_capacity_problem():
    """When one alternative never matches and the other lacks room, the reason is the room."""
    snapshot = cluster(node("n", 1))
    whole = claim("whole")
    commit(snapshot, [whole], placed(snapshot, [whole]))
    c = claim(
        "a",
        first_available(
            "gpu",
            request("big", selectors=[f'device.attributes["{DRIVER}"].productName == "H100"']),
            request("small", cores="30", memory="1Gi"),
        ),
    )
    refused = unplaceable(snapshot, [c])
    assert "no card with 30 cores, 1Gi memory free" in refused.reason
    assert "closest: n/gpu-0" in refused.reason


@pytest.mark.parametrize(
    "allocation",
    [
        {"devices": {"results": "x"}},
        {"devices": {"results": ["x"]}},
        {"devices": ["x"]},
        ["x"],
        {
            "devices": {
                "results": [{"request": "gpu", "driver": DRIVER, "pool": "n", "device": "gpu-0"}],
                "config": ["x"],
            }
        },
    ],
)
def test_a_malformed_allocated_claim_does_not_stop_allocation(allocation):
    """One claim the API could never have stored is reported, and others still get allocated."""
    bad = claim("bad")
    bad["status"] = {"allocation": allocation}
    snapshot = cluster(node("n", 2), claims=[bad])
    assert isinstance(place(snapshot, [claim("ok", request(cores="10", memory="1Gi"))]), Placed)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "pool", "generation"), "x"),
        (("spec", "devices"), ["x"]),
        (("spec", "devices", 0, "taints"), ["x"]),
        (("spec", "devices", 0, "capacity"), {"cores": "x"}),
        (("spec", "pool", "resourceSliceCount"), "x"),
    ],
)
def test_a_malformed_slice_is_reported_and_skipped(path, value):
    """A slice the API could never have stored is a problem, not a crash of every decision."""
    bad, good = slices_of([node("bad", 1)])[0], slices_of([node("good", 1)])
    target = bad
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    snapshot = cluster(node("bad", 1), node("good", 1), slices=[bad, *good])
    assert snapshot.problems
    assert placed(snapshot, [claim("ok")]).node == "good"


def test_a_malformed_slice_is_named_by_its_name_or_else_its_place() -> None:
    """The problem names the slice; one without a usable name is named by its index."""
    named, unnamed = slices_of([node("named", 1)])[0], slices_of([node("unnamed", 1)])[0]
    del named["spec"]["nodeName"]
    del unnamed["spec"]["nodeName"]
    unnamed["metadata"] = {"name": ["not", "a", "name"]}
    snapshot = cluster(node("named", 1), slices=[named, unnamed])
    assert [p for p in snapshot.problems if "node-local" in p] == [
        f"ResourceSlice {named['metadata']['name']}: not node-local; ignored",
        "ResourceSlice #1: not node-local; ignored",
    ]


@pytest.mark.parametrize(
    "devices",
    [
        {"requests": "x"},
        {"requests": ["x"]},
        {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, "count": "two"}}]},
        {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": DRIVER, "tolerations": ["x"]}}
            ]
        },
        {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}],
            "constraints": ["x"],
        },
    ],
)
def test_a_malformed_pending_claim_is_refused(devices):
    """A claim shape the API would not store is refused with a reason, never raised."""
    bad = claim("bad")
    bad["spec"]["devices"] = devices
    refused = unplaceable(cluster(node("n", 1)), [bad])
    assert refused.refused
    assert refused.reason.startswith("claim default/bad: ")


def test_a_device_taint_rule_keeps_untolerating_shares_off_the_card_it_selects():
    """A NoSchedule rule on node-1's card: refused there with the taint named; tolerated: placed."""
    rule = {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "xid-79"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": "n", "device": "gpu-0"},
            "taint": {"key": "example.com/xid", "value": "79", "effect": "NoSchedule"},
        },
    }
    snapshot = cluster(node("n", 1), taint_rules=[rule])
    refused = unplaceable(snapshot, [claim("a", request(cores="10", memory="1Gi"))])
    assert "gpu-0 tainted example.com/xid=79:NoSchedule, not tolerated" in refused.reason
    toleration = {"key": "example.com/xid", "operator": "Equal", "value": "79"}
    tolerant = claim("b", request(cores="10", memory="1Gi", tolerations=[toleration]))
    assert devices_of(placed(snapshot, [tolerant])) == ["n/gpu-0"]
