"""Keel's PVE CRS methods make the decisions PVE's HA manager makes, when PVE makes them.

Every folder in ``cases/`` is one of pve-ha-manager 5.2.0's CRS regression cases (inputs
as PVE ships them, ``expected.log`` the manager's decision lines from its
``log.expect``, ``DESCRIPTION`` ours).  ``pvesim`` replays the case round by round with
``keel.balance.pvecrs*`` deciding; the test compares every auto-rebalance migration
(time, guest, target, imbalance before and after to two decimals) and every placement
decision (start, rebalance-on-start, recovery, migration away from a node), line for
line and time for time.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path

import pytest

from import_cases import INPUTS
from pvesim import decisions, is_decision, load_case, parse_log_line, replay

CASES = Path(__file__).resolve().parent / "cases"
ALL = sorted(p.name for p in CASES.iterdir() if (p / "expected.log").exists())
REBALANCE = re.compile(r"^info\s+(\d+)\s+\S+/crm: auto rebalance - (migrate|relocate) (\S+) to (\S+) "
                       r"\(expected change for imbalance from ([\d.]+) to ([\d.]+)\)$")
# Where PVE's own case folders (with the complete log.expect) may be found locally.
PVE_CASES = Path(os.environ.get("KEEL_PVE_HA_CASES", "/work/shared/conformance/pve-ha-crs"))


def moves(lines: list[str]) -> list[tuple[int, str, str, str, str]]:
    """(time, guest, target, imbalance before, after) of each auto-rebalance decision."""
    out = []
    for line in lines:
        if m := REBALANCE.match(line):
            out.append((int(m.group(1)), m.group(3), m.group(4), m.group(5), m.group(6)))
    return out


def expected(name: str) -> list[str]:
    return (CASES / name / "expected.log").read_text().splitlines()


def test_every_case_is_here():
    assert len(ALL) == 29
    auto = [n for n in ALL if "auto-rebalance" in n]
    assert len(auto) == 17
    for name in ALL:
        description = (CASES / name / "DESCRIPTION").read_text()
        assert description.strip() and description.count("\n") == 1, name


@functools.lru_cache(maxsize=None)
def replayed(name: str) -> tuple[str, ...]:
    """The whole log the replay of fixture ``name`` writes."""
    return tuple(str(line) for line in replay(load_case(CASES / name)))


@pytest.mark.parametrize("name", ALL)
def test_case_makes_pves_decisions(name):
    got = [line for line in replayed(name) if is_decision(parse_log_line(line))]
    want = expected(name)
    assert moves(got) == moves(want), "auto-rebalance migrations differ"
    assert got == want


def test_the_rebalancing_cases_do_rebalance():
    """The expected files are not vacuous: these cases move guests, the others do not."""
    moving = {n for n in ALL if moves(expected(n))}
    assert moving == {
        "test-crs-dynamic-auto-rebalance2", "test-crs-dynamic-auto-rebalance3",
        "test-crs-dynamic-auto-rebalance-topsis2", "test-crs-dynamic-auto-rebalance-topsis3",
        "test-crs-dynamic-constrained-auto-rebalance1", "test-crs-dynamic-constrained-auto-rebalance2",
        "test-crs-dynamic-constrained-auto-rebalance3", "test-crs-dynamic-constrained-auto-rebalance4",
        "test-crs-static-auto-rebalance2", "test-crs-static-auto-rebalance3"}
    assert moves(expected("test-crs-dynamic-auto-rebalance2")) == [
        (80, "vm:101", "node2", "1.41", "0.94"), (160, "vm:102", "node3", "0.94", "0.35")]


def test_the_method_decides():
    """Same inputs, other method: the bruteforce case's moves, not the TOPSIS ones."""
    case = load_case(CASES / "test-crs-dynamic-auto-rebalance-topsis3")
    crs = {k: v for k, v in case.datacenter["crs"].items() if k != "ha-auto-rebalance-method"}
    case = dataclasses.replace(case, datacenter={**case.datacenter, "crs": crs})
    got = moves(decisions(replay(case)))
    assert got == moves(expected("test-crs-dynamic-auto-rebalance3"))
    assert got != moves(expected("test-crs-dynamic-auto-rebalance-topsis3"))


def test_a_higher_threshold_holds_back():
    case = load_case(CASES / "test-crs-static-auto-rebalance2")
    crs = {**case.datacenter["crs"], "ha-auto-rebalance-threshold": 1.5}
    case = dataclasses.replace(case, datacenter={**case.datacenter, "crs": crs})
    assert moves(decisions(replay(case))) == []


def test_hold_duration_delays_the_first_move():
    case = load_case(CASES / "test-crs-static-auto-rebalance2")
    crs = {**case.datacenter["crs"], "ha-auto-rebalance-hold-duration": 5}
    case = dataclasses.replace(case, datacenter={**case.datacenter, "crs": crs})
    first = moves(decisions(replay(case)))[0]
    assert first[0] == 120      # rounds 40..120 above the threshold, instead of 40..80


@pytest.mark.skipif(not PVE_CASES.is_dir(), reason=f"PVE's case folders are not at {PVE_CASES}")
def test_whole_logs_match_pves_where_its_cases_are_at_hand():
    """Stronger, where PVE's folders exist: the replay writes PVE's whole log, every line."""
    differing = []
    for name in ALL:
        pve = PVE_CASES / name
        for input_file in INPUTS:
            if (pve / input_file).exists():
                assert (pve / input_file).read_bytes() == (CASES / name / input_file).read_bytes()
        if list(replayed(name)) != (pve / "log.expect").read_text().splitlines():
            differing.append(name)
    assert differing == []
