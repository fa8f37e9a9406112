import pytest

from keel.errors import InvalidError
from keel.units import format_bytes, format_duration, parse_duration, parse_size


@pytest.mark.parametrize("text,expected", [
    (512, 512), ("512", 512), ("8GiB", 8 * 1024**3), ("8G", 8 * 1024**3), ("1.5TiB", int(1.5 * 1024**4)),
    ("100MB", 100_000_000), ("4 KiB", 4096), ("0", 0), (2.0, 2),
])
def test_sizes_as_people_write_them(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["8 gigs", "-1", "GiB", "", True, None, [1]])
def test_bad_sizes_name_the_key(bad):
    with pytest.raises(InvalidError, match="memory: expected a size"):
        parse_size(bad, "memory")


def test_negative_sizes_are_refused():
    with pytest.raises(InvalidError, match="memory: a size cannot be negative"):
        parse_size(-5, "memory")


@pytest.mark.parametrize("text,expected", [
    (30, 30.0), ("30", 30.0), ("90s", 90.0), ("2m30s", 150.0), ("1h", 3600.0), ("1d", 86400.0),
    ("250ms", 0.25), ("1.5m", 90.0), ("5min", 300.0),
])
def test_durations(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["soon", "5 parsecs", "m5", "-3s", -1, True])
def test_bad_durations_name_the_key(bad):
    with pytest.raises(InvalidError, match="hold"):
        parse_duration(bad, "hold")


@pytest.mark.parametrize("value,expected", [
    (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (8 * 1024**3, "8.0 GiB"), (3 * 1024**5, "3.0 PiB"),
])
def test_format_bytes(value, expected):
    assert format_bytes(value) == expected


@pytest.mark.parametrize("seconds,expected", [
    (5, "5s"), (75, "1m15s"), (3725, "1h02m"), (200000, "2d07h"),
])
def test_format_duration(seconds, expected):
    assert format_duration(seconds) == expected
