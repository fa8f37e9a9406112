"""The ``runners:`` section: Rungar's keys, strict, with every bad key named; schedules."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
import yaml

from keel import config as cfg
from keel.errors import InvalidError
from keel.runners.settings import merge, parse

GIB = 1024**3
SEED = yaml.safe_load("""
github:
  url: https://github.com/my-org
  app_client_id: Iv23liAbCdEf123456
  app_installation_id: 12345678
  app_private_key_path: /etc/pve/priv/keel/github-app.pem
providers:
  - name: pve
    type: proxmox
    nodes: [pve1, pve2, pve3]
    runner: {template: 9000, pool: runners}
scale_sets:
  - name: rungar-c2-m4
    max_runners: 16
    schedule:
      timezone: Europe/Vilnius
      windows:
        - {days: [mon-fri], from: "08:00", to: "19:00", min_runners: 2}
    providers:
      - {name: pve, runner: {cores: 2, memory: 4GiB}}
  - name: rungar-c4-m8
    max_runners: 8
    providers:
      - {name: pve, runner: {cores: 4, memory: 8GiB}}
  - name: rungar-c8-m16
    max_runners: 3
    priority: 10
    providers:
      - {name: pve, runner: {cores: 8, memory: 16GiB}}
metrics:
  enable: true
""")


def problems_of(data) -> dict[str, str]:
    with pytest.raises(InvalidError) as caught:
        parse(data)
    return caught.value.errors


def at(text: str, zone: str = "Europe/Vilnius") -> float:
    """Epoch seconds of a local wall-clock time ("2026-03-27 08:00") in ``zone``."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=zoneinfo.ZoneInfo(zone)).timestamp()


def with_windows(*windows, timezone="Europe/Vilnius", **extra):
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["scale_sets"][0]["schedule"] = {"timezone": timezone, "windows": list(windows)}
    data["scale_sets"][0].update(extra)
    return parse(data).scale_sets[0]


def test_the_seed_config_reads_whole():
    settings = parse(SEED)
    small, medium, large = settings.scale_sets
    assert [s.name for s in settings.scale_sets] == ["rungar-c2-m4", "rungar-c4-m8", "rungar-c8-m16"]
    assert (small.max_runners, medium.max_runners, large.max_runners) == (16, 8, 3)
    assert (small.priority, large.priority, small.placement) == (0, 10, "spread")
    runner = large.provider("pve").runner
    assert (runner.template, runner.cores, runner.memory_bytes, runner.pool) == (9000, 8, 16 * GIB, "runners")
    assert runner.jit_path == "/run/keel/jitconfig" and not runner.full_clone
    assert settings.provider("pve").nodes == ("pve1", "pve2", "pve3")
    assert settings.provider("pve").url is None            # this cluster
    assert settings.reconcile_interval_s == 30 and settings.metrics.enable
    assert settings.metrics.listen == "127.0.0.1:9102"
    assert settings.github.scope == ("orgs", "my-org")
    assert len(settings.installation_id) == 8 and settings.configured


def test_keel_yaml_takes_a_runners_section():
    config = cfg.parse({"runners": SEED})
    assert config.runners.scale_set("rungar-c8-m16").priority == 10
    assert not cfg.parse({}).runners.configured


def test_every_bad_key_is_named_once():
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["github"]["token"] = "ghp_secret"
    data["providers"][0]["runner"]["memroy"] = "4GiB"
    data["providers"].append({"name": "cloud", "type": "gcp"})
    data["scale_sets"][0]["max_runners"] = 0
    data["scale_sets"][1]["placement"] = "scatter"
    data["scale_sets"][1]["providers"].append("nowhere")
    data["scale_sets"][2]["min_runners"] = 4
    data["scale_sets"][2]["schedule"] = {"timezone": "Mars/Olympus", "windows": [
        {"days": ["mon", "funday"], "from": "25:00", "to": "18:00", "min_runners": 9}]}
    data["reconcile_interval"] = "2s"
    data["colour"] = "blue"
    errors = problems_of(data)
    assert errors == {
        "github.token": errors["github.token"],
        "providers[1].type": "Keel runs runners on Proxmox VE only (type: proxmox), got 'gcp'",
        "scale_sets[0].max_runners": "must be at least 1, got 0",
        "scale_sets[0].providers[0].runner.memroy": "unknown key",
        "scale_sets[1].providers[0].runner.memroy": "unknown key",
        "scale_sets[1].providers[1].name": "no provider named 'nowhere'",
        "scale_sets[1].placement": "must be one of spread, pack, got 'scatter'",
        "scale_sets[2].min_runners": "must be at most 3, got 4",
        "scale_sets[2].schedule.timezone": errors["scale_sets[2].schedule.timezone"],
        "scale_sets[2].schedule.windows[0].days": "unknown day 'funday' (use mon, tue, ... sun)",
        "scale_sets[2].schedule.windows[0].from": "expected a time HH:MM between 00:00 and 24:00, got '25:00'",
        "scale_sets[2].providers[0].runner.memroy": "unknown key",
        "reconcile_interval": "must be at least 5s",
        "colour": "unknown key",
    }
    assert "ghp_secret" not in str(errors) and "token_path" in errors["github.token"]
    assert "Mars/Olympus" in errors["scale_sets[2].schedule.timezone"]


def test_secrets_never_belong_in_the_file():
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["providers"][0].update(url="https://10.0.0.9:8006", token_id="keel@pve!r", token_secret="s3cr3t")
    data["github"]["app_private_key"] = "-----BEGIN KEY-----"
    errors = problems_of(data)
    assert set(errors) >= {"providers[0].token_secret", "github.app_private_key"}
    assert "s3cr3t" not in str(errors) and "BEGIN" not in str(errors)


@pytest.mark.parametrize("github,problem", [
    ({"url": "https://github.com/enterprises/acme", "app_client_id": "x", "app_installation_id": 1,
      "app_private_key_path": "/k"}, "an enterprise needs a token"),
    ({"url": "https://github.com/acme", "app_client_id": "x"}, "a GitHub App needs"),
    ({"url": "https://github.com/acme"}, "give a GitHub App"),
    ({"url": "https://github.com/acme", "token_path": "/t", "app_client_id": "x"}, "not both"),
    ({"url": "https://github.com/a/b/c", "token_path": "/t"}, "not a GitHub"),
])
def test_github_credentials_and_scope(github, problem):
    data = dict(SEED, github=github)
    assert problem in str(problems_of(data))


def test_scopes():
    for url, scope in (("https://github.com/acme", ("orgs", "acme")),
                       ("https://github.com/acme/app", ("repos", "acme/app")),
                       ("https://ghe.example.com/enterprises/acme", ("enterprises", "acme"))):
        data = dict(SEED, github={"url": url, "token_path": "/etc/pve/priv/keel/github-token"})
        assert parse(data).github.scope == scope


def test_a_scale_sets_runner_block_is_written_over_the_providers():
    assert merge({"template": 9000, "pool": "ci", "x": {"a": 1, "b": 2}},
                 {"pool": None, "cores": 2, "x": {"b": 3}}) == {"template": 9000, "x": {"a": 1, "b": 3},
                                                                "cores": 2}
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["scale_sets"][0]["providers"][0]["runner"].update(pool=None, template=9001, full_clone=True,
                                                            storage="ceph")
    runner = parse(data).scale_sets[0].providers[0].runner
    assert (runner.pool, runner.template, runner.full_clone, runner.storage) == (None, 9001, True, "ceph")


def test_a_runner_block_needs_its_size_and_a_storage_only_for_full_clones():
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["scale_sets"][0]["providers"][0]["runner"] = {"memory": "100MiB", "storage": "ceph"}
    errors = problems_of(data)
    assert errors["scale_sets[0].providers[0].runner.cores"].startswith("is required")
    assert "at least 128MiB" in errors["scale_sets[0].providers[0].runner.memory"]
    assert "only for a full clone" in errors["scale_sets[0].providers[0].runner.storage"]


def test_the_revision_names_the_runner_block():
    small = parse(SEED).scale_sets[0].providers[0].runner
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["scale_sets"][0]["providers"][0]["runner"]["memory"] = "6GiB"
    assert parse(data).scale_sets[0].providers[0].runner.revision != small.revision
    assert parse(SEED).scale_sets[0].providers[0].runner.revision == small.revision


def test_another_cluster_needs_its_token():
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["providers"][0]["url"] = "https://10.0.0.9:8006"
    assert "token_id" in str(problems_of(data))
    data["providers"][0].update(token_id="keel@pve!runners",
                                token_secret_path="/etc/pve/priv/keel/other-token")
    provider = parse(data).providers[0]
    assert provider.url == "https://10.0.0.9:8006" and provider.token_id == "keel@pve!runners"


# -- schedules ------------------------------------------------------------------------


def test_weekday_window_in_local_time_across_daylight_saving():
    small = parse(SEED).scale_sets[0]
    # Vilnius is UTC+2 in winter and UTC+3 from 29 March 2026 at 03:00.
    assert small.min_runners_at(at("2026-03-27 07:59")) == 0          # Friday, EET
    assert small.min_runners_at(at("2026-03-27 08:00")) == 2
    assert small.min_runners_at(at("2026-03-27 18:59")) == 2
    assert small.min_runners_at(at("2026-03-27 19:00")) == 0
    assert small.min_runners_at(at("2026-03-28 10:00")) == 0          # Saturday
    monday_8_eest = dt.datetime(2026, 3, 30, 5, 0, tzinfo=dt.timezone.utc).timestamp()
    assert small.min_runners_at(monday_8_eest) == 2                   # 08:00 local = 05:00 UTC now
    assert small.min_runners_at(monday_8_eest - 60) == 0
    # Back to UTC+2 on 25 October 2026: 08:00 local is 06:00 UTC again.
    monday_8_eet = dt.datetime(2026, 10, 26, 6, 0, tzinfo=dt.timezone.utc).timestamp()
    assert small.min_runners_at(monday_8_eet) == 2 and small.min_runners_at(monday_8_eet - 60) == 0


def test_a_window_past_midnight_belongs_to_the_day_it_opens():
    s = with_windows({"days": ["fri"], "from": "22:00", "to": "06:00", "min_runners": 3})
    assert s.min_runners_at(at("2026-03-20 21:59")) == 0    # Friday
    assert s.min_runners_at(at("2026-03-20 22:00")) == 3
    assert s.min_runners_at(at("2026-03-21 00:00")) == 3    # Saturday, from Friday's window
    assert s.min_runners_at(at("2026-03-21 05:59")) == 3
    assert s.min_runners_at(at("2026-03-21 06:00")) == 0
    assert s.min_runners_at(at("2026-03-21 22:00")) == 0    # Saturday opens no window
    sunday = with_windows({"days": ["sun"], "from": "23:00", "to": "01:00", "min_runners": 1})
    assert sunday.min_runners_at(at("2026-03-23 00:30")) == 1   # Monday, from Sunday's window


def test_a_window_over_the_autumn_night_keeps_to_the_wall_clock():
    s = with_windows({"days": ["sat"], "from": "22:00", "to": "06:00", "min_runners": 3})
    # Saturday 24 October 2026 22:00 EEST to Sunday 06:00 EET: nine hours, not eight.
    opens = at("2026-10-24 22:00")
    closes = dt.datetime(2026, 10, 25, 4, 0, tzinfo=dt.timezone.utc).timestamp()   # 06:00 EET
    assert closes - opens == 9 * 3600
    assert s.min_runners_at(opens) == 3 and s.min_runners_at(closes - 1) == 3
    assert s.min_runners_at(closes) == 0


def test_to_24_00_is_the_end_of_the_day():
    s = with_windows({"days": ["sat"], "from": "00:00", "to": "24:00", "min_runners": 4})
    assert s.min_runners_at(at("2026-03-21 00:00")) == 4
    assert s.min_runners_at(at("2026-03-21 23:59")) == 4
    assert s.min_runners_at(at("2026-03-22 00:00")) == 0
    late = with_windows({"days": ["sat"], "from": "20:00", "to": "24:00", "min_runners": 1})
    assert late.min_runners_at(at("2026-03-21 23:59")) == 1 and late.min_runners_at(at("2026-03-22 00:00")) == 0


def test_the_first_matching_window_wins_and_outside_every_window_the_scale_sets_own_applies():
    s = with_windows({"days": ["mon-fri"], "from": "12:00", "to": "13:00", "min_runners": 1},
                     {"days": ["mon-fri"], "from": "08:00", "to": "18:00", "min_runners": 5},
                     min_runners=2)
    assert s.min_runners_at(at("2026-03-23 12:30")) == 1
    assert s.min_runners_at(at("2026-03-23 09:00")) == 5
    assert s.min_runners_at(at("2026-03-23 19:00")) == 2
    utc = with_windows({"days": ["mon"], "from": "08:00", "to": "09:00", "min_runners": 1}, timezone=None)
    assert utc.schedule.timezone == "UTC"
    assert utc.min_runners_at(at("2026-03-23 08:30", "UTC")) == 1


def test_a_window_can_pause_the_scale_set():
    s = with_windows({"days": ["sat", "sun"], "from": "00:00", "to": "24:00", "max_runners": 0})
    assert s.max_runners_at(at("2026-03-21 10:00")) == 0
    assert s.max_runners_at(at("2026-03-23 10:00")) == 16
    data = yaml.safe_load(yaml.safe_dump(SEED))
    data["scale_sets"][0]["schedule"]["windows"][0]["min_runners"] = 17
    assert "max_runners (16)" in problems_of(data)["scale_sets[0].schedule.windows[0].min_runners"]


def test_a_template_is_a_vmid_a_name_or_one_per_node():
    def runner(template):
        data = {**SEED, "providers": [{**SEED["providers"][0], "runner": {"template": template}}]}
        return parse(data).scale_sets[0].providers[0].runner
    one, named, per_node = runner(9000), runner("runner-tpl"), runner({"pve2": 9001, "pve1": "9000"})
    assert (one.template, one.template_ids, one.template_text) == (9000, (9000,), "9000")
    assert (named.template, named.template_name, named.template_ids) == (0, "runner-tpl", ())
    assert per_node.templates == (("pve1", 9000), ("pve2", 9001))
    assert per_node.template_text == "pve1=9000, pve2=9001" and per_node.template_ids == (9000, 9001)
    assert len({one.revision, named.revision, per_node.revision}) == 3     # a new template: replaced
    assert runner("9000") == one
    at_key = "scale_sets[0].providers[0].runner.template"
    for bad, words in ((50, "at least 100"), ("not a name!", "not a VM name"), ([9000], "one per node"),
                       ({"pve1": "x"}, "expected a VMID"), ({"bad node!": 9000}, "node name")):
        data = {**SEED, "providers": [{**SEED["providers"][0], "runner": {"template": bad}}]}
        errors = problems_of(data)
        key = next(k for k in errors if k.startswith(at_key))
        assert words in errors[key], (bad, errors)


def test_a_rungar_file_pasted_whole_must_say_where_its_template_reads_the_jit_config():
    rungar = yaml.safe_load((__import__("pathlib").Path(__file__).parents[1] / "fixtures" / "rungar" /
                             "several-sizes.yaml").read_text())
    errors = problems_of(rungar)
    assert list(errors) == ["providers[0].runner.jit_path"]
    assert "/run/rungar/jitconfig" in errors["providers[0].runner.jit_path"] and \
        "/run/keel/jitconfig" in errors["providers[0].runner.jit_path"]
    rungar["providers"][0]["runner"]["jit_path"] = "/run/rungar/jitconfig"        # said: it keeps its meaning
    assert parse(rungar).scale_sets[2].providers[0].runner.jit_path == "/run/rungar/jitconfig"
    rungar["providers"][0]["runner"].pop("jit_path")
    for ss in rungar["scale_sets"]:                                                 # or said in every scale set
        ss["providers"][0]["runner"]["jit_path"] = "/run/ci/jit"
    assert parse(rungar).scale_sets[0].providers[0].runner.jit_path == "/run/ci/jit"
    keel_native = {k: v for k, v in SEED.items()}                                   # no version, pmxcfs paths
    assert parse(keel_native).scale_sets[0].providers[0].runner.jit_path == "/run/keel/jitconfig"


def test_files_outside_pmxcfs_are_named_with_where_to_copy_them():
    from keel.runners.settings import node_local
    rungar = yaml.safe_load((__import__("pathlib").Path(__file__).parents[1] / "fixtures" / "rungar" /
                             "several-sizes.yaml").read_text())
    rungar["providers"][0]["runner"]["jit_path"] = "/run/rungar/jitconfig"
    assert node_local(parse(rungar)) == [
        ("github.app_private_key_path", "/etc/rungar/app.pem", "/etc/pve/priv/keel/github-app.pem"),
        ("providers[0].token_secret_path", "/etc/rungar/pve-token", "/etc/pve/priv/keel/pve-pve-token"),
        ("providers[0].tls.ca_file", "/etc/rungar/pve-root-ca.pem", "/etc/pve/keel/pve-ca.pem")]
    assert node_local(parse(SEED)) == []
