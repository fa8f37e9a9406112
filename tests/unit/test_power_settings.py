"""The ``balancing.power`` section: defaults, the short schedule forms, and every bad key named."""

import calendar
import json

import pytest
import yaml

from keel import config as cfg
from keel.balance.power_settings import PowerSettings, parse
from keel.balance.settings import BalancingSettings
from keel.balance.settings import parse as parse_balancing
from keel.balance.settings import read as read_balancing
from keel.errors import InvalidError
from keel.validate import Problems, Reader


def at(text: str) -> float:
    """Epoch seconds of a UTC time such as "2026-03-02 07:30" (a Monday)."""
    import time
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M")))


def test_defaults_are_off_and_careful():
    p = PowerSettings()
    assert p.mode == "off" and p.nodes == () and p.min_awake == 2 and not p.allow_bare_majority
    assert p.spare_nodes == 1 and p.cpu_line == 0.75 and p.memory_line == 0.80
    assert p.hold_s == 1800 and p.never_sleep == () and p.wake_all == ()
    assert p.wake_timeout_s == 600 and p.watts_for("pve1") == 150
    assert BalancingSettings().power == p
    assert parse_balancing({}).power == p


def test_a_full_section():
    p = parse({
        "mode": "recommend", "nodes": ["pve5", "pve6"], "min_awake": 3, "allow_bare_majority": True,
        "headroom": {"cpu": "70%", "memory": 0.9, "spare_nodes": 2}, "hold": "1h",
        "never_sleep": ["mon-fri 07:00-19:00", "sat 09:00-12:00"], "wake_all": "mon-fri 07:30",
        "timezone": "Europe/Berlin", "watts_per_node": {"default": 120, "pve5": 90.5},
        "wake_timeout": "15m",
    })
    assert p.mode == "recommend" and p.nodes == ("pve5", "pve6") and p.min_awake == 3
    assert p.allow_bare_majority and p.cpu_line == 0.7 and p.memory_line == 0.9 and p.spare_nodes == 2
    assert p.hold_s == 3600 and p.wake_timeout_s == 900 and p.timezone == "Europe/Berlin"
    assert p.watts_for("pve5") == 90.5 and p.watts_for("pve6") == 120
    assert [w.text for w in p.never_sleep] == ["mon-fri 07:00-19:00", "sat 09:00-12:00"]
    assert [w.text for w in p.wake_all] == ["mon-fri 07:30"]


def test_yaml_off_is_a_boolean_and_still_means_off():
    """PyYAML reads a bare ``off`` as false: ``mode: off`` must still work."""
    data = yaml.safe_load("mode: off\n")
    assert data == {"mode": False}
    assert parse(data).mode == "off"


def test_the_section_is_in_the_config_file(tmp_path):
    path = tmp_path / "keel.yaml"
    path.write_text("proxmox: {url: 'https://127.0.0.1:8006'}\n"
                    "balancing:\n  power:\n    mode: automatic\n    nodes: [pve7, pve8]\n")
    config = cfg.load(path)
    assert config.balancing.power.mode == "automatic" and config.balancing.power.nodes == ("pve7", "pve8")


@pytest.mark.parametrize("section,path,words", [
    ({"mode": "sometimes"}, "balancing.power.mode", "must be one of off, recommend, automatic"),
    ({"mode": True}, "balancing.power.mode", "must be one of off, recommend, automatic"),
    ({"nodes": "pve1 pve1"}, "balancing.power.nodes", "pve1 is listed twice"),
    ({"min_awake": 0}, "balancing.power.min_awake", "must be at least 1"),
    ({"allow_bare_majority": "yes"}, "balancing.power.allow_bare_majority", "true or false"),
    ({"headroom": {"cpu": "120%"}}, "balancing.power.headroom.cpu", "expected a fraction"),
    ({"headroom": {"memory": 0}}, "balancing.power.headroom.memory", "above 0"),
    ({"headroom": {"spare_nodes": -1}}, "balancing.power.headroom.spare_nodes", "at least 0"),
    ({"headroom": {"disk": 0.5}}, "balancing.power.headroom.disk", "unknown key"),
    ({"hold": "soon"}, "balancing.power.hold", ""),
    ({"never_sleep": "mon-fri 07:00"}, "balancing.power.never_sleep", "DAYS HH:MM-HH:MM"),
    ({"never_sleep": ["mon-fry 07:00-19:00"]}, "balancing.power.never_sleep[0]", "unknown day"),
    ({"never_sleep": "mon 25:00-26:00"}, "balancing.power.never_sleep", "HH:MM"),
    ({"wake_all": "mon-fri 07:00-08:00"}, "balancing.power.wake_all", "DAYS HH:MM"),
    ({"wake_all": 730}, "balancing.power.wake_all", "a string"),
    ({"timezone": "Mars/Olympus"}, "balancing.power.timezone", "unknown time zone"),
    ({"watts_per_node": -3}, "balancing.power.watts_per_node", "at least 0"),
    ({"watts_per_node": {"pve1": "lots"}}, "balancing.power.watts_per_node.pve1", "a number"),
    ({"wake_timeout": "0s"}, "balancing.power.wake_timeout", "above 0"),
    ({"wake_test_max_age": "monthly"}, "balancing.power.wake_test_max_age", "off"),
    ({"wake_test_max_age": True}, "balancing.power.wake_test_max_age", "off"),
    ({"wake_test_max_age": -1}, "balancing.power.wake_test_max_age", "negative"),
    ({"sleep_at_night": True}, "balancing.power.sleep_at_night", "unknown key"),
    # what root runs is never the config's to choose (docs/security.md)
    ({"ha_maintenance_command": ["sh", "-c", "id"]}, "balancing.power.ha_maintenance_command", "unknown key"),
    ("all of them", "balancing.power", "expected a mapping"),
])
def test_every_bad_key_is_named(section, path, words):
    with pytest.raises(InvalidError) as caught:
        problems = Problems("keel.yaml")
        read_balancing(Reader({"power": section}, "balancing", problems))
        problems.raise_if_any()
    assert path in caught.value.errors, caught.value.errors
    assert words in caught.value.errors[path]


def test_the_wake_test_max_age_defaults_to_30_days_and_0_or_off_turns_it_off():
    assert PowerSettings().wake_test_max_age_s == 30 * 86400
    assert parse({}).wake_test_max_age_s == 30 * 86400
    assert parse({"wake_test_max_age": "7d"}).wake_test_max_age_s == 7 * 86400
    assert parse({"wake_test_max_age": "12h"}).wake_test_max_age_s == 12 * 3600
    for off in ("off", "OFF", 0, "0", "0s", False):      # PyYAML reads a bare `off` as false
        assert parse({"wake_test_max_age": off}).wake_test_max_age_s is None, off
    assert parse(yaml.safe_load("wake_test_max_age: off\n")).wake_test_max_age_s is None


def test_never_sleep_windows_are_read_in_their_time_zone():
    p = parse({"never_sleep": "mon-fri 07:00-19:00", "timezone": "UTC"})
    assert p.never_sleep_window(at("2026-03-02 07:00")).text == "mon-fri 07:00-19:00"   # Monday
    assert p.never_sleep_window(at("2026-03-02 06:59")) is None
    assert p.never_sleep_window(at("2026-03-02 19:00")) is None
    assert p.never_sleep_window(at("2026-03-07 12:00")) is None                         # Saturday
    berlin = parse({"never_sleep": "mon-fri 07:00-19:00", "timezone": "Europe/Berlin"})
    assert berlin.never_sleep_window(at("2026-03-02 06:30")) is not None                # 07:30 there


def test_a_window_may_cross_midnight_and_cover_every_day():
    p = parse({"never_sleep": ["22:00-02:00"]})
    assert p.never_sleep_window(at("2026-03-04 23:00")) and p.never_sleep_window(at("2026-03-05 01:59"))
    assert p.never_sleep_window(at("2026-03-05 02:00")) is None


def test_wake_all_is_due_once_its_time_has_passed():
    p = parse({"wake_all": "mon-fri 07:30"})
    assert p.wake_all_due(at("2026-03-02 07:00"), at("2026-03-02 07:30"))        # Monday 07:30
    assert not p.wake_all_due(at("2026-03-02 07:30"), at("2026-03-02 08:00"))    # already past
    assert p.wake_all_due(at("2026-03-01 20:00"), at("2026-03-02 08:00"))        # slept through it
    assert not p.wake_all_due(at("2026-03-07 07:00"), at("2026-03-07 08:00"))    # Saturday
    assert p.next_wake_all(at("2026-03-06 08:00")) == at("2026-03-09 07:30")     # Friday → Monday


def test_the_settings_stay_plain_data_for_the_engines_api():
    """keel-engine shows the settings in force as JSON (``openapi.balancing_json``)."""
    from keel.engine.openapi import balancing_json
    settings = parse_balancing({"power": {"mode": "recommend", "nodes": ["pve5"], "never_sleep": "mon 07:00-19:00",
                                          "wake_all": "mon 07:30", "watts_per_node": 99}})
    text = json.dumps(balancing_json(settings))
    assert '"mode": "recommend"' in text and "mon 07:00-19:00" in text
