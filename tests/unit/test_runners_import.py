"""``keel import-rungar``: a Rungar config becomes Keel's runners: section, key for key."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml

from keel import config as cfg
from keel.cli import Env, main
from keel.errors import InvalidError
from keel.importers.rungar import convert, import_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rungar"
SECRETS = {
    "several-sizes.yaml": [],
    "everything.yaml": ["MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu", "BEGIN RSA",
                        "0a1b2c3d-4e5f-6789-abcd-ef0123456789", "ef0123456789"],
}
# Keys that are Rungar's own business, or secrets, and so are not carried over as they are.
NOT_KEY_FOR_KEY = {"socket", "log_level", "log_format", "events.file", "app_private_key",
                   "app_private_key_path", "token", "token_path", "token_secret", "token_secret_path",
                   "ca_file"}      # a CA file on Rungar's node moves to pmxcfs (test below)


def paths(data, prefix=""):
    """Every (dotted key path, leaf value); list items by their name when they have one."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(data, list) and all(isinstance(i, dict) and "name" in i for i in data):
        for item in data:
            yield from paths({k: v for k, v in item.items() if k != "name"}, f"{prefix}[{item['name']}]")
    else:
        yield prefix, data


def test_every_fixture_is_tested():
    assert sorted(p.name for p in FIXTURES.iterdir()) == sorted(SECRETS)


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_fixture_converts_to_a_config_keel_accepts(name):
    text = import_file(FIXTURES / name)
    config, notes = convert((FIXTURES / name).read_text(), str(FIXTURES / name))
    assert yaml.safe_load(text) == config                  # comments change nothing
    assert text.startswith("# Keel config converted by `keel import-rungar`")
    keel = cfg.parse(yaml.safe_load(text), name)
    assert keel.runners.configured and keel.runners.scale_sets


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_no_secret_value_appears_anywhere(name):
    text = import_file(FIXTURES / name)
    config, notes = convert((FIXTURES / name).read_text(), name)
    everything = "\n".join([text, repr(config), repr(notes)])
    for secret in SECRETS[name]:
        assert secret not in everything


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_rungars_keys_carry_over_key_for_key(name):
    rungar = yaml.safe_load((FIXTURES / name).read_text())
    keel = yaml.safe_load(import_file(FIXTURES / name))["runners"]
    dropped_providers = {p["name"] for p in rungar.get("providers", []) if p.get("type") != "proxmox"}
    dropped_sets = {s["name"] for s in rungar["scale_sets"]
                    if all((p if isinstance(p, str) else p["name"]) in dropped_providers for p in s["providers"])}
    converted = dict(paths(keel))
    for path, value in paths(rungar):
        if path in NOT_KEY_FOR_KEY or path.rsplit(".", 1)[-1] in NOT_KEY_FOR_KEY or any(
                f"providers[{d}]" in path for d in dropped_providers) or any(
                path.startswith(f"scale_sets[{d}]") for d in dropped_sets):
            continue
        if path.startswith("scale_sets") and path.endswith(".providers"):
            value = [p for p in value if (p if isinstance(p, str) else p["name"]) not in dropped_providers]
            if not value:
                continue
        assert converted.get(path) == value, path


def test_the_seed_example_behaves_the_same():
    keel = cfg.parse(yaml.safe_load(import_file(FIXTURES / "several-sizes.yaml"))).runners
    small, medium, large = keel.scale_sets
    assert [(s.name, s.max_runners, s.priority) for s in keel.scale_sets] == [
        ("rungar-c2-m4", 16, 0), ("rungar-c4-m8", 8, 0), ("rungar-c8-m16", 3, 10)]
    assert small.schedule.timezone == "Europe/Vilnius"
    assert small.schedule.windows[0].extra["min_runners"] == 2
    runner = large.provider("pve").runner
    assert (runner.template, runner.cores, runner.memory_bytes, runner.pool) == (9000, 8, 16 << 30, "runners")
    assert runner.jit_path == "/run/rungar/jitconfig"       # what a Rungar template reads
    provider = keel.provider("pve")
    assert provider.nodes == ("pve1", "pve2", "pve3") and provider.url == "https://pve.example.com:8006"
    assert provider.token_secret_path == "/etc/pve/priv/keel/pve-token-secret"
    assert keel.github.app_private_key_path == "/etc/pve/priv/keel/github-app.pem"
    assert keel.metrics.enable


def test_files_on_rungars_node_move_to_pmxcfs_with_a_note_to_copy_them():
    text = import_file(FIXTURES / "several-sizes.yaml")
    keel = cfg.parse(yaml.safe_load(text)).runners
    assert keel.provider("pve").ca_file == "/etc/pve/keel/pve-ca.pem"
    assert "Rungar read provider pve's CA from /etc/rungar/pve-root-ca.pem" in " ".join(text.split())
    assert "Copy it to /etc/pve/keel/pve-ca.pem" in " ".join(text.split())
    from keel.runners.settings import node_local
    assert node_local(keel) == []                       # nothing left on one node only
    everything = cfg.parse(yaml.safe_load(import_file(FIXTURES / "everything.yaml"))).runners
    assert everything.provider("lab").ca_file == "/etc/pve/pve-root-ca.pem"      # already in pmxcfs: kept


def test_what_is_not_carried_over_is_listed_with_why():
    text = import_file(FIXTURES / "everything.yaml")
    tail = text.split("# Not carried over from Rungar:")[1]
    for what in ("socket:", "log_level:", "log_format:", "providers[compute1]:", "providers[gcp]:",
                 "scale_sets[acme-gpu]:", "events.file:", "github.app_private_key:",
                 "providers[lab].token_secret:"):
        assert what in tail, what
    keel = cfg.parse(yaml.safe_load(text)).runners
    assert [s.name for s in keel.scale_sets] == ["acme-c4-m8"]
    assert [p.name for p in keel.scale_sets[0].providers] == ["lab", "lab2"]
    assert keel.scale_sets[0].providers[1].runner.cores == 4          # lab2's block over lab's anchor
    assert "/etc/pve/priv/keel/github-app.pem: put it there" in text


@pytest.mark.parametrize("text", ["", "just text", "[1, 2]", "github: [", "colour: blue"])
def test_what_is_not_a_rungar_config_is_refused(text):
    with pytest.raises(InvalidError):
        convert(text, "x.yaml")


def test_the_command(tmp_path):
    out, err = StringIO(), StringIO()
    assert main(["import-rungar", str(FIXTURES / "several-sizes.yaml")], Env(out, err, None, {})) == 0
    assert yaml.safe_load(out.getvalue())["runners"]["scale_sets"][2]["priority"] == 10
    target = tmp_path / "runners.yaml"
    assert main(["import-rungar", str(FIXTURES / "everything.yaml"), "-o", str(target)],
                Env(StringIO(), err, None, {})) == 0
    assert "read its comments" in err.getvalue() and target.read_text().startswith("# Keel config")
    assert main(["import-rungar", str(tmp_path / "missing.yaml")], Env(out, err, None, {})) == 3
