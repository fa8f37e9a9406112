"""The seed's "Under load" walk-through (rungar-proxmox-sizes.txt), replayed.

Three nodes of 64 GiB with about 60 GiB for VMs; the seed's three sizes (2c/4 GiB ×16,
4c/8 GiB ×8, 8c/16 GiB ×3 at priority 10).  A busy Saturday afternoon: two large, sixteen
small and eight medium jobs running, 160 GiB between them, the nodes with 7, 6 and 6 GiB
free.  Keel starts on that cluster and adopts the 26 runner VMs by their tags.

1. A third large build is queued: refused as full, saying what each node has free.
2. The large size holds the others back: pve HELD, small and medium HOLDING BACK.
3. A medium job finishes on pve2 (14 GiB free there); another medium job is queued, and waits.
   The large size tries again when its 15 s are up: still full, now 30 s.
4. A small job finishes on pve2 (18 GiB): room Keel freed that the large runner fits ends its
   wait, and it is cloned there at once, nothing smaller before it.
5. Its hold ends; the medium job gets a runner from the next room to free.

Once step by step (a full pass every simulated second, to check each state on the way),
and once with the service's own loop on a running clock (``test_under_load_on_its_own_loop``),
which must keep the timing by itself: each retry within 2 s of its due time, the large
runner cloned within 2 s of the room being free.
"""

from __future__ import annotations

import pytest

from runners_helpers import (INSTALLATION_UNDER_LOAD as INSTALLATION, SIZES_UNDER_LOAD as SIZES,
                             UNDER_LOAD_SEED, GiB, kit_fixture, live_kit, under_load_scenario)

SEED = UNDER_LOAD_SEED


@pytest.fixture
def kit(sim_factory, tmp_path):
    make, made = kit_fixture(sim_factory, tmp_path)
    kit = make(SEED["scale_sets"], under_load_scenario(), installation=INSTALLATION)
    yield kit
    for k in made:
        k.service.close()


def job_of(kit, runner_name: str) -> int:
    return next(j["id"] for j in kit.github_state()["jobs"] if j["runner_name"] == runner_name)


def vm_named(kit, node: str, scale_set: str) -> str:
    return next(v["name"] for v in kit.vms().values() if v["node"] == node and v["name"].startswith(scale_set + "-"))


def scale_set(kit, name: str) -> dict:
    return next(s for s in kit.service.status()["scale_sets"] if s["name"] == name)


def test_under_load_step_by_step(kit):
    small, medium, large = (s for s, _, _ in SIZES.values())
    kit.step()
    status = kit.service.status()
    assert len(status["runners"]) == 26 and all(r["adopted"] and r["state"] == "busy" for r in status["runners"])
    assert {n: f // GiB for n, f in kit.node_free().items()} == {"pve1": 7, "pve2": 6, "pve3": 6}
    assert [(s["name"], s["desired"], s["alive"]) for s in status["scale_sets"]] == [
        (small, 16, 16), (medium, 8, 8), (large, 2, 2)]
    assert kit.clones() == []

    # 1. A third large build is queued: pve refuses it as full, saying what each node has free.
    kit.queue(large, duration=3600)
    kit.step(0)
    assert kit.clones() == []
    pve = kit.service.status()["providers"][0]
    assert pve["last_refusal"]["kind"] == "full" and pve["last_refusal"]["scale_set"] == large
    assert "needs 16.0 GiB; free pve1 7.0 GiB, pve2 6.0 GiB, pve3 6.0 GiB" in pve["last_refusal"]["message"]
    refused_at = kit.clock.t

    # 2. The large size holds the lower ones back: pve HELD, small and medium HOLDING BACK.
    assert pve["state"] == "HELD" and pve["held_by"][0]["scale_set"] == large
    assert scale_set(kit, small)["state"] == scale_set(kit, medium)["state"] == "HOLDING BACK"
    assert scale_set(kit, large)["state"] == "BACKING OFF"
    assert scale_set(kit, large)["backing_off"][0]["until"] == refused_at + 15

    # 3. A medium job finishes on pve2 and its VM goes: 14 GiB free there, not yet enough.
    kit.advance(5)
    kit.gh("POST", f"jobs/{job_of(kit, vm_named(kit, 'pve2', medium))}/finish")
    kit.settle(4)
    assert kit.node_free()["pve2"] // GiB == 14 and len(kit.vms_of(medium)) == 7
    kit.queue(medium, duration=3600)                   # another medium job: it waits, held back
    kit.settle(7)                                      # the large size tries again at +15: still full
    assert kit.clones() == []
    assert scale_set(kit, medium)["state"] == "HOLDING BACK" and scale_set(kit, medium)["desired"] == 8
    assert kit.service.meters.count("keel_provider_refusals_total", scale_set=large) == 2

    # 4. A small job finishes on pve2 too: 18 GiB free once its VM is off.  That room, freed by
    #    Keel, fits the large runner: its wait ends and it is cloned on pve2 at once, before
    #    anything smaller can take the room.
    small_vm = vm_named(kit, "pve2", small)
    kit.gh("POST", f"jobs/{job_of(kit, small_vm)}/finish")
    off_at = kit.clock.t + 1                           # the fake's poweroff: 1 s after the job
    kit.settle(4)
    [clone] = kit.clones()
    assert clone["params"]["name"].startswith(large) and clone["params"]["target"] == "pve2"
    assert clone["time"] - off_at <= 2
    assert clone["time"] < refused_at + 45             # not waiting out the 30 s backoff

    # 5. Once its runner is created the hold ends; the medium job gets a runner from the next room.
    assert kit.service.status()["providers"][0]["state"] == "OK"
    assert scale_set(kit, medium)["state"] in ("LISTENING", "BACKING OFF")   # pve full for it now
    kit.gh("POST", f"jobs/{job_of(kit, vm_named(kit, 'pve3', small))}/finish")
    kit.settle(5)
    clones = kit.clones()
    assert len(clones) == 2 and clones[1]["params"]["name"].startswith(medium)
    assert clones[1]["params"]["target"] == "pve3"
    assert kit.service.status()["providers"][0]["state"] == "OK"
    kit.assert_limits()


def test_under_load_on_its_own_loop(sim_factory, tmp_path):
    """The same, with the service's loop (``run``) on a clock running 5 times real time: no
    helper steps a pass; timers, messages and room freed drive it."""
    small, medium, large = (s for s, _, _ in SIZES.values())
    sim = sim_factory(under_load_scenario())
    with live_kit(sim, tmp_path, SEED["scale_sets"], factor=5.0, installation=INSTALLATION) as live:
        live.wait(lambda: len(live.service.runners) == 26 and all(
            s["state"] == "LISTENING" for s in live.service.status()["scale_sets"]))
        runners = {r.vmid: r for r in live.service.runners.values()}
        assert all(r.adopted for r in runners.values())

        def vm(node: str, size: str) -> str:
            return next(r.name for r in runners.values() if r.node == node and r.scale_set == size)

        def job(name: str) -> int:
            return next(j["id"] for j in live.gh("GET", "state")["jobs"] if j["runner_name"] == name)

        live.gh("POST", "jobs", {"labels": [large], "duration": 3600})
        [first] = live.wait(lambda: live.events("refused"))
        refused_at = first["t"]
        live.sleep_until(refused_at + 5)
        live.gh("POST", f"jobs/{job(vm('pve2', medium))}/finish")
        live.gh("POST", "jobs", {"labels": [medium], "duration": 3600})
        [_, second] = live.wait(lambda: len(live.events("refused")) >= 2 and live.events("refused"))
        assert second["scale_set"] == large and 0 <= second["t"] - (refused_at + 15) <= 2   # on time
        live.sleep_until(refused_at + 20)
        live.gh("POST", f"jobs/{job(vm('pve2', small))}/finish")
        off_at = live.gh("GET", "state")["time"] + 1      # its VM powers off a second after the job
        [clone] = live.wait(lambda: live.clones())
        assert clone["params"]["name"].startswith(large) and clone["params"]["target"] == "pve2"
        assert clone["time"] - off_at <= 2, f"cloned {clone['time'] - off_at:.1f} s after the room was free"
        live.gh("POST", f"jobs/{job(vm('pve3', small))}/finish")
        off_at = live.gh("GET", "state")["time"] + 1
        clones = live.wait(lambda: len(live.clones()) >= 2 and live.clones())
        assert clones[1]["params"]["name"].startswith(medium) and clones[1]["params"]["target"] == "pve3"
        assert clones[1]["time"] - off_at <= 2
        assert [e["scale_set"] for e in live.events("refused")][:2] == [large, large]
