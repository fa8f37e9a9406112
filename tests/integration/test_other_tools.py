"""Other Proxmox VE tools, unchanged, against ``keel sim`` over HTTPS, each with an API
token and with a password: prometheus-pve-exporter's scrape handler with its default
collectors, and a plain proxmoxer script. Also the endpoints the exporter needs beyond the
cluster's load (backup info, replication, subscription, QDevice), as PVE answers them.

(ProxLB, the third tool the README names, is not on PyPI: it was checked by hand, as
docs/simulator.md "ProxLB" records.)
"""

from __future__ import annotations

import logging
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml
from proxmoxer import ResourceException

from conftest import DEMO_PASSWORD, DEMO_SCENARIO, DEMO_TOKEN, Sim, start_sim

DEMO = yaml.safe_load(DEMO_SCENARIO.read_text())
DEMO_GUESTS = {g["vmid"]: g for g in DEMO["guests"]}
AUTHS = ["token", "password"]
KEY_RE = re.compile(r"pve[1248][cbsp]-[0-9a-f]{10}")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]   # (name, labels) -> value


def proxmox_for(sim: Sim, auth: str) -> Any:
    if auth == "token":
        return sim.proxmox()
    return sim.proxmox(user="root@pam", password=DEMO_PASSWORD)


def guest_id(vmid: int) -> str:
    return f"{DEMO_GUESTS[vmid].get('type', 'qemu')}/{vmid}"


# -- prometheus-pve-exporter ---------------------------------------------------------


class _Errors(logging.Handler):
    """Keeps what the exporter logs when a scrape fails (its traceback)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(self.format(record))


class Exporter:
    """The exporter's WSGI application, built from its own command line as ``pve_exporter
    --config.file pve.yml`` builds it; only gunicorn is left out."""

    def __init__(self, sim: Sim, tmp: Path):
        pytest.importorskip("pve_exporter")
        with warnings.catch_warnings():
            # its scrape_metrics module calls wrapt the way wrapt 2 deprecates
            warnings.simplefilter("ignore", DeprecationWarning)
            from pve_exporter import cli
            from pve_exporter.http import PveExporterApplication
        from werkzeug.test import Client

        token_user, secret = DEMO_TOKEN.split("=", 1)
        user, token_name = token_user.split("!", 1)
        config_file = tmp / "pve.yml"
        config_file.write_text(yaml.safe_dump({
            "token": {"user": user, "token_name": token_name, "token_value": secret,
                      "verify_ssl": sim.cert},
            "password": {"user": "root@pam", "password": DEMO_PASSWORD, "verify_ssl": sim.cert},
        }))
        started: dict[str, Any] = {}
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(cli, "start_http_server",
                          lambda config, options, collectors: started.update(
                              config=config, collectors=collectors))
            patch.setattr(sys, "argv", ["pve_exporter", "--config.file", str(config_file)])
            patch.delenv("PVE_USER", raising=False)
            cli.main()
        self.collectors = started["collectors"]
        self.errors = _Errors()
        logger = logging.getLogger("keel.tests.pve_exporter")
        logger.addHandler(self.errors)
        # Its metrics go to prometheus_client's global registry: one application per process.
        self.client = Client(PveExporterApplication(started["config"], self.collectors, logger))
        self.target = f"{sim.host}:{sim.port}"

    def scrape(self, module: str) -> Samples:
        """``GET /pve?module=...&target=...&cluster=1&node=1``: every sample of the answer."""
        response = self.client.get("/pve", query_string={
            "module": module, "target": self.target, "cluster": "1", "node": "1"})
        assert response.status_code == 200, "\n".join(self.errors.messages)
        return samples(response.get_data(as_text=True))

    def own_metrics(self) -> Samples:
        return samples(self.client.get("/metrics").get_data(as_text=True))


def samples(text: str) -> Samples:
    from prometheus_client.parser import text_string_to_metric_families
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def labelled(found: Samples, name: str) -> list[dict[str, str]]:
    return [dict(labels) for (metric, labels) in found if metric == name]


@pytest.fixture(scope="module")
def exporter(_module_demo_sim: Sim, tmp_path_factory: pytest.TempPathFactory) -> Exporter:
    return Exporter(_module_demo_sim, tmp_path_factory.mktemp("pve-exporter"))


def test_the_exporters_default_collectors_are_all_on(exporter):
    assert exporter.collectors._fields and all(exporter.collectors), exporter.collectors
    assert exporter.collectors.backup_info and exporter.collectors.replication
    assert exporter.collectors.subscription and exporter.collectors.qdevice


@pytest.mark.parametrize("auth", AUTHS)
def test_exporter_scrape_with_default_collectors(fresh_sim, exporter, auth):
    found = exporter.scrape(auth)
    calls = fresh_sim.requests_log()

    # every call the scrape made was answered (no 501 for a missing endpoint, no 403)
    assert calls and [c for c in calls if c["status"] != 200] == []
    user = "keel@pve!keel" if auth == "token" else "root@pam"
    assert {c["user"] for c in calls if c["path"] != "/access/ticket"} == {user}
    paths = {c["path"] for c in calls}
    assert {"/cluster/backup-info/not-backed-up", "/nodes/pve1/replication",
            "/nodes/pve1/subscription", "/cluster/config/qdevice"} <= paths
    assert value(exporter.own_metrics(), "pve_request_errors_total", module=auth) == 0

    # status: the cluster, every node, running and stopped guests
    assert value(found, "pve_up", id="cluster/demo") == 1
    for node in DEMO["nodes"]:
        assert value(found, "pve_up", id=f"node/{node['name']}") == 1
    for vmid, guest in DEMO_GUESTS.items():
        running = guest.get("status", "running") == "running" and not guest.get("template")
        assert value(found, "pve_up", id=guest_id(vmid)) == (1 if running else 0), vmid

    # load: the same figures /cluster/resources has (the clock stands still)
    resources = {r["id"]: r for r in fresh_sim.proxmox().cluster.resources.get()}
    for ident in ("node/pve1", "qemu/100", "lxc/109"):
        assert value(found, "pve_cpu_usage_ratio", id=ident) == pytest.approx(resources[ident]["cpu"])
        assert value(found, "pve_memory_usage_bytes", id=ident) == resources[ident]["mem"]
        assert value(found, "pve_memory_size_bytes", id=ident) == resources[ident]["maxmem"]
    assert value(found, "pve_cpu_usage_ratio", id="qemu/100") > 0
    assert value(found, "pve_memory_size_bytes", id="qemu/100") == 8 * 1024**3
    assert value(found, "pve_cpu_usage_limit", id="node/pve1") == 64

    # guest info: the demo guests' names, nodes and types
    info = {i["id"]: i for i in labelled(found, "pve_guest_info")}
    assert set(info) == {guest_id(vmid) for vmid in DEMO_GUESTS}
    for vmid, guest in DEMO_GUESTS.items():
        entry = info[guest_id(vmid)]
        assert (entry["name"], entry["node"]) == (guest["name"], guest["node"])
        assert entry["template"] == ("1" if guest.get("template") else "0")

    # HA: the HA guests are started, the others have no HA state, nodes are online
    for vmid, guest in DEMO_GUESTS.items():
        assert value(found, "pve_ha_state", id=guest_id(vmid), state="started") == \
            (1 if guest.get("ha") == "started" else 0), vmid
    assert value(found, "pve_ha_state", id="node/pve1", state="online") == 1

    # backup info: no backup jobs, so no guest is backed up (templates included, as in PVE)
    assert value(found, "pve_not_backed_up_total", id="cluster/demo") == len(DEMO_GUESTS)
    assert {i["id"] for i in labelled(found, "pve_not_backed_up_info")} == \
        {guest_id(vmid) for vmid in DEMO_GUESTS}

    # the local node (pve1) has no subscription; no replication jobs, no QDevice
    assert value(found, "pve_subscription_status", id="node/pve1", status="notfound") == 1
    assert value(found, "pve_subscription_status", id="node/pve1", status="active") == 0
    assert labelled(found, "pve_replication_info") == []
    assert labelled(found, "pve_qdevice_up") == []
    version = fresh_sim.proxmox().version.get()
    assert value(found, "pve_version_info", release="9.1", repoid=version["repoid"],
                 version="9.1.4") == 1


def test_a_node_with_a_level_has_an_active_subscription(sim_factory):
    """The scenario's ``level`` is the node's subscription: /cluster/status and the node's
    subscription agree; a lost node answers 595 like any node-bound call."""
    scenario = dict(DEMO)
    scenario["nodes"] = [dict(n, level="c") if n["name"] == "pve1" else n for n in DEMO["nodes"]]
    sim = sim_factory(scenario)
    pve = sim.proxmox()
    sub = pve.nodes("pve1").subscription.get()
    assert sub["status"] == "active" and sub["level"] == "c"
    assert KEY_RE.fullmatch(sub["key"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", sub["nextduedate"])
    status = {e["name"]: e for e in pve.cluster.status.get() if e["type"] == "node"}
    assert status["pve1"]["level"] == "c" and status["pve2"]["level"] == ""
    assert pve.nodes("pve2").subscription.get()["status"] == "notfound"
    sim.control("POST", "nodes/pve2", {"online": False})
    with pytest.raises(ResourceException) as err:
        pve.nodes("pve2").subscription.get()
    assert err.value.status_code == 595


# -- the endpoints, as PVE answers them ----------------------------------------------

LIMITED = {
    "nodes": [{"name": "n1", "level": "p", "sockets": 2, "cpus": 32}, {"name": "n2"}],
    "guests": [{"vmid": 100, "node": "n1", "name": "alpha"},
               {"vmid": 101, "node": "n2", "name": "beta"},
               {"vmid": 102, "node": "n2", "type": "lxc", "name": "gamma"},
               {"vmid": 900, "node": "n1", "name": "tmpl", "template": True, "status": "stopped"}],
    "users": [{"userid": "root@pam", "password": "secret"},
              {"userid": "bob@pve", "password": "bob-pw"},
              {"userid": "eve@pve", "password": "eve-pw"}],
    "roles": {"SysAuditor": ["Sys.Audit"]},
    "acl": [{"path": "/", "role": "SysAuditor", "user": "bob@pve", "propagate": False},
            {"path": "/vms/101", "role": "PVEAuditor", "user": "bob@pve"},
            {"path": "/vms/100", "role": "PVEAuditor", "user": "eve@pve"}],
}


@pytest.fixture(scope="module")
def limited_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """Two nodes (n1 with a Premium subscription), four guests, and users who see little:
    bob has Sys.Audit on / alone (not below) and VM.Audit on 101, eve VM.Audit on 100."""
    tmp = tmp_path_factory.mktemp("limited-sim")
    scenario = tmp / "limited.yaml"
    scenario.write_text(yaml.safe_dump(LIMITED))
    sim = start_sim(scenario, tmp)
    yield sim
    sim.stop()


def test_not_backed_up_lists_every_guest_with_vmid_type_and_name(limited_sim):
    root = limited_sim.proxmox(user="root@pam", password="secret")
    assert root.cluster("backup-info/not-backed-up").get() == [
        {"vmid": 100, "type": "qemu", "name": "alpha"},
        {"vmid": 101, "type": "qemu", "name": "beta"},
        {"vmid": 102, "type": "lxc", "name": "gamma"},
        {"vmid": 900, "type": "qemu", "name": "tmpl"},
    ]
    assert root.cluster.backup.get() == []
    assert root.cluster("backup-info").get() == [{"subdir": "not-backed-up"}]


def test_not_backed_up_leaves_out_guests_the_caller_may_not_audit(limited_sim):
    bob = limited_sim.proxmox(user="bob@pve", password="bob-pw")
    assert bob.cluster("backup-info/not-backed-up").get() == [
        {"vmid": 101, "type": "qemu", "name": "beta"}]


def test_not_backed_up_needs_sys_audit_on_root(limited_sim):
    eve = limited_sim.proxmox(user="eve@pve", password="eve-pw")
    for path in ("backup-info/not-backed-up", "config/qdevice", "backup"):
        with pytest.raises(ResourceException) as err:
            eve.cluster(path).get()
        assert err.value.status_code == 403
        assert "Permission check failed (/, Sys.Audit)" in str(err.value)


def test_not_backed_up_omits_the_name_a_guest_does_not_have(fresh_sim):
    pve = fresh_sim.proxmox()
    pve.nodes("pve3").qemu(121).config.put(delete="name")
    entries = {e["vmid"]: e for e in pve.cluster("backup-info/not-backed-up").get()}
    assert entries[121] == {"vmid": 121, "type": "qemu"}
    assert entries[109] == {"vmid": 109, "type": "lxc", "name": "cache1"}


@pytest.mark.parametrize("auth", AUTHS)
def test_no_replication_jobs(shared_sim, auth):
    pve = proxmox_for(shared_sim, auth)
    assert pve.nodes("pve2").replication.get() == []
    assert pve.nodes("pve2").replication.get(guest=111) == []
    assert pve.cluster.replication.get() == []


def test_replication_of_an_unknown_node_fails_as_in_pve(shared_sim):
    with pytest.raises(ResourceException) as err:
        shared_sim.proxmox().nodes("pve9").replication.get()
    assert err.value.status_code == 500
    assert "hostname lookup 'pve9' failed" in str(err.value)


@pytest.mark.parametrize("auth", AUTHS)
def test_a_node_without_a_key_has_subscription_status_notfound(shared_sim, auth):
    sub = proxmox_for(shared_sim, auth).nodes("pve3").subscription.get()
    assert sub["status"] == "notfound"
    assert sub["message"] == "There is no subscription key"
    assert sub["url"].startswith("https://www.proxmox.com/")
    assert re.fullmatch(r"[0-9A-F]{32}", sub["serverid"])
    assert set(sub) == {"status", "message", "url", "serverid"}


def test_subscription_without_sys_audit_on_the_node_has_no_server_id_or_key(limited_sim):
    bob = limited_sim.proxmox(user="bob@pve", password="bob-pw")   # Sys.Audit on / only
    assert bob.nodes("n2").subscription.get() == {
        "status": "notfound", "message": "There is no subscription key",
        "url": "https://www.proxmox.com/en/proxmox-virtual-environment/pricing"}
    # an active key: its status and message (an active key has none: null), and the URL
    assert bob.nodes("n1").subscription.get() == {
        "status": "active", "message": None,
        "url": "https://www.proxmox.com/en/proxmox-virtual-environment/pricing"}


def test_an_active_subscription_has_the_fields_of_the_schema(limited_sim):
    from keel.sim.schema import Schema
    returns = Schema.load().endpoint("GET", "/nodes/{node}/subscription").returns
    root = limited_sim.proxmox(user="root@pam", password="secret")
    for node in ("n1", "n2"):
        sub = root.nodes(node).subscription.get()
        assert set(sub) <= set(returns["properties"]), node
        assert sub["status"] in returns["properties"]["status"]["enum"]
    active = root.nodes("n1").subscription.get()
    assert active["status"] == "active" and active["level"] == "p"
    assert KEY_RE.fullmatch(active["key"]) and active["key"].startswith("pve2p-")
    assert active["sockets"] == 2 and re.fullmatch(r"[0-9A-F]{32}", active["serverid"])
    assert active["productname"] == "Proxmox VE Premium Subscription 2 CPUs/year"
    assert isinstance(active["checktime"], int)
    assert active["regdate"] < active["nextduedate"]


@pytest.mark.parametrize("auth", AUTHS)
def test_no_qdevice_is_an_empty_object(shared_sim, auth):
    assert proxmox_for(shared_sim, auth).cluster.config.qdevice.get() == {}


def test_auditor_reads_the_new_endpoints(shared_sim):
    auditor = shared_sim.proxmox(user="auditor@pve", password=DEMO_PASSWORD)
    assert len(auditor.cluster("backup-info/not-backed-up").get()) == len(DEMO_GUESTS)
    assert auditor.cluster.config.qdevice.get() == {}
    assert auditor.nodes("pve1").subscription.get()["status"] == "notfound"


# -- a plain proxmoxer script ----------------------------------------------------------


def proxmoxer_script(pve: Any, sleep: Callable[[float], Any]) -> dict[str, Any]:
    """What a small proxmoxer script does: list the nodes and each node's VMs, read a VM's
    config, start it and stop it again, waiting for each task by polling its status."""

    def wait(upid: str) -> dict[str, Any]:
        node = upid.split(":")[1]
        while True:
            status = pve.nodes(node).tasks(upid).status.get()
            if status["status"] == "stopped":
                return status
            sleep(1)

    report: dict[str, Any] = {"nodes": {}}
    for node in pve.nodes.get():
        if node["status"] == "online":
            report["nodes"][node["node"]] = {vm["vmid"]: vm["name"] for vm in pve.nodes(node["node"]).qemu.get()}
    vm = pve.nodes("pve3").qemu(121)
    report["config"] = vm.config.get()
    report["before"] = vm.status.current.get()["status"]
    report["start"] = wait(vm.status.start.post())
    report["running"] = vm.status.current.get()["status"]
    report["stop"] = wait(vm.status.stop.post())
    report["after"] = vm.status.current.get()["status"]
    return report


@pytest.mark.parametrize("auth", AUTHS)
def test_plain_proxmoxer_script(fresh_sim, auth):
    report = proxmoxer_script(proxmox_for(fresh_sim, auth), fresh_sim.advance)
    expected = {}
    for vmid, guest in DEMO_GUESTS.items():
        if guest.get("type", "qemu") == "qemu":
            expected.setdefault(guest["node"], {})[vmid] = guest["name"]
    assert report["nodes"] == expected
    assert report["config"]["name"] == "test1" and report["config"]["cores"] == 2
    assert report["config"]["memory"] in (4096, "4096")
    assert (report["before"], report["running"], report["after"]) == ("stopped", "running", "stopped")
    user = "keel@pve!keel" if auth == "token" else "root@pam"
    for key, kind in (("start", "qmstart"), ("stop", "qmstop")):
        assert report[key]["exitstatus"] == "OK"
        assert report[key]["type"] == kind and report[key]["id"] == "121"
        assert report[key]["user"] == user.split("!")[0]
    calls = fresh_sim.requests_log()
    assert all(c["status"] == 200 for c in calls), [c for c in calls if c["status"] != 200]



# -- what ProxLB calls (it is not on PyPI; these are its calls, made with proxmoxer) -------


def test_guest_rrddata_is_read_by_vmid_whatever_the_path_says(shared_sim):
    """qemu-server and pve-container read ``pve-vm-9.0/<vmid>`` without looking at the
    guest's node or kind, and ProxLB asks the qemu path for containers too."""
    pve = shared_sim.proxmox()
    as_ct = pve.nodes("pve1").lxc(109).rrddata.get(timeframe="hour", cf="AVERAGE")
    assert pve.nodes("pve1").qemu(109).rrddata.get(timeframe="hour", cf="AVERAGE") == as_ct
    assert pve.nodes("pve4").qemu(109).rrddata.get(timeframe="hour", cf="AVERAGE") == as_ct
    assert as_ct[0]["disk"] > 0 and "pressurecpusome" in as_ct[-1]


def test_guest_rrddata_of_an_unknown_vmid_is_the_rrd_error(shared_sim):
    with pytest.raises(ResourceException) as err:
        shared_sim.proxmox().nodes("pve1").qemu(4242).rrddata.get(timeframe="hour")
    assert err.value.status_code == 500
    assert "RRD error: opening '/var/lib/rrdcached/db/pve-vm-9.0/4242': No such file or directory" \
        in str(err.value)


@pytest.mark.parametrize("auth", AUTHS)
def test_proxlb_reads_answer_with_the_fields_it_uses(fresh_sim, auth):
    """ProxLB's dry run, call by call (docs in its models/*.py), with the fields it reads."""
    pve = proxmox_for(fresh_sim, auth)
    privileges = {p for privs in pve.access.permissions.get().values() for p in privs}
    assert {"Datastore.Audit", "Sys.Audit", "VM.Audit", "VM.Migrate"} <= privileges
    names = []
    for node in pve.nodes.get():
        assert node["status"] == "online" and node["maxcpu"] > 0 and node["maxmem"] > 0
        assert node["maxdisk"] > 0 and {"cpu", "mem", "disk"} <= set(node)
        for cf in ("AVERAGE", "MAX"):
            rows = pve.nodes(node["node"]).rrddata.get(timeframe="hour", cf=cf)
            assert rows and "pressurememoryfull" in rows[-1]
        assert re.fullmatch(r"9\.\d+\.\d+", pve.nodes(node["node"]).version.get()["version"])
        for kind in ("qemu", "lxc"):
            for guest in pve.nodes(node["node"])(kind).get():
                assert {"vmid", "name", "status", "cpus", "maxmem", "mem", "maxdisk", "disk"} <= set(guest)
                names.append(guest["name"])
                if guest["status"] == "running":
                    pve.nodes(node["node"])(kind)(guest["vmid"]).config.get()
                    rows = pve.nodes(node["node"]).qemu(guest["vmid"]).rrddata.get(timeframe="hour")
                    assert "cpu" in rows[-1] and "pressurecpufull" in rows[-1]
    assert len(names) == len(set(names)) == len(DEMO_GUESTS)   # ProxLB keys guests by name
    assert {e["type"] for e in pve.cluster.ha.status.current.get()} >= {"quorum", "master", "lrm"}
    for pool in pve.pools.get():
        assert all("name" in m for m in pve.pools(pool["poolid"]).get()["members"] if m["type"] != "storage")
    rules = {r["rule"]: r for r in pve.cluster.ha.rules.get()}
    assert rules["db-apart"]["resources"] == "vm:110,vm:111" and rules["db-apart"]["affinity"] == "negative"
    assert [c for c in fresh_sim.requests_log() if c["status"] != 200] == []


@pytest.mark.parametrize("auth", AUTHS)
def test_proxlb_migrations_complete(fresh_sim, auth):
    """ProxLB's real run: a live VM migration with its options, a container restart
    migration, an HA guest through hamigrate; it polls the task status, and for an
    hamigrate looks up the qmigrate task."""
    pve = proxmox_for(fresh_sim, auth)
    vm = pve.nodes("pve1").qemu(106).migrate.post(**{
        "target": "pve2", "online": 1, "with-local-disks": 1, "with-conntrack-state": 1})
    ct = pve.nodes("pve1").lxc(109).migrate.post(target="pve3", restart=1)
    ha = pve.nodes("pve2").qemu(115).migrate.post(**{   # to another node its rule prefers most
        "target": "pve1", "online": 1, "with-local-disks": 1, "with-conntrack-state": 1})
    assert ":hamigrate:115:" in ha
    qmigrate = None
    for _ in range(600):
        if qmigrate is None:
            found = pve.nodes("pve2").tasks.get(typefilter="qmigrate", vmid=115, start=0,
                                                source="active", limit=1)
            qmigrate = found[0]["upid"] if found else None
        done = [pve.nodes(u.split(":")[1]).tasks(u).status.get() for u in (vm, ct, ha)]
        if all(t["status"] == "stopped" for t in done) and qmigrate and \
                pve.nodes("pve2").tasks(qmigrate).status.get()["status"] == "stopped":
            break
        fresh_sim.advance(1)
    assert qmigrate and [t["exitstatus"] for t in done] == ["OK", "OK", "OK"]
    assert pve.nodes("pve2").tasks(qmigrate).status.get()["exitstatus"] == "OK"
    fresh_sim.advance(60)   # a few HA rounds: the HA guest stays where it was sent
    placed = {g["vmid"]: g["node"] for g in pve.cluster.resources.get(type="vm")}
    assert (placed[106], placed[109], placed[115]) == ("pve2", "pve3", "pve1")
