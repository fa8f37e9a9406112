"""Placement rules written as guest tags: ProxLB's and Keel's own.

| tag                         | Keel tag                   | meaning                         |
|-----------------------------|----------------------------|---------------------------------|
| ``plb_affinity_<group>``    | ``keel-affinity-<group>``  | keep the group on one node      |
| ``plb_anti_affinity_<group>``| ``keel-anti-affinity-<group>`` | one member per node        |
| ``plb_ignore_<anything>``   | ``keel-ignore``            | never move it                   |
| ``plb_pin_<node>``          | ``keel-pin-<node>``        | only on these nodes (several tags: any of them) |

A ProxLB user's cluster works unchanged.  Tags are matched case-insensitively, as PVE
stores them in lower case.  ``keel-runner`` marks a runner VM, which is never moved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RUNNER_TAG = "keel-runner"


@dataclass
class TagRules:
    affinity: set[str] = field(default_factory=set)
    anti_affinity: set[str] = field(default_factory=set)
    ignore: bool = False
    pins: set[str] = field(default_factory=set)
    runner: bool = False


def read_tags(tags: tuple[str, ...] | list[str]) -> TagRules:
    rules = TagRules()
    for raw in tags:
        tag = raw.lower()
        if tag.startswith("plb_anti_affinity_"):
            rules.anti_affinity.add(tag[len("plb_anti_affinity_"):])
        elif tag.startswith("keel-anti-affinity-"):
            rules.anti_affinity.add(tag[len("keel-anti-affinity-"):])
        elif tag.startswith("plb_affinity_"):
            rules.affinity.add(tag[len("plb_affinity_"):])
        elif tag.startswith("keel-affinity-"):
            rules.affinity.add(tag[len("keel-affinity-"):])
        elif tag.startswith("plb_ignore_") or tag == "keel-ignore":
            rules.ignore = True
        elif tag.startswith("plb_pin_"):
            rules.pins.add(tag[len("plb_pin_"):])
        elif tag.startswith("keel-pin-"):
            rules.pins.add(tag[len("keel-pin-"):])
        elif tag == RUNNER_TAG or tag.startswith(RUNNER_TAG + "-"):
            rules.runner = True
    return rules
