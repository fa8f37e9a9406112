"""The import direction of docs/development.md, enforced:
cli → engine/web → balance/runners → pve → model (and errors, units, validate).
The simulator stands apart: only the CLI and the demo start it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "backend" / "keel"

# What each part of keel may import from keel.
ALLOWED = {
    "model": {"model"},
    "errors": {"errors"},
    "files": {"files", "errors"},
    "units": {"units", "errors"},
    "validate": {"validate", "errors", "units"},
    "authz": {"authz", "errors"},
    "pve": {"pve", "model", "errors", "units", "validate", "authz"},
    "config": {"config", "pve", "balance", "runners", "errors", "files", "units", "validate", "engine"},
    "schedule": {"schedule", "validate", "errors", "units"},
    "balance": {"balance", "model", "schedule", "words", "pve", "errors", "units", "validate", "files"},
    "words": {"words"},
    "importers": {"importers", "config", "balance", "errors", "validate", "units", "schedule"},
    "store": {"store", "balance", "errors", "files"},
    "plan_view": {"plan_view", "balance", "status_view", "units"},
    "status_view": {"status_view", "balance", "model", "units", "errors"},
    "engine": {"engine", "balance", "pve", "runners", "config", "store", "files", "model", "words", "schedule",
               "errors", "units", "validate", "plan_view", "status_view", "authz"},
    "web": {"web", "engine", "pve", "config", "errors", "units", "validate", "authz"},
    "runners": {"runners", "pve", "model", "schedule", "words", "errors", "units",
                "validate", "files"},
    "sim": {"sim", "errors", "units", "validate", "balance", "model"},
}
# Third-party modules only some parts may import.
THIRD_PARTY = {"proxmoxer": {"pve"}, "requests": {"pve", "runners"},
               "werkzeug": {"sim", "engine", "web"}, "flask": {"engine", "web"}}


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        yield rel.parts[0].removesuffix(".py"), path


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("part,path", list(modules()), ids=lambda v: str(v).split("keel/")[-1])
def test_imports_go_one_way(part, path):
    for name in imports_of(path):
        top = name.split(".")[0]
        if top == "keel" and "." in name:
            target = name.split(".")[1]
            if part in ALLOWED:
                assert target in ALLOWED[part], f"{path.name}: {part} must not import keel.{target}"
            if target == "sim":
                assert part in ("sim", "cli", "demo"), f"{path.name}: only cli/demo start the simulator"
        if top in THIRD_PARTY:
            assert part in THIRD_PARTY[top], f"{path.name}: only {THIRD_PARTY[top]} may import {top}"


def test_modules_stay_small():
    big = [(str(p.relative_to(PACKAGE)), n) for _, p in modules()
           if (n := len(p.read_text().splitlines())) > 500]
    assert not big, f"split these modules: {big}"


# Inside keel.runners, one way too: each module imports only those before it here (lower
# layers), never one after it, even for type hints.  The passes work on ``state.Fleet``;
# ``service.RunnerService`` is a Fleet with the loop around it.
RUNNERS_LAYERS = ("spec", "activity", "settings", "placement", "scaler", "record", "demand", "metrics", "store",
                  "shared", "webhooks", "secrets", "github", "proxmox", "check", "state", "lifecycle",
                  "scaling", "fleet", "status", "service", "endpoint")


def runners_imports(path: Path) -> set[str]:
    """The keel.runners modules ``path`` imports, ``from keel.runners import x`` included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "keel.runners" else \
                [f"keel.runners.{alias.name}" for alias in node.names]
        found.update(n.split(".")[2] for n in names if n.startswith("keel.runners.") and n.count(".") >= 2)
    return found


@pytest.mark.parametrize("name", RUNNERS_LAYERS)
def test_the_runners_modules_import_one_way(name):
    below = set(RUNNERS_LAYERS[:RUNNERS_LAYERS.index(name)])
    wrong = runners_imports(PACKAGE / "runners" / f"{name}.py") - below - {name}
    assert not wrong, f"runners/{name}.py imports {sorted(wrong)}, which come after it in RUNNERS_LAYERS"


def test_every_runners_module_has_its_layer():
    modules = {p.stem for p in (PACKAGE / "runners").glob("*.py")} - {"__init__"}
    assert modules == set(RUNNERS_LAYERS)
