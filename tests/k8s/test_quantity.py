"""Kubernetes quantities: exact parsing and canonical formatting."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.k8s.quantity import (
    QuantityError,
    QuantityFormat,
    QuantityRangeError,
    ceil_int,
    format_quantity,
    parse_quantity,
    quantity_format,
)

GI = 1024**3


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("30", 30),
        ("5Gi", 5 * GI),
        ("1.5Gi", 3 * GI // 2),
        ("512Mi", 512 * 1024**2),
        ("1Ki", 1024),
        ("500m", Fraction(1, 2)),
        ("1k", 1000),
        ("2M", 2_000_000),
        ("1e3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("0", 0),
        ("+7", 7),
        ("-1", -1),
        (".5", Fraction(1, 2)),
        ("100n", Fraction(1, 10_000_000)),
    ],
)
def test_parse_is_exact(text: str, value: Fraction | int) -> None:
    """Each quantity form parses to its exact value."""
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "5GB", "5 Gi", "Gi", "1.2.3", "0x10", "5gi", "e3", "1" * 65])
def test_malformed_quantities_are_refused_with_the_value(text: str) -> None:
    """Strings that are not quantities raise an error naming the string and the format."""
    with pytest.raises(QuantityError, match="must match the Kubernetes quantity format"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("value", "fmt", "text"),
    [
        (5 * GI, QuantityFormat.BINARY, "5Gi"),
        (1536 * 1024**2, QuantityFormat.BINARY, "1536Mi"),
        (1536, QuantityFormat.BINARY, "1536"),
        (30, QuantityFormat.DECIMAL, "30"),
        (5000, QuantityFormat.DECIMAL, "5k"),
        (Fraction(1, 2), QuantityFormat.DECIMAL, "500m"),
        (0, QuantityFormat.BINARY, "0"),
        (-2048, QuantityFormat.BINARY, "-2Ki"),
    ],
)
def test_format_uses_the_largest_whole_suffix(
    value: Fraction | int, fmt: QuantityFormat, text: str
) -> None:
    """Formatting picks the largest suffix that keeps the number whole."""
    assert format_quantity(value, fmt) == text


def test_format_of_a_binary_input_is_remembered() -> None:
    """A request written as 5Gi is written back in binary form, one written as 30 in decimal."""
    assert (quantity_format("5Gi"), quantity_format("30")) == (
        QuantityFormat.BINARY,
        QuantityFormat.DECIMAL,
    )


def test_ceil_rounds_up_like_value() -> None:
    """Capacity arithmetic rounds fractional quantities up, never down."""
    assert (ceil_int(parse_quantity("500m")), ceil_int(parse_quantity("2"))) == (1, 2)


@given(st.integers(min_value=-(2**62), max_value=2**62), st.sampled_from(list(QuantityFormat)))
def test_format_then_parse_round_trips(value: int, fmt: QuantityFormat) -> None:
    """Any integer written by format_quantity parses back to the same value."""
    assert parse_quantity(format_quantity(value, fmt)) == value


def test_an_exponent_out_of_range_is_refused_before_any_arithmetic() -> None:
    """1e40 parses; 9e99999 (a 100,000-digit number, seconds per comparison) is refused."""
    assert parse_quantity("1e40") == 10**40
    assert parse_quantity("1e-40") == Fraction(1, 10**40)
    with pytest.raises(QuantityRangeError) as refused:
        parse_quantity("9e99999")
    assert str(refused.value) == "quantity '9e99999' has exponent 99999, out of range (-40 to 40)"
    assert refused.value.problem == "has exponent 99999, out of range (-40 to 40)"
