"""The documentation says what the code does: its examples are parsed by the code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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


# -- links and config keys (issue 18) --------------------------------------------------------

ROOT = DOCS.parent
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SECTIONS = ("proxmox", "balancing", "engine", "web", "runners")
# The config reference blocks: each section once, in full.
REFERENCE = {"proxmox": "service.md", "engine": "service.md", "web": "service.md",
             "balancing": "balancing.md", "runners": "runners.md"}
# Mappings the reference documents once for two places (a scale set's runner block is
# "written over the provider's block": the same keys).
SAME_KEYS = {"runners.scale_sets[].providers[].runner.": "runners.providers[].runner."}


def prose(text: str) -> str:
    """A page without its code blocks (links there are examples, not links)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(page.read_text()), re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def test_every_relative_link_in_the_readme_and_docs_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(prose(page.read_text())):
            if re.match(r"^[a-z]+:", target):
                continue                                # https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading in {dest.name})")
    assert not broken, "\n".join(broken)


def test_the_packaged_docs_are_the_ones_the_readme_lists_for_users():
    readme = (ROOT / "README.md").read_text()
    users = readme.split("## Documentation", 1)[1].split("In the source tree only", 1)[0]
    listed = {f"docs/{name}" for name in re.findall(r"\(docs/([\w.-]+\.md)\)", users)}
    shipped = set((ROOT / "debian" / "pve-keel.docs").read_text().split())
    assert shipped == listed | {"README.md"}


def _flatten(data: Any, path: str, out: set[str]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            sub = f"{path}.{key}" if path else str(key)
            out.add(sub)
            _flatten(value, sub, out)
    elif isinstance(data, list):
        for item in data:
            _flatten(item, f"{path}[]", out)


def reference() -> dict[str, Any]:
    config: dict[str, Any] = {}
    for section, page in REFERENCE.items():
        block = next(b for b in blocks(page, "yaml") if re.match(rf"(?s)(\w+:.*\n)?{section}:\n", b)
                     and (section != "runners" or "version: 1" in b))
        config[section] = yaml.safe_load(block)[section]
    return config


def keys_the_code_reads(monkeypatch: Any, config: dict[str, Any]) -> dict[str, set[str]]:
    """Every mapping the config parser reads (path, list indices as []) -> the keys it asked
    for there, present or not."""
    from keel import config as cfg
    from keel import validate
    asked: dict[str, set[str]] = {}
    done = validate.Reader.done

    def recording(self: Any) -> None:
        asked.setdefault(re.sub(r"\[\d+\]", "[]", self.path), set()).update(map(str, self.seen))
        done(self)

    monkeypatch.setattr(validate.Reader, "done", recording)
    cfg.parse(config)
    return asked


def test_every_config_key_in_the_docs_exists_in_the_code_and_the_reverse(monkeypatch):
    config = reference()
    asked = keys_the_code_reads(monkeypatch, config)
    known = {f"{path}.{key}" if path else key for path, keys in asked.items() for key in keys}
    documented: set[str] = set()
    _flatten(config, "", documented)
    # documented -> code: every key of a mapping the code reads is one it asks for
    # (mappings of names, such as pin or memory.reserve, are the user's, not keys)
    unknown = sorted(p for p in documented if p.rpartition(".")[0] in asked and p not in known)
    assert not unknown, f"documented but not read by the code: {unknown}"
    # code -> documented: every key the code reads is in the reference
    def documented_as(path: str) -> str:
        for alias, original in SAME_KEYS.items():
            if path.startswith(alias):
                return original + path[len(alias):]
        return path
    missing = sorted(p for p in known - set(SECTIONS) if documented_as(p) not in documented)
    assert not missing, f"read by the code but not in the docs' config reference: {missing}"
    # and every section.key named in the prose of a page is a real key (or a secret's field,
    # as errors name it); ProxLB's own keys share the section names on the page about it
    from keel.runners.secrets import slots
    fields = {slot.field for slot in slots({})}
    named = set()
    for page in PAGES:
        if page.name != "balancing-from-proxlb.md":
            named |= set(re.findall(rf"`((?:{'|'.join(SECTIONS)})\.[a-z_]+(?:\.[a-z_]+)*)`", page.read_text()))
    wrong = sorted(n for n in named - fields if not n.endswith((".md", ".py"))
                   and re.sub(r"\[\d*\]", "[]", n) not in known | documented)
    assert not wrong, f"named in the docs but not config keys: {wrong}"


def test_a_section_of_the_config_is_called_by_its_name():
    """docs/development.md once called `proxmox:` "the `pve` section" (an unknown key)."""
    scenario = {"github", "faults"}                      # a simulator scenario's sections
    said = set()
    for page in PAGES:
        said |= set(re.findall(r"`([a-z_]+):?` section", prose(page.read_text())))
    assert said <= set(SECTIONS) | scenario, said - set(SECTIONS) - scenario
