"""Several providers: pack fills one before the next, spread evens runners out, overflow goes to
the next provider, a provider's max_runners and ``disabled`` are kept, another cluster is
reached by its url and token, a provider that does not answer is skipped; full clones."""

from __future__ import annotations

import pytest

from keel.runners.service import RunnerService
from keel.runners.settings import parse
from runners_helpers import CLIENT_ID, INSTALLATION, TOKEN, Kit, SimClock, scenario, write_private_key

SMALL = {"cores": 2, "memory": "4GiB"}


@pytest.fixture
def two(sim_factory, tmp_path):
    """Cluster A (the one Keel runs on: one 16 GiB node, room for three small runners) and
    cluster B (another, reached by url and token)."""
    a = sim_factory(scenario(nodes=1, memory="16GiB", overhead="4GiB"))
    b = sim_factory(scenario(nodes=2, github={}))
    secret = tmp_path / "b-token-secret"
    secret.write_text(TOKEN.split("=")[1] + "\n")
    made: list[Kit] = []

    def make(placement: str = "pack", a_extra: dict | None = None, b_extra: dict | None = None,
             runner: dict | None = None, max_runners: int = 8) -> Kit:
        providers = [{"name": "pve-a", "type": "proxmox", "runner": {"template": 9000}, **(a_extra or {})},
                     {"name": "pve-b", "type": "proxmox", "url": b.url, "token_id": TOKEN.split("=")[0],
                      "token_secret_path": str(secret), "tls": {"ca_file": b.cert},
                      "runner": {"template": 9000}, **(b_extra or {})}]
        settings = parse({
            "github": {"url": f"{a.url}/my-org", "app_client_id": CLIENT_ID, "app_installation_id": INSTALLATION,
                       "app_private_key_path": str(write_private_key(tmp_path / "app.pem")),
                       "tls": {"ca_file": a.cert}},
            "providers": providers,
            "scale_sets": [{"name": "keel-c2-m4", "max_runners": max_runners, "placement": placement,
                            "providers": [{"name": "pve-a", "runner": runner or SMALL},
                                          {"name": "pve-b", "runner": runner or SMALL}]}]})
        clock = SimClock(a.control("GET", "state")["time"])
        store = tmp_path / f"keel{len(made)}.db"
        kit = Kit(a, settings, clock, store, RunnerService(settings, a.client(TOKEN), store, clock=clock))
        kit.extra["b"] = b
        made.append(kit)
        return kit
    yield make
    for kit in made:
        kit.service.close()


def where(kit) -> dict[str, int]:
    return {p: sum(1 for r in kit.service.runners.values() if r.provider == p and r.alive)
            for p in ("pve-a", "pve-b")}


def clones_on(sim) -> list[dict]:
    return [r for r in sim.requests_log(0) if r["method"] == "POST" and r["path"].endswith("/clone")
            and r["status"] == 200]


def advance_both(kit, seconds: float) -> None:
    kit.advance(seconds)
    kit.extra["b"].advance(seconds)


def settle(kit, seconds: int) -> None:
    for _ in range(seconds):
        kit.service.poll_once()
        kit.service.reconcile_once()
        advance_both(kit, 1)


def test_pack_fills_this_cluster_and_overflows_to_the_next(two):
    kit = two("pack")
    settle(kit, 1)
    kit.queue("keel-c2-m4", duration=600, count=5)
    settle(kit, 1)
    assert where(kit) == {"pve-a": 3, "pve-b": 2}           # A is full after three: refused, B takes them
    assert len(clones_on(kit.sim)) == 3 and len(clones_on(kit.extra["b"])) == 2
    status = kit.service.status()
    assert status["providers"][0]["last_refusal"]["kind"] == "full"
    assert status["scale_sets"][0]["backing_off"][0]["provider"] == "pve-a"
    settle(kit, 20)
    # A's runners connect to the fake GitHub that A serves; B's simulator has its own fake GitHub,
    # which never issued their JIT configs, so they stay "starting" in this test.
    assert {r["state"] for r in kit.service.status()["runners"] if r["provider"] == "pve-a"} == {"busy"}


def test_spread_evens_runners_out(two):
    kit = two("spread")
    settle(kit, 1)
    kit.queue("keel-c2-m4", duration=600, count=2)
    settle(kit, 1)
    assert where(kit) == {"pve-a": 1, "pve-b": 1}


def test_a_weight_of_2_takes_twice_the_share(two):
    kit = two("spread", b_extra={"weight": 2})
    settle(kit, 1)
    kit.queue("keel-c2-m4", duration=600, count=3)
    settle(kit, 1)
    assert where(kit) == {"pve-a": 1, "pve-b": 2}


def test_a_providers_max_runners_and_disabled_are_kept(two):
    kit = two("pack", a_extra={"max_runners": 1})
    settle(kit, 1)
    kit.queue("keel-c2-m4", duration=600, count=3)
    settle(kit, 2)
    assert where(kit) == {"pve-a": 1, "pve-b": 2}
    off = two("pack", b_extra={"disabled": True}, max_runners=8)
    settle(off, 1)
    assert where(off)["pve-b"] == 0


def test_a_provider_that_does_not_answer_is_skipped(two):
    kit = two("spread")
    settle(kit, 1)
    kit.extra["b"].stop()
    kit.queue("keel-c2-m4", duration=600, count=2)
    kit.service.poll_once()
    kit.service.reconcile_once()
    assert where(kit) == {"pve-a": 2, "pve-b": 0}
    assert kit.service.status()["providers"][1]["state"] == "UNREACHABLE"


def test_a_full_clone_on_the_storage_asked(two):
    kit = two("pack", a_extra={"runner": {"template": 9000, "full_clone": True, "storage": "ceph"}})
    settle(kit, 1)
    kit.queue("keel-c2-m4", duration=600)
    settle(kit, 1)
    [clone] = clones_on(kit.sim)
    assert clone["params"]["full"] == "1" and clone["params"]["storage"] == "ceph"


def copies() -> list[dict]:
    """The template's copies on pve2 and pve3 (the scenario has 9000 on pve1), same name."""
    return [{"vmid": 9000 + i, "name": "runner-template", "node": f"pve{i + 1}", "template": True,
             "status": "stopped", "memory": "2GiB", "storage": "ceph", "boot": "10s"} for i in (1, 2)]


@pytest.mark.parametrize("template", ["runner-template", {"pve1": 9000, "pve2": 9001, "pve3": 9002}],
                         ids=["by-name", "per-node"])
def test_runners_are_cloned_from_a_template_on_a_node_that_is_up(kits, template):
    small = {"name": "keel-c2-m4", "max_runners": 4,
             "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB", "template": template}}]}
    kit = kits([small], scenario(guests=copies()))
    kit.sim.control("POST", "nodes/pve1", {"online": False})      # the first template's node is lost
    kit.step()
    jobs = kit.queue("keel-c2-m4", duration=10, count=3)
    for _ in range(80):
        kit.step(1)
        if all(kit.jobs()[j]["status"] == "completed" for j in jobs) and not kit.service.runners:
            break
    assert all(kit.jobs()[j]["result"] == "succeeded" for j in jobs)
    sources = {c["path"].split("/")[2] + ":" + c["path"].split("/")[4] for c in kit.clones()}
    assert sources and sources <= {"pve2:9001", "pve3:9002"}
    assert all("target" not in c["params"] for c in kit.clones())   # each from the copy on its own node
    kit.assert_clean()


def test_one_template_on_a_node_that_is_down_is_refused_with_what_to_do(kits):
    small = {"name": "keel-c2-m4", "max_runners": 4,
             "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}
    kit = kits([small], scenario())
    kit.sim.control("POST", "nodes/pve1", {"online": False})
    kit.step()
    [job] = kit.queue("keel-c2-m4", duration=10)
    kit.step(0)
    refusal = kit.service.status()["providers"][0]["last_refusal"]
    assert refusal["kind"] == "failing" and "on no node that is up" in refusal["message"]
    assert "template: {node: VMID" in refusal["message"]
    assert kit.clones() == [] and not [r for r in kit.sim.requests_log(0) if r["path"].endswith("/clone")]
    kit.gh("POST", f"jobs/{job}/cancel")
