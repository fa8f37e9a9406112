"""The documentation says what the code does: its examples are parsed by the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from balance_helpers import cluster, node, vm
from keel.balance.balancer import make_plan
from keel.balance.settings import BalancingSettings, parse

DOCS = Path(__file__).resolve().parents[2] / "docs"


def blocks(name: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / name).read_text(), re.S)


def test_the_balancing_config_reference_is_accepted_whole():
    block = next(b for b in blocks("balancing.md", "yaml") if b.startswith("balancing:"))
    settings = parse(yaml.safe_load(block)["balancing"])
    assert settings.pins["db1"] == ("pve1", "pve2") and settings.schedule is not None
    defaults = BalancingSettings()
    # the reference shows the defaults where it shows a plain value
    assert (settings.threshold, settings.hold, settings.margin, settings.cooldown_s) == \
        (defaults.threshold, defaults.hold, defaults.margin, defaults.cooldown_s)
    assert settings.limits.moves == defaults.limits.moves and settings.headroom == defaults.headroom


def test_the_plan_json_example_has_the_keys_keel_prints():
    example = json.loads(blocks("balancing.md", "json")[0])
    plan = make_plan(cluster([node("a"), node("b")], [vm(100 + i, "a") for i in range(8)]),
                     BalancingSettings()).to_json()
    assert set(example) == set(plan)
    assert set(example["moves"][0]) == set(plan["moves"][0])
    assert set(example["summary"]) == set(plan["summary"])
    assert set(example["before"]["imbalance"]) == set(plan["before"]["imbalance"])
    node_keys = set(next(iter(plan["before"]["nodes"].values())))
    assert set(example["before"]["nodes"]["pve1"]) == node_keys


def test_a_plan_read_back_from_its_json_is_the_same_plan():
    from keel.balance.plan import plan_from_json
    plan = make_plan(cluster([node("a"), node("b")], [vm(100 + i, "a") for i in range(8)]), BalancingSettings())
    assert plan.moves and plan_from_json(json.loads(json.dumps(plan.to_json()))).to_json() == plan.to_json()
