"""A replay of pve-ha-manager's regression-test simulator, just faithful enough for the
CRS cases in ``tests/conformance/cases``: it decides with Keel's ``keel.balance.pvecrs*``
and reproduces *when* PVE's HA stack makes those decisions."""

from __future__ import annotations

import re
from pathlib import Path

from pvesim.case import Case, load_case
from pvesim.world import LogLine, World


def replay(case: Case) -> list[LogLine]:
    """Run the case's command list through the simulated cluster; the log it writes."""
    return World(case).run()


# The manager's decisions: what the conformance tests compare, line for line and by time.
DECISION = re.compile(
    r"^(auto rebalance - "
    r"|got crm command: "
    r"|crm command '[^']*' - (migrate|relocate) service "
    r"|(migrate|relocate) service '"
    r"|service '[^']*': state changed from "
    r"|service \S+: re-balance selected "
    r"|service '[^']*' - rebalance-on-start request ignored"
    r"|recover service "
    r"|recovering service )")


def is_decision(line: LogLine) -> bool:
    return line.ident.endswith("/crm") and bool(DECISION.match(line.msg))


def parse_log_line(text: str) -> LogLine:
    """A line as PVE's simulator writes it: level, time, ident, message."""
    m = re.match(r"^(\S+)\s+(\d+)\s+(\S+): (.*)$", text)
    if not m:
        raise ValueError(f"not a simulator log line: {text!r}")
    return LogLine(int(m.group(2)), m.group(3), m.group(1), m.group(4))


def decisions(lines: list[LogLine]) -> list[str]:
    return [str(line) for line in lines if is_decision(line)]


def replay_folder(folder: Path) -> list[LogLine]:
    return replay(load_case(folder))


__all__ = ["Case", "LogLine", "World", "decisions", "is_decision", "load_case", "parse_log_line",
           "replay", "replay_folder"]
