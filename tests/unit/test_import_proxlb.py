"""``keel import-proxlb``: ProxLB's INI and YAML configs become a Keel config Keel accepts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from keel import config as cfg
from keel.balance.settings import GiB
from keel.errors import InvalidError
from keel.importers.proxlb import PASSWORD_FILE, TOKEN_FILE, convert, import_file, render

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "proxlb"
# Every secret in the fixtures, and a recognisable piece of each.
SECRETS = {
    "proxlb-0.9.conf": ["Lab-Pa55word-0.9", "Pa55word"],
    "proxlb-1.0.conf": ["S3cret%Proxlb;1.0", "S3cret"],
    "proxlb-1.1.yaml": ["yaml-Pa55!1.1.x", "Pa55!"],
    "proxlb-2.x.yaml": ["7f3c9a12-5b6e-4d8f-a1c2-93e4b5d6f708", "7f3c9a12", "93e4b5d6f708"],
}
FIXTURE_NAMES = sorted(SECRETS)


def converted(name: str):
    """(rendered text, config dict, notes, parsed Keel Config) for one fixture."""
    path = FIXTURES / name
    text = import_file(path)
    config, notes = convert(path.read_text(), str(path))
    return text, config, notes, cfg.parse(yaml.safe_load(text), name)


def unwrapped(text: str) -> str:
    """The comments as one line each paragraph: where the header wraps depends on the
    fixture's path, that is on where the checkout is."""
    return text.replace("\n# ", " ")


def dropped(notes) -> dict[str, str]:
    return {n.source: n.text for n in notes if n.at is None}


def test_every_fixture_is_tested():
    assert sorted(p.name for p in FIXTURES.iterdir()) == FIXTURE_NAMES


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_each_fixture_converts_to_a_config_keel_accepts(name):
    text, config, notes, keel = converted(name)
    assert yaml.safe_load(text) == config          # the comments change nothing
    assert keel.balancing.use_tags and keel.balancing.imbalance == "spread"
    assert text.startswith("# Keel config converted by `keel import-proxlb`")
    assert "# Not carried over from ProxLB:" in text
    assert "plb_affinity_<x>, plb_anti_affinity_<x>" in text and "balancing.tags: true" in text
    assert all(line.startswith("#") for line in text.splitlines()[:3])


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_no_secret_value_appears_anywhere(name):
    text, config, notes, keel = converted(name)
    everything = "\n".join([text, repr(config), repr(notes), repr(keel)])
    for secret in SECRETS[name]:
        assert secret not in everything
    assert "password" not in config.get("proxmox", {}) and "token_secret" not in config.get("proxmox", {})


def test_secrets_stay_out_of_error_messages_too():
    text = ("proxmox_api: {hosts: [pve1], user: root@pam, pass: [hunter2-secret], "
            "token_secret: {value: t0ken-secret}}\nbalancing: {balanciness: lots}\n")
    with pytest.raises(InvalidError) as caught:
        convert(text, "proxlb.yaml")
    assert "balancing.balanciness" in str(caught.value)
    assert "hunter2" not in str(caught.value) and "t0ken" not in str(caught.value)


def test_old_ini_of_the_0_9_readme():
    text, config, notes, keel = converted("proxlb-0.9.conf")
    assert "0.9-1.0.2 INI proxlb.conf" in unwrapped(text)
    p = keel.proxmox
    assert (p.url, p.user, p.password_file, p.token_file) == ("https://pve-lab1.example.net:8006", "root@pam",
                                                              PASSWORD_FILE, None)
    assert p.verify_tls is False and "WARNING" in text
    b = keel.balancing
    assert b.enable and b.guest_types == {"vm"} and b.mode == "used"
    assert b.weights == {"cpu": 1.0, "memory": 0.0, "disk": 0.0}          # method: cpu
    assert b.threshold == pytest.approx(0.15) and config["balancing"]["threshold"] == "15%"
    assert b.hotspot == 0.9                                                 # no cpu_threshold: Keel's default
    assert b.interval_s == 6 * 3600                                         # schedule: 6 (hours)
    assert b.limits.concurrent == 2                                         # 1.0 started all at once
    assert b.ignore.nodes == {"pve-lab9"} and b.ignore.guests == {"build01"}
    assert "test*" in dropped(notes)["[balancing] ignore_vms"]
    assert "plb_include_<x> to plb_affinity_<x>" in text


def test_ini_of_1_0_with_vm_balancing():
    text, config, notes, keel = converted("proxlb-1.0.conf")
    assert "1.0.3-1.0.6 INI proxlb.conf" in unwrapped(text)
    p = keel.proxmox
    assert p.url == "https://10.20.0.11:8006" and p.timeout_s == 15 and p.verify_tls
    assert "https://10.20.0.12:8443, https://[fd00:20::13]:8006" in text   # the other hosts, in a comment
    b = keel.balancing
    assert b.guest_types == {"vm", "ct"} and b.mode == "assigned"           # type: all
    assert b.weights == {"cpu": 0.0, "memory": 1.0, "disk": 0.0}
    assert b.threshold == pytest.approx(0.08) and b.limits.concurrent == 1   # parallel_migrations: 0
    assert b.maintenance == {"hv04"} and b.ignore.nodes == {"hv09", "hv10"} and b.ignore.guests == {"dc01", "dc02"}
    left = dropped(notes)
    assert set(left) >= {"[vm_balancing] mode_option", "[storage_balancing] enable", "[service] master_only",
                         "[service] log_verbosity"}
    assert "[update_service] enable" not in left                           # off: nothing to say
    assert "[service] config_version" not in left


def test_yaml_of_1_1():
    text, config, notes, keel = converted("proxlb-1.1.yaml")
    b = keel.balancing
    assert b.enable and b.guest_types == {"vm"}
    assert b.weights == {"cpu": 1.0, "memory": 0.0, "disk": 0.0}
    assert b.hotspot == pytest.approx(0.85)                                  # cpu_threshold, the method's
    assert "had no effect" in dropped(notes)["balancing.memory_threshold"]
    assert b.threshold == pytest.approx(0.07) and b.interval_s == 1800      # 30 minutes
    assert b.limits.concurrent == 3 and b.limits.move_timeout_s == 900
    assert b.with_local_disks is False and b.ignore.nodes == {"pve-z"}
    assert {k: (v.kind, v.pin, v.strict) for k, v in b.pools.items()} == {
        "k8s-workers": ("anti-affinity", (), True), "licensed": (None, ("pve-a",), True)}
    assert keel.proxmox.user == "proxlb@pve" and keel.proxmox.password_file == PASSWORD_FILE
    assert set(dropped(notes)) >= {"proxmox_api.retries", "balancing.enforce_affinity", "service.delay",
                                   "balancing.balance_larger_guests_first", "proxmox_cluster.overprovisioning"}
    assert "balancing.live" not in dropped(notes)                           # live: true is what Keel does


def test_yaml_of_2_x_with_pools_reserves_schedule_token_and_solver():
    text, config, notes, keel = converted("proxlb-2.x.yaml")
    assert "(ProxLB 2.x YAML proxlb.yaml)" in unwrapped(text)
    p = keel.proxmox
    assert p.token_file == TOKEN_FILE and p.password_file is None and p.user is None
    assert "`proxlb@pve!rebalance=<the token_secret from your ProxLB config>`" in text
    assert p.verify_tls is False and "ca_file: /etc/pve/pve-root-ca.pem" in text
    assert p.url == "https://fra1-pve01.example.com:8006" and "https://[2001:db8:10::2]:8006" in text
    b = keel.balancing
    assert b.enable and b.guest_types == {"vm", "ct"} and b.mode == "assigned"
    assert b.threshold == pytest.approx(0.05) and b.hotspot == pytest.approx(0.80)
    assert b.interval_s == 4 * 3600 and b.limits.concurrent == 1 and b.with_local_disks
    assert b.reserve_for("fra1-pve01") == 16 * GiB and b.reserve_for("fra1-pve02") == 8 * GiB
    assert b.maintenance == {"fra1-pve07"} and b.ignore.guests == {"fra1-backup01", "fra1-vault"}
    source = yaml.safe_load((FIXTURES / "proxlb-2.x.yaml").read_text())["balancing"]["pools"]
    assert config["balancing"]["pools"] == source                          # the same shape, unchanged
    assert b.pools["prod-db"].strict is False and b.pools["gpu"].pin == ("fra1-pve06",)
    left = dropped(notes)
    schedule = left["proxmox_cluster.maintenance_nodes_schedule"]
    assert "no per-node weekly maintenance schedule yet" in schedule
    assert "fra1-pve02 Tue 21:30 to Wed 02:00" in schedule and "fra1-pve05 Sun 01:00 to Sun 05:30" in schedule
    assert "schedule" not in config["balancing"]                           # no key invented for it
    assert "solver" in left and "service.enable_ha" in left
    assert "balancing.node_resource_reserve.fra1-pve01.cpu" in left
    assert set(left) >= {"balancing.cpu_overcommit", "balancing.max_node_inflow", "balancing.enforce_pinning"}


@pytest.mark.parametrize("method,weights", [("memory", (0, 1, 0)), ("cpu", (1, 0, 0)), ("disk", (0, 0, 1))])
def test_the_single_method_becomes_resource_weights(method, weights):
    config, notes = convert(f"balancing: {{method: {method}, {method}_threshold: 60}}\nservice: {{}}\n")
    assert config["balancing"]["resources"] == dict(zip(("cpu", "memory", "disk"), weights))
    assert config["balancing"]["hotspot"] == "60%"


@pytest.mark.parametrize("host,url", [
    ("pve1", "https://pve1:8006"),
    ("pve1.example.com:443", "https://pve1.example.com:443"),
    ("10.0.0.5", "https://10.0.0.5:8006"),
    ("[fc00::1]", "https://[fc00::1]:8006"),
    ("[fc00::1]:8443", "https://[fc00::1]:8443"),
    ("fc00::1:8006", "https://[fc00::1]:8006"),                 # ProxLB: the port after the last colon
    ("fe01:bad:c0de::cafe", "https://[fe01:bad:c0de::cafe]:8006"),   # no port: all of it is the address
])
def test_proxlb_host_notations_become_urls(host, url):
    config, _ = convert(yaml.safe_dump({"proxmox_api": {"hosts": [host], "user": "root@pam"}}))
    assert config["proxmox"]["url"] == url
    cfg.target_from(cfg.parse(config).proxmox, {"KEEL_PVE_TOKEN": "a@pve!b=c"})   # a URL Keel can use


def test_a_host_that_is_no_address_is_left_out_and_listed():
    # ProxLB's own example config lists 'fe01:bad:code::cafe', which is no IPv6 address ("code").
    config, notes = convert(yaml.safe_dump({"proxmox_api": {
        "hosts": ["fe01:bad:code::cafe", "virt01.example.com"], "user": "root@pam"}}))
    assert config["proxmox"]["url"] == "https://virt01.example.com:8006"
    assert "fe01:bad:code::cafe" in dropped(notes)["proxmox_api.hosts"]


@pytest.mark.parametrize("hosts", [["pve1:port"], ["has space"], ["[fc00::zz]:8006"], ["pve1:99999"]])
def test_no_usable_host_is_an_error(hosts):
    with pytest.raises(InvalidError, match="proxmox_api.hosts: no usable host"):
        convert(yaml.safe_dump({"proxmox_api": {"hosts": hosts, "user": "root@pam"}}), "proxlb.yaml")


def test_proxlb_defaults_apply_where_its_yaml_is_silent():
    config, notes = convert("proxmox_api: {hosts: [pve1], user: root@pam, pass: x}\n")
    b = cfg.parse(config).balancing
    assert not b.enable and b.guest_types == {"vm"}                 # ProxLB's enable defaults to false
    assert b.threshold == pytest.approx(0.10) and b.interval_s == 12 * 3600
    assert b.limits.concurrent == 1 and b.with_local_disks          # parallel false; with_local_disks true
    assert any("ProxLB's default" in n.text for n in notes if n.at == "balancing.imbalance")


def test_enabled_without_balance_types_stays_a_plan_only_config():
    config, notes = convert("proxmox_api: {hosts: [pve1], user: root@pam}\nbalancing: {enable: true}\n")
    assert config["balancing"]["enable"] is False
    assert any("never migrated" in n.text for n in notes if n.at == "balancing.enable")


def test_the_1_1_0_schedule_in_plain_hours():
    config, _ = convert("proxmox_api: {hosts: [pve1], user: root@pam}\nservice: {daemon: true, schedule: 3}\n")
    assert config["balancing"]["interval"] == "3h"


def test_unknown_keys_are_listed_not_lost():
    config, notes = convert("proxmox_api: {hosts: [pve1], user: root@pam, colour: blue}\n"
                            "balancing: {balanciness: 4, magic: 1}\nmonitoring: {}\n")
    left = dropped(notes)
    assert {"proxmox_api.colour", "balancing.magic", "monitoring"} <= set(left)
    cfg.parse(config)


def test_render_puts_each_note_above_its_key():
    config, notes = convert("proxmox_api: {hosts: [pve1], user: root@pam, ssl_verification: false}\n")
    lines = render(config, notes).splitlines()
    at = lines.index("  verify_tls: false")
    assert lines[at - 1].startswith("  #") and any("WARNING" in line for line in lines[at - 5:at])


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return path


@pytest.mark.parametrize("name,content,message", [
    ("proxlb.yaml", "proxmox_api: [unclosed\n", "not valid YAML"),
    ("proxlb.conf", "[proxmox]\napi_host: pve1\nthis line has no value\n", "not a readable INI file"),
    ("proxlb.conf", "[database]\nhost: db1\n", "not a ProxLB config"),
    ("keel.yaml", "proxmox: {url: 'https://pve1:8006'}\nbalancing: {enable: true}\n", "a Keel config already"),
    ("other.yaml", "nodes: [a, b]\nguests: []\n", "not a ProxLB config"),
    ("list.yaml", "- proxmox_api\n- balancing\n", "not a ProxLB config"),
    ("empty.yaml", "\n# nothing\n", "is empty"),
    ("binary.yaml", b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not a text file"),
])
def test_bad_files_are_named_with_what_is_wrong(tmp_path, name, content, message):
    path = write(tmp_path, name, content)
    with pytest.raises(InvalidError) as caught:
        import_file(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(InvalidError, match=r"cannot read .*nope\.yaml"):
        import_file(tmp_path / "nope.yaml")


def test_bad_values_are_all_named_with_their_proxlb_keys(tmp_path):
    path = write(tmp_path, "proxlb.yaml", yaml.safe_dump({
        "proxmox_api": {"hosts": ["pve1:port"], "user": "root@pam"},
        "balancing": {"balanciness": "lots", "method": "network", "balance_types": ["vm", "pod"],
                      "pools": {"db": {"type": "together"}}},
        "service": {"schedule": {"interval": 2, "format": "days"}}}))
    with pytest.raises(InvalidError) as caught:
        import_file(path)
    assert str(path) in str(caught.value)
    assert set(caught.value.errors) == {"proxmox_api.hosts", "balancing.balanciness", "balancing.method",
                                        "balancing.balance_types", "balancing.pools.db.type", "service.schedule"}


def test_bad_ini_values_are_named_as_the_ini_writes_them():
    with pytest.raises(InvalidError) as caught:
        convert("[proxmox]\napi_host: pve1\nverify_ssl: maybe\n[vm_balancing]\ntype: pods\n", "proxlb.conf")
    assert set(caught.value.errors) == {"[proxmox] verify_ssl", "[vm_balancing] type"}


@pytest.mark.parametrize("value", ["false", "true"])
def test_enforce_affinity_and_pinning_are_listed_whatever_their_value(value):
    # issue 25, finding 5: with false (ProxLB's default) neither was in the closing list,
    # though Keel keeps affinity and pins in every plan and moves guests to meet them
    config, notes = convert(f"balancing: {{enforce_affinity: {value}, enforce_pinning: {value}}}\nservice: {{}}\n")
    left = dropped(notes)
    assert "every plan" in left["balancing.enforce_affinity"] and "every plan" in left["balancing.enforce_pinning"]
    assert "enforce" not in str(config)
