"""terascale._units: one spelling of sizes, rates and times (SI vs binary), round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from terascale._errors import ConfigError
from terascale._units import (
    format_count,
    format_rate,
    format_size,
    format_time,
    parse_count,
    parse_rate,
    parse_size,
    parse_time,
)
from terascale.bench.allreduce import parse_size as bench_size


def test_sizes_si_and_binary() -> None:
    assert parse_size("64MB") == 64_000_000
    assert parse_size("64MiB") == 2 ** 26
    assert parse_size("64M") == 2 ** 26  # no B: binary, as dd and ls
    assert parse_size("4K") == parse_size("4KiB") == parse_size("4kib") == 4096
    assert parse_size("4KB") == parse_size("4kb") == 4000
    assert parse_size("1e6") == parse_size("1000000") == parse_size("1MB") == 10 ** 6
    assert parse_size("512B") == parse_size(" 512 b ") == parse_size(512) == 512
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("2TB") == 2 * 10 ** 12
    assert parse_size("0.1KiB") == 102  # fractions of a byte round


@pytest.mark.parametrize("bad", ["", "ten", "4Q", "4i", "4ib", "-4K",
                                 "4Mbit", "inf", "4 K B"])
def test_bad_sizes_name_the_flag(bad: str) -> None:
    with pytest.raises(ConfigError, match="--bytes"):
        parse_size(bad, flag="--bytes")


def test_bench_and_simulate_agree() -> None:
    # The two commands read one spelling: 64MB is 64e6 bytes in both.
    assert bench_size("64MB") == 64_000_000 and bench_size("64MiB") == 2 ** 26
    with pytest.raises(ConfigError, match="--sizes"):
        bench_size("3")


def test_rates_are_bits_per_second() -> None:
    assert parse_rate("10Gbit") == parse_rate("10Gbit/s") == parse_rate("10Gbps") == 1e10
    assert parse_rate("10Gb/s") == parse_rate("10gbit") == 1e10
    assert parse_rate("100Mbit") == 1e8
    assert parse_rate("1.25GB/s") == pytest.approx(1e10)  # bytes: times 8
    assert parse_rate("100MiB/s") == 100 * 2 ** 20 * 8
    assert parse_rate("5GB/s") == pytest.approx(4e10)
    assert parse_rate(1e9) == 1e9
    for bad in ("fast", "10G", "10GiB", "10Gibit", "0Gbit", "-1Gbit", "10 Gbit/h", "inf", "1e400",
                float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="--link"):
            parse_rate(bad, flag="--link")


def test_times() -> None:
    assert parse_time("5ms") == pytest.approx(5e-3)
    assert parse_time("25us") == parse_time("25µs") == pytest.approx(25e-6)
    assert parse_time("3ns") == pytest.approx(3e-9)
    assert parse_time("1.5") == parse_time("1.5s") == 1.5
    assert parse_time("2min") == 120.0 and parse_time("1h") == 3600.0
    for bad in ("soon", "5 parsecs", "-1s", "inf"):
        with pytest.raises(ConfigError, match="--latency"):
            parse_time(bad, flag="--latency")


def test_formats() -> None:
    assert format_size(4096) == "4 KiB"
    assert format_size(256 << 20) == "256 MiB"
    assert format_size(64e6, si=True) == "64 MB"
    assert format_size(100) == "100 B"
    assert format_rate(1e10) == "10 Gbit/s" and format_rate(5e5) == "500 kbit/s"
    assert format_time(2.5e-5) == "25.0 us"
    assert format_time(0.00512) == "5.12 ms"
    assert format_time(3.0) == "3.00 s"
    assert format_time(0.25, digits=3) == "250.000 ms"
    assert format_time(float("inf")) == "never"


@given(st.integers(min_value=0, max_value=2 ** 50), st.booleans())
def test_size_round_trip(nbytes: int, si: bool) -> None:
    text = format_size(nbytes, si=si).replace(" ", "")
    # :g keeps 6 significant digits: the round trip is exact to that precision
    assert parse_size(text) == pytest.approx(nbytes, rel=1e-5)


@given(st.sampled_from(["K", "M", "G", "T"]), st.integers(min_value=1, max_value=999))
def test_unit_multiples_round_trip_exactly(prefix: str, k: int) -> None:
    for unit, base in ((prefix + "iB", 1024), (prefix + "B", 1000)):
        n = parse_size(f"{k}{unit}")
        assert n == k * base ** ("KMGT".index(prefix) + 1)
        assert format_size(n, si=base == 1000).replace(" ", "") == f"{k}{unit}"


@given(st.floats(min_value=1.0, max_value=1e15, allow_nan=False))
def test_rate_round_trip(bits: float) -> None:
    assert parse_rate(format_rate(bits).replace(" ", "")) == pytest.approx(bits, rel=1e-5)


@given(st.floats(min_value=1e-7, max_value=1e5, allow_nan=False))
def test_time_round_trip(seconds: float) -> None:
    text = format_time(seconds, digits=6).replace(" ", "")
    assert parse_time(text) == pytest.approx(seconds, rel=1e-5, abs=1e-12)


def test_counts_are_si() -> None:
    assert parse_count("20k") == parse_count("20K") == 20_000
    assert parse_count("1.5M") == 1_500_000 and parse_count("2G") == 2 * 10 ** 9
    assert parse_count("300") == parse_count(300) == 300
    for bad in ("ten", "1MB", "-3k", "1Mi"):
        with pytest.raises(ConfigError, match="--sizes"):
            parse_count(bad, flag="--sizes")
    assert format_count(20_000) == "20k" and format_count(1_500_000) == "1.5M"


@given(st.integers(min_value=0, max_value=10 ** 13))
def test_count_round_trip(n: int) -> None:
    assert parse_count(format_count(n)) == pytest.approx(n, rel=1e-5)
