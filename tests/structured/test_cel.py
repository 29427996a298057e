"""DRA device selectors: kube-scheduler's CEL environment, evaluated fail-closed."""

from __future__ import annotations

import copy
import logging
import pickle
import threading
from typing import Any

import cel
import pytest

from dra_driver.api.errors import quote
from dra_driver.structured import cel as devcel

DRIVER = "gpushare.dra.dev"
RAW_DEVICE: dict[str, Any] = {
    "name": "gpu-0",
    "allowMultipleAllocations": True,
    "attributes": {
        "uuid": {"string": "GPU-1"},
        "index": {"int": 3},
        "mig": {"bool": False},
        "driverVersion": {"version": "550.54.15"},
        "cudaVersion": {"version": "12.4.0-rc.1+build.5"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:01:00.0"},
        "tags": {"strings": ["hopper", "nvlink"]},
        "ports": {"ints": [1, 2]},
        "flags": {"bools": [True]},
        "compat": {"versions": ["1.0.0", "2.0.0+meta"]},
        "other.example.com/model": {"string": "x1", "int": None},
    },
    "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}},
}
D = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'


def matches(expression: str, raw: dict[str, Any] = RAW_DEVICE) -> bool:
    return devcel.compile_selector(expression).matches(devcel.device_variable(DRIVER, raw))


def cel_bool(value: bool) -> str:
    return "true" if value else "false"


def evaluation_error(expression: str, raw: dict[str, Any] = RAW_DEVICE) -> str:
    with pytest.raises(devcel.CelEvaluationError) as caught:
        matches(expression, raw)
    return str(caught.value)


def compile_error(expression: str) -> str:
    with pytest.raises(devcel.CelCompileError) as caught:
        devcel.compile_selector(expression)
    return str(caught.value)


def test_device_variable_splits_domains_and_converts_values() -> None:
    """Names split into domain and id (the driver's own by default) and values take CEL form."""
    assert devcel.device_variable(DRIVER, RAW_DEVICE) == {
        "driver": DRIVER,
        "allowMultipleAllocations": True,
        "attributes": {
            DRIVER: {
                "uuid": "GPU-1",
                "index": 3,
                "mig": False,
                "driverVersion": {"__semver__": "550.54.15"},
                "cudaVersion": {"__semver__": "12.4.0-rc.1"},
                "tags": ["hopper", "nvlink"],
                "ports": [1, 2],
                "flags": [True],
                "compat": [{"__semver__": "1.0.0"}, {"__semver__": "2.0.0"}],
            },
            "resource.kubernetes.io": {"pciBusID": "0000:01:00.0"},
            "other.example.com": {"model": "x1"},
        },
        "capacity": {
            DRIVER: {"memory": {"__quantity__": "85899345920"}, "cores": {"__quantity__": "100"}}
        },
    }


def test_device_variable_defaults_for_a_bare_device() -> None:
    """A device without attributes, capacity or the sharing flag gets empty maps and False."""
    assert devcel.device_variable("x.example.com", {"name": "d"}) == {
        "driver": "x.example.com",
        "allowMultipleAllocations": False,
        "attributes": {},
        "capacity": {},
    }


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f'device.driver == "{DRIVER}"', True),
        ('device.driver == "other.example.com"', False),
        (f'{D}.uuid == "GPU-1"', True),
        (f'{D}.uuid == "GPU-2"', False),
        (f"{D}.index == 3 && !{D}.mig", True),
        ('device.attributes["resource.kubernetes.io"].pciBusID.startsWith("0000:01")', True),
        ('device.attributes["other.example.com"].model == "x1"', True),
        ("device.allowMultipleAllocations", True),
        (f'{D}.driverVersion.isGreaterThan(semver("530.0.0"))', True),
        (f'{D}.driverVersion.isLessThan(semver("530.0.0"))', False),
        (f'{D}.driverVersion == semver("550.54.15")', True),
        (f'{D}.cudaVersion == semver("12.4.0-rc.1+other")', True),
        (f'{D}.cudaVersion.isLessThan(semver("12.4.0"))', True),
        (f"{D}.driverVersion.major() == 550 && {D}.driverVersion.minor() == 54", True),
        (f"{D}.driverVersion.patch() == 15", True),
        ('semver("9223372036854775807.0.0").major() == 9223372036854775807', True),
        (f'{C}.memory.compareTo(quantity("40Gi")) >= 0', True),
        (f'{C}.memory.compareTo(quantity("81Gi")) >= 0', False),
        (f'{C}.memory == quantity("80Gi")', True),
        (f'{C}.cores.isGreaterThan(quantity("99"))', True),
        (f'"numaNode" in {D}', False),
        (f'"uuid" in {D}', True),
        (f"has({D}.uuid)", True),
        (f"has({D}.numaNode)", False),
        (f'"nvlink" in {D}.tags', True),
        (f'{D}.tags.exists(t, t.startsWith("hop"))', True),
        (f"{D}.ports.all(p, p > 1)", False),
        (f"{D}.ports.exists_one(p, p == 2) && {D}.flags[0]", True),
        (f'{D}.compat.exists(v, v.isGreaterThan(semver("1.5.0")))', True),
        (f"{D}.ports.map(p, p * 10).filter(p, p > 10) == [20]", True),
        (f'{D}.uuid.lowerAscii() == "gpu-1" && {D}.uuid.upperAscii() == "GPU-1"', True),
        (f'{D}.uuid.matches("^GPU-[0-9]+$") && {D}.uuid.contains("U-")', True),
        (f"size({D}.tags) == 2 && string({D}.index) == '3' && int('3') == {D}.index", True),
        (f"type({D}.index) == int", True),
        # A false term decides && even though the other term fails, as in cel-go.
        ('device.driver == "other.example.com" && device.attributes["none"].x', False),
    ],
)
def test_selector_matches_like_kube_scheduler(expression: str, expected: bool) -> None:
    """Each selector gives the answer kube-scheduler gives for the same device."""
    assert matches(expression) is expected


SEMVER_PRECEDENCE = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.2.0",
    "1.10.0",
    "2.0.0",
]


@pytest.mark.parametrize("lower", range(len(SEMVER_PRECEDENCE) - 1))
def test_versions_follow_semver_precedence(lower: int) -> None:
    """semver.org ordering: prereleases before the release, numeric ids as numbers, then length."""
    low, high = SEMVER_PRECEDENCE[lower], SEMVER_PRECEDENCE[lower + 1]
    assert matches(f'semver("{low}").compareTo(semver("{high}")) == -1')
    assert matches(f'semver("{high}").compareTo(semver("{low}")) == 1')
    assert matches(f'semver("{low}").isLessThan(semver("{high}"))')
    assert matches(f'semver("{high}").isGreaterThan(semver("{low}"))')
    assert not matches(f'semver("{low}") == semver("{high}")')


@pytest.mark.parametrize(
    ("left", "right"), [("1.0.0+a", "1.0.0+b"), ("1.0.0-rc.1+x", "1.0.0-rc.1"), ("0.0.0", "0.0.0")]
)
def test_version_build_metadata_is_ignored(left: str, right: str) -> None:
    """Versions differing only in build metadata are equal by ==, compareTo and both predicates."""
    assert matches(f'semver("{left}") == semver("{right}")')
    assert matches(f'semver("{left}").compareTo(semver("{right}")) == 0')
    assert matches(f'!semver("{left}").isLessThan(semver("{right}"))')
    assert matches(f'!semver("{left}").isGreaterThan(semver("{right}"))')


@pytest.mark.parametrize(
    ("text", "valid", "normalized"),
    [
        ("1.2.3", True, True),
        ("0.1.0-alpha.1+build", True, True),
        ("v1.2.3", False, True),
        ("1.2", False, True),
        ("01.01.01", False, True),
        ("1", False, True),
        ("1.2-rc.1", False, False),
        ("1.2.3-01", False, False),
        ("1.2.3+", False, False),
        ("200K", False, False),
        ("9223372036854775808.0.0", False, False),
        ("", False, False),
    ],
)
def test_is_semver_with_and_without_normalization(text: str, valid: bool, normalized: bool) -> None:
    """isSemver is strict semver 2.0; with true it first strips v, pads and drops leading zeros."""
    assert matches(f'isSemver("{text}") == {cel_bool(valid)}')
    assert matches(f'isSemver("{text}", true) == {cel_bool(normalized)}')


@pytest.mark.parametrize(
    ("text", "same_as"), [("v1.2", "1.2.0"), ("01.01.01", "1.1.1"), ("1", "1.0.0")]
)
def test_normalized_semver_equals_its_canonical_form(text: str, same_as: str) -> None:
    """semver(s, true) yields the version Kubernetes' normalization describes."""
    assert matches(f'semver("{text}", true) == semver("{same_as}")')


@pytest.mark.parametrize(
    ("left", "right", "order"),
    [
        ("1Gi", "1024Mi", 0),
        ("1G", "1Gi", -1),
        ("500m", "0.5", 0),
        ("1k", "1000", 0),
        ("1e3", "1k", 0),
        ("2Ki", "2048", 0),
        ("100M", "0.1G", 0),
        ("50Mi", "50M", 1),
        ("-1", "0", -1),
    ],
)
def test_quantities_compare_by_value_across_suffixes(left: str, right: str, order: int) -> None:
    """compareTo, the predicates and == agree, whatever suffix each side is written with."""
    left, right = f'quantity("{left}")', f'quantity("{right}")'
    assert matches(f"{left}.compareTo({right}) == {order}")
    assert matches(f"{left}.isLessThan({right}) == {cel_bool(order == -1)}")
    assert matches(f"{left}.isGreaterThan({right}) == {cel_bool(order == 1)}")
    assert matches(f"({left} == {right}) == {cel_bool(order == 0)}")


@pytest.mark.parametrize(
    "expression",
    [
        'quantity("50k").add(quantity("20k")) == quantity("70k")',
        'quantity("50k").add(20) == quantity("50020")',
        'quantity("50k").sub(20000) == quantity("30k")',
        'quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20")',
        'quantity("1.5Gi").add(quantity("512Mi")) == quantity("2Gi")',
        'quantity("2").mul(3) == quantity("6")',
        'quantity("1Gi").asInteger() == 1073741824',
        'quantity("1e3").isInteger() && !quantity("1.5").isInteger()',
        '!quantity("10E").isInteger()',
        'quantity("-5m").sign() == -1 && quantity("0").sign() == 0 && quantity("3").sign() == 1',
        'quantity("1.5").asApproximateFloat() == 1.5',
        'isQuantity("5Gi") && !isQuantity("5 Gi") && !isQuantity("Gi")',
    ],
)
def test_quantity_arithmetic_and_conversions(expression: str) -> None:
    """add, sub, mul, asInteger, isInteger, sign, asApproximateFloat follow Kubernetes' library."""
    assert matches(expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "device.attributes['other.example.com'].numa",
            "CEL selector \"device.attributes['other.example.com'].numa\" failed: "
            "no such key: 'numa'",
        ),
        (
            "device.attributes['nothing.example.com'].x == 1",
            "CEL selector \"device.attributes['nothing.example.com'].x == 1\" failed: "
            "no such key: 'nothing.example.com'",
        ),
        (
            "semver('1.0.0').isGreaterThan(quantity('1'))",
            "CEL selector \"semver('1.0.0').isGreaterThan(quantity('1'))\" failed: "
            "isGreaterThan(): no such overload: isGreaterThan(semver, quantity)",
        ),
        (
            "quantity('1').compareTo(1)",
            "CEL selector \"quantity('1').compareTo(1)\" failed: "
            "compareTo(): no such overload: compareTo(quantity, int)",
        ),
        (
            "semver('1.0') == semver('1.0.0')",
            "CEL selector \"semver('1.0') == semver('1.0.0')\" failed: "
            'semver(): "1.0" is not a semantic version such as 1.2.3 or 1.2.3-rc.1',
        ),
        (
            "quantity('1.5').asInteger() == 1",
            "CEL selector \"quantity('1.5').asInteger() == 1\" failed: "
            "asInteger(): cannot convert value to integer",
        ),
        (
            "quantity('lots').isInteger()",
            "CEL selector \"quantity('lots').isInteger()\" failed: quantity(): quantity 'lots' "
            "must match the Kubernetes quantity format, e.g. '30', '5Gi', '512Mi', '500m' or '1e3'",
        ),
        (
            "quantity('1e999999999').sign() == 1",
            "CEL selector \"quantity('1e999999999').sign() == 1\" failed: "
            'quantity(): quantity "1e999999999" has an exponent beyond 1000',
        ),
        (
            "semver('1.0.0').sign() == 1",
            "CEL selector \"semver('1.0.0').sign() == 1\" failed: "
            "sign(): no such overload: sign(semver)",
        ),
        (
            "semver(1) == semver('1.0.0')",
            "CEL selector \"semver(1) == semver('1.0.0')\" failed: "
            "semver(): no such overload: semver(int)",
        ),
        (
            "isSemver('1.0', 1)",
            "CEL selector \"isSemver('1.0', 1)\" failed: "
            "isSemver(): no such overload: isSemver(string, int)",
        ),
        (
            "isQuantity(b'1')",
            "CEL selector \"isQuantity(b'1')\" failed: "
            "isQuantity(): no such overload: isQuantity(bytes)",
        ),
        (
            "quantity('2').mul(quantity('3')) == quantity('6')",
            "CEL selector \"quantity('2').mul(quantity('3')) == quantity('6')\" failed: "
            "mul(): no such overload: mul(quantity, quantity)",
        ),
        (
            "quantity('1').add(true) == quantity('2')",
            "CEL selector \"quantity('1').add(true) == quantity('2')\" failed: "
            "add(): no such overload: add(quantity, bool)",
        ),
    ],
)
def test_runtime_failures_raise_naming_the_expression(expression: str, message: str) -> None:
    """A missing key, a mixed-kind comparison or a bad helper argument is an error, not a match."""
    assert evaluation_error(expression) == message


@pytest.mark.parametrize(
    ("expression", "kind"),
    [
        ("device.driver", "string"),
        (f"{D}.index", "int"),
        ("1.5", "double"),
        (f"{D}.driverVersion", "semver"),
        ("quantity('1')", "quantity"),
        (f"{D}.tags", "list"),
        ("device.capacity", "map"),
        ("null", "null"),
    ],
)
def test_non_bool_result_is_an_error(expression: str, kind: str) -> None:
    """A selector must yield a bool; any other result is an error naming the type it yielded."""
    assert evaluation_error(expression) == (
        f"CEL selector {quote(expression)} evaluated to {kind}, want bool"
    )


def test_long_expression_is_shortened_in_messages() -> None:
    """A long expression is shown by its start only, so messages stay readable."""
    expression = "device.attributes['other.example.com'].missing" + " || false" * 20
    assert evaluation_error(expression) == (
        f"CEL selector \"{expression[:64]}\"... failed: no such key: 'missing'"
    )


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "device.driver ==",
            'invalid CEL selector "device.driver ==": <input>:1:17: Syntax error: mismatched '
            "input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', "
            "NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
        ),
        (
            "device.driver.?x",
            "invalid CEL selector \"device.driver.?x\": <input>:1:14: unsupported syntax '.?'",
        ),
        (
            "foo(device.driver)",
            'unsupported function "foo" in CEL selector "foo(device.driver)"; supported '
            "Kubernetes helpers: semver, isSemver, major, minor, patch, quantity, isQuantity, "
            "isInteger, asInteger, asApproximateFloat, sign, add, sub, mul, isGreaterThan, "
            "isLessThan, compareTo, lowerAscii, upperAscii",
        ),
        (
            "cel.bind(x, 1, x == 1)",
            'unsupported function "bind" in CEL selector "cel.bind(x, 1, x == 1)"; supported '
            "Kubernetes helpers: semver, isSemver, major, minor, patch, quantity, isQuantity, "
            "isInteger, asInteger, asApproximateFloat, sign, add, sub, mul, isGreaterThan, "
            "isLessThan, compareTo, lowerAscii, upperAscii",
        ),
        (
            "request.name == 'x'",
            'unknown variable "request" in CEL selector "request.name == \'x\'"; '
            'the only variable is "device"',
        ),
        (
            "device.attributes.exists(d, d == x)",
            'unknown variable "x" in CEL selector "device.attributes.exists(d, d == x)"; '
            'the only variable is "device"',
        ),
    ],
)
def test_compile_errors_say_why(expression: str, message: str) -> None:
    """Syntax errors, unknown functions and unknown variables are refused before any device."""
    assert compile_error(expression) == message


def test_expression_length_limit_is_10_kib() -> None:
    """10240 bytes compile; one byte more, or 10240 characters of multi-byte text, do not."""
    assert devcel.compile_selector("true" + " " * 10236).matches(
        devcel.device_variable(DRIVER, RAW_DEVICE)
    )
    too_long = "true" + " " * 10237
    assert compile_error(too_long) == (f'CEL selector "true{" " * 60}"... is longer than 10 KiB')
    multibyte = "device.driver == '" + "é" * 10000 + "'"
    assert len(multibyte) <= devcel.MAX_EXPRESSION_BYTES
    assert compile_error(multibyte).endswith("is longer than 10 KiB")


def test_compile_cache_returns_the_same_selector() -> None:
    """Compiling one expression twice yields the very same compiled selector."""
    first = devcel.compile_selector('device.driver == "cache.example.com"')
    assert devcel.compile_selector('device.driver == "cache.example.com"') is first
    assert devcel.compile_selector('device.driver == "other.example.com"') is not first


# One example per supported name; the example must make the library report that name.
BUILTIN_EXAMPLES = {
    "!_": "!false",
    "-_": "-device.attributes['other.example.com'].model.size() == -2",
    "_!=_": "1 != 2",
    "_%_": "5 % 3 == 2",
    "_&&_": "true && true",
    "_*_": "2 * 3 == 6",
    "_+_": "'a' + 'b' == 'ab'",
    "_-_": "3 - 1 == 2",
    "_/_": "7 / 2 == 3",
    "_<=_": "1 <= 1",
    "_<_": "1 < 2",
    "_==_": "1 == 1",
    "_>=_": "2 >= 2",
    "_>_": "2 > 1",
    "_?_:_": "(1 > 0 ? 'y' : 'n') == 'y'",
    "_[_]": "[1, 2][1] == 2",
    "_||_": "false || true",
    "@in": "2 in [1, 2]",
    "@not_strictly_false": "[1, 2].all(x, x > 0)",
    "size": "size('abc') == 3",
    "contains": "'abc'.contains('b')",
    "startsWith": "'abc'.startsWith('a')",
    "endsWith": "'abc'.endsWith('c')",
    "matches": "'abc'.matches('^a.c$')",
    "int": "int('42') == 42",
    "uint": "uint(1) == 1u",
    "double": "double(1) == 1.0",
    "string": "string(1) == '1'",
    "bytes": "bytes('a') == b'a'",
    "dyn": "dyn(1) == 1",
    "type": "type('a') == string",
    "duration": "duration('90s') > duration('1m')",
    "timestamp": "timestamp('2024-01-02T03:04:05Z') < timestamp('2025-01-01T00:00:00Z')",
    "getFullYear": "timestamp('2024-03-02T03:04:05Z').getFullYear() == 2024",
    "getMonth": "timestamp('2024-03-02T03:04:05Z').getMonth() == 2",
    "getDayOfYear": "timestamp('2024-03-02T03:04:05Z').getDayOfYear() == 61",
    "getDayOfMonth": "timestamp('2024-03-02T03:04:05Z').getDayOfMonth() == 1",
    "getDate": "timestamp('2024-03-02T03:04:05Z').getDate() == 2",
    "getDayOfWeek": "timestamp('2024-03-02T03:04:05Z').getDayOfWeek() == 6",
    "getHours": "timestamp('2024-03-02T03:04:05Z').getHours() == 3",
    "getMinutes": "timestamp('2024-03-02T03:04:05Z').getMinutes() == 4",
    "getSeconds": "duration('90s').getSeconds() == 90",
    "getMilliseconds": "timestamp('2024-03-02T03:04:05.250Z').getMilliseconds() == 250",
}
HELPER_EXAMPLES = {
    "semver": "semver('1.2.3') == semver('1.2.3')",
    "isSemver": "isSemver('1.2.3')",
    "major": "semver('1.2.3').major() == 1",
    "minor": "semver('1.2.3').minor() == 2",
    "patch": "semver('1.2.3').patch() == 3",
    "quantity": "quantity('1Ki') == quantity('1024')",
    "isQuantity": "isQuantity('1Ki')",
    "isInteger": "quantity('1Ki').isInteger()",
    "asInteger": "quantity('1Ki').asInteger() == 1024",
    "asApproximateFloat": "quantity('1.5').asApproximateFloat() > 1.4",
    "sign": "quantity('-1').sign() == -1",
    "add": "quantity('1').add(1) == quantity('2')",
    "sub": "quantity('1').sub(1) == quantity('0')",
    "mul": "quantity('2').mul(2) == quantity('4')",
    "isGreaterThan": "semver('2.0.0').isGreaterThan(semver('1.0.0'))",
    "isLessThan": "quantity('1').isLessThan(quantity('2'))",
    "compareTo": "semver('1.0.0').compareTo(semver('1.0.0')) == 0",
    "lowerAscii": "'ÀB'.lowerAscii() == 'Àb'",
    "upperAscii": "'àb'.upperAscii() == 'àB'",
}


def test_supported_lists_are_exactly_the_tested_ones() -> None:
    """Every name the evaluator accepts has an example below, and every example is accepted."""
    assert set(BUILTIN_EXAMPLES) == devcel._BUILTINS
    assert list(HELPER_EXAMPLES) == list(devcel._FUNCTIONS)


@pytest.mark.parametrize(
    ("name", "expression"), [*BUILTIN_EXAMPLES.items(), *HELPER_EXAMPLES.items()]
)
def test_each_supported_function_works(name: str, expression: str) -> None:
    """Each listed builtin or helper compiles, is the name the library reports, and evaluates."""
    assert name in cel.compile(expression).functions()
    assert matches(expression)


def test_device_that_kube_scheduler_cannot_convert_matches_nothing() -> None:
    """An invalid version or unknown value kind fails every selector, as in kube-scheduler."""
    raw = {
        "attributes": {
            "v": {"version": "1.0"},
            "odd": {"float": 1.5},
            "ok": {"int": 1},
            "n": {"int": "1"},
            "l": {"bools": [True, 0]},
        },
        "capacity": {"memory": {"value": "lots"}},
    }
    message = evaluation_error("true", raw)
    assert message == (
        'CEL selector "true" failed: the device cannot be used: attributes "v": "1.0" is not a '
        'semantic version such as 1.2.3 or 1.2.3-rc.1; attributes "odd": holds an unsupported '
        'value "float"; attributes "n": int value has the wrong type; attributes "l": bools '
        "value has the wrong type; capacity \"memory\": quantity 'lots' must match the Kubernetes "
        "quantity format, e.g. '30', '5Gi', '512Mi', '500m' or '1e3'"
    )


def test_plain_dict_device_is_evaluated_the_same() -> None:
    """A plain dict with the device_variable shape matches exactly like the cached value."""
    variable = devcel.device_variable(DRIVER, RAW_DEVICE)
    selector = devcel.compile_selector(f'{D}.driverVersion.isGreaterThan(semver("500.0.0"))')
    assert selector.matches(dict(variable)) is True
    assert devcel.compile_selector(f"{D}.index == 4").matches(dict(variable)) is False


def test_device_value_survives_copy_and_pickle_after_use() -> None:
    """A device value that has been evaluated can still be deep-copied and pickled."""
    variable = devcel.device_variable(DRIVER, RAW_DEVICE)
    selector = devcel.compile_selector(f'{D}.uuid == "GPU-1"')
    assert selector.matches(variable)
    for clone in (copy.deepcopy(variable), pickle.loads(pickle.dumps(variable))):  # noqa: S301
        assert clone == variable
        assert selector.matches(clone)
    broken = devcel.device_variable(DRIVER, {"attributes": {"v": {"version": "x"}}})
    with pytest.raises(devcel.CelEvaluationError, match="cannot be used"):
        selector.matches(copy.deepcopy(broken))


def test_helper_failures_are_not_logged_twice(caplog: pytest.LogCaptureFixture) -> None:
    """The library's warning for a failing helper is dropped: the CelEvaluationError says it."""
    with caplog.at_level(logging.DEBUG):
        evaluation_error("semver('bad') == semver('1.0.0')")
    assert [r for r in caplog.records if r.name == "cel"] == []


def test_matching_is_thread_safe() -> None:
    """Threads sharing compiled selectors and device values all get every answer right."""
    devices = [
        devcel.device_variable(
            DRIVER,
            {
                "attributes": {"index": {"int": i}, "driverVersion": {"version": f"{i}.0.0"}},
                "capacity": {"memory": {"value": f"{i}Gi"}},
            },
        )
        for i in range(300)
    ]
    selectors = {
        "index": devcel.compile_selector(f"{D}.index % 7 == 3"),
        "memory": devcel.compile_selector(f'{C}.memory.isLessThan(quantity("100Gi"))'),
        "version": devcel.compile_selector(f'{D}.driverVersion.compareTo(semver("150.0.0")) > 0'),
    }
    expected = {
        "index": [i % 7 == 3 for i in range(300)],
        "memory": [i < 100 for i in range(300)],
        "version": [i > 150 for i in range(300)],
    }
    start = threading.Barrier(4)
    wrong: list[str] = []

    def work(seed: int) -> None:
        order = [*range(seed * 75, 300), *range(seed * 75)]
        start.wait()
        for _ in range(5):
            for i in order:
                for name, selector in selectors.items():
                    if selector.matches(devices[i]) is not expected[name][i]:
                        wrong.append(f"{name} {i}")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
