"""The balancing section: defaults, percentages, and every bad key named."""

import pytest

from keel import config as cfg
from keel.balance.settings import GiB, BalancingSettings, fraction, parse
from keel.errors import InvalidError


def test_defaults_are_careful():
    s = BalancingSettings()
    assert not s.enable and s.method == "keel" and s.mode == "used"
    assert s.guest_types == {"vm"}            # containers restart when moved: opt in
    assert s.weights == {"cpu": 1.0, "memory": 1.0, "disk": 0.0}
    assert s.hold == 3 and s.margin == 0.1 and s.headroom == 0.1


@pytest.mark.parametrize("raw,expected", [(0.1, 0.1), ("10%", 0.1), ("12.5 %", 0.125), (1, 1.0),
                                          ("0.3", 0.3), (True, None), ("ten", None), (None, None)])
def test_fraction(raw, expected):
    assert fraction(raw) == expected


def test_a_full_section():
    s = parse({
        "enable": True, "method": "topsis", "mode": "assigned", "resources": {"cpu": 2, "disk": 1},
        "guests": ["vm", "ct"], "scope": "ha", "imbalance": "pve", "threshold": "30%", "hotspot": False,
        "hold": 6, "margin": "5%", "cooldown": "2h", "limits": {"moves": 3, "gib": 50, "concurrent": 4,
                                                                 "per_node": 2, "move_timeout": "10m"},
        "window": "10m", "interval": "2m", "memory": {"headroom": "15%", "reserve": {"default": "4GiB", "pve1": "16GiB"}},
        "with_local_disks": True, "ignore": {"nodes": ["pve9"], "guests": [100, "db1"], "tags": ["frozen"], "pools": ["ci"]},
        "pin": {"101": ["pve1", "pve2"]}, "affinity": [{"name": "web", "guests": [100, 102]}],
        "anti_affinity": [{"name": "dns", "guests": ["dns1", "dns2"], "strict": False}],
        "pools": {"prod": {"type": "anti-affinity", "pin": ["pve1"], "strict": False}},
        "maintenance": ["pve4"], "schedule": {"timezone": "Europe/Berlin", "windows": [{"days": "sat-sun"}]},
        "ha_rules": False, "tags": False,
    })
    assert s.enable and s.method == "topsis" and s.mode == "assigned" and s.scope == "ha"
    assert s.weights == {"cpu": 2.0, "memory": 1.0, "disk": 1.0}
    assert s.guest_types == {"vm", "ct"} and s.threshold == 0.3 and s.hotspot is None
    assert (s.hold, s.margin, s.cooldown_s, s.window_s, s.interval_s) == (6, 0.05, 7200.0, 600.0, 120.0)
    assert (s.limits.moves, s.limits.bytes, s.limits.concurrent, s.limits.per_node) == (3, 50 * GiB, 4, 2)
    assert s.headroom == 0.15 and s.reserve_for("pve1") == 16 * GiB and s.reserve_for("pve2") == 4 * GiB
    assert s.ignore.guests == {"100", "db1"} and s.pins == {"101": ("pve1", "pve2")}
    assert [(g.name, g.kind, g.strict) for g in s.groups] == [("web", "affinity", True), ("dns", "anti-affinity", False)]
    assert s.pools["prod"].pin == ("pve1",) and s.maintenance == {"pve4"}
    assert s.schedule.windows[0].days == {5, 6}
    assert not s.use_ha_rules and not s.use_tags


def test_every_bad_key_is_named_with_its_path():
    with pytest.raises(InvalidError) as caught:
        cfg.parse({"balancing": {"method": "magic", "threshold": "lots", "limits": {"moves": -1, "speed": 3},
                                 "guests": ["vm", "pod"], "affinity": [{"guests": [1]}], "resources": {"cpu": 0, "memory": 0},
                                 "pools": {"prod": {"type": "together"}}, "schedule": {"timezone": "Nowhere/City"}}})
    errors = caught.value.errors
    assert set(errors) == {"balancing.method", "balancing.threshold", "balancing.limits.moves",
                           "balancing.limits.speed", "balancing.guests", "balancing.affinity[0].guests",
                           "balancing.resources", "balancing.pools.prod.type", "balancing.schedule.timezone"}
    assert str(caught.value).count("balancing.method") == 1     # listed once, not twice


def test_one_shot_limits_and_above_mean():
    s = BalancingSettings()
    assert s.above_mean == 0.10 and s.limits.oneshot_moves is None and s.limits.oneshot_bytes is None
    once = s.oneshot()
    assert once.limits.moves >= 10**9 and once.limits.bytes >= 2**62 and s.limits.moves == 10
    s = parse({"above_mean": "15%", "limits": {"oneshot": {"moves": 50, "gib": "1TiB"}}})
    assert s.above_mean == 0.15 and (s.limits.oneshot_moves, s.limits.oneshot_bytes) == (50, 1024 * GiB)
    assert s.oneshot().limits.moves == 50 and s.oneshot().limits.bytes == 1024 * GiB
    assert parse({"above_mean": False}).above_mean is None
    with pytest.raises(InvalidError) as caught:
        cfg.parse({"balancing": {"above_mean": "lots", "limits": {"oneshot": {"moves": -1, "speed": 2}}}})
    assert set(caught.value.errors) == {"balancing.above_mean", "balancing.limits.oneshot.moves",
                                        "balancing.limits.oneshot.speed"}
