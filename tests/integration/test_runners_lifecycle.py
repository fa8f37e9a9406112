"""A runner's whole life over the simulator and its fake GitHub: job queued → VM cloned →
JIT config written by the guest agent → the runner connects, runs its one job, powers off
→ Keel unregisters it and deletes the VM."""

from __future__ import annotations

import pytest

from runners_helpers import GiB

SMALL = {"name": "keel-c2-m4", "max_runners": 4,
         "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}


@pytest.fixture
def kit(kits):
    return kits([SMALL])


def test_one_job_one_vm_from_queued_to_deleted(kit):
    kit.step()                                   # scale set on GitHub, session open
    assert kit.github_state()["scale_sets"][0]["name"] == "keel-c2-m4"
    [job] = kit.queue("keel-c2-m4", duration=30)
    kit.step(0)                                  # JobAssigned → a clone is requested
    [clone] = kit.clones()
    assert clone["params"]["name"].startswith("keel-c2-m4-") and clone["params"]["full"] == "0"
    assert kit.vms()[int(clone["params"]["newid"])]["lock"] == "clone"
    kit.settle(20)                               # clone, config, start, boot, JIT, connect, start job
    [vm] = kit.vms().values()
    assert vm["name"] == clone["params"]["name"] and vm["node"] == clone["params"].get("target", "pve1")
    config = kit.sim.client().get(f"/nodes/{vm['node']}/qemu/{vm['vmid']}/config")
    assert config["cores"] == 2 and int(config["memory"]) == 4096 and str(config["agent"]) == "1"
    assert set(config["tags"].split(";")) >= {"keel-runner", f"keel-runner-{kit.settings.installation_id}"}
    assert "keel-runner:" in config["description"]
    assert kit.jobs()[job]["status"] == "in_progress"
    [runner] = kit.service.status()["runners"]
    assert runner["state"] == "busy" and runner["vmid"] == vm["vmid"]
    assert kit.sim.control("GET", f"guests/{vm['vmid']}/files") == {}     # the unit deleted the JIT
    assert kit.sim.client().get("/cluster/ha/resources") == []             # never HA-managed
    kit.settle(40)
    assert kit.jobs()[job]["status"] == "completed"
    assert kit.service.status()["runners"] == []
    kit.assert_clean()
    removed = kit.service.meters.count("keel_runners_removed_total", reason="job_completed")
    assert removed == 1 and kit.service.meters.count("keel_runners_created_total") == 1


def test_many_jobs_never_more_runners_than_max(kit):
    kit.step()
    kit.queue("keel-c2-m4", duration=20, count=10)
    for _ in range(120):
        kit.step(1)
        if all(j["status"] == "completed" for j in kit.jobs().values()) and not kit.vms():
            break
    assert all(j["status"] == "completed" for j in kit.jobs().values())
    kit.assert_clean()
    assert kit.assert_limits() == {"keel-c2-m4": 4}


def test_min_runners_are_kept_idle_and_ready(kits):
    kit2 = kits([dict(SMALL, min_runners=2)])
    kit2.settle(30)
    runners = kit2.service.status()["runners"]
    assert [r["state"] for r in runners] == ["idle", "idle"]
    [job] = kit2.queue("keel-c2-m4", duration=30)
    kit2.step(0)
    kit2.settle(5)
    assert kit2.jobs()[job]["status"] == "in_progress"             # an idle runner took it at once
    assert len(kit2.vms()) == 3                                    # and a third refills the reserve
    assert kit2.node_free()["pve1"] <= 60 * GiB


LEAST = ["VM.Allocate", "VM.Clone", "VM.Config.CPU", "VM.Config.Memory", "VM.Config.Options", "VM.PowerMgmt",
         "VM.Audit", "VM.GuestAgent.Audit", "VM.GuestAgent.FileWrite", "Datastore.AllocateSpace",
         "Datastore.Audit", "Sys.Audit", "SDN.Use"]


def test_the_privileges_docs_runners_md_lists_are_enough(kits):
    from runners_helpers import scenario
    data = scenario(roles={"KeelRunners": LEAST},
                    acl=[{"path": "/", "role": "KeelRunners", "user": "keel@pve"}])
    kit = kits([SMALL], data)
    kit.step()
    [job] = kit.queue("keel-c2-m4", duration=10)
    for _ in range(60):
        kit.step(1)
        if kit.jobs()[job]["status"] == "completed" and not kit.vms() and not kit.service.runners:
            break
    assert [r for r in kit.sim.requests_log(0) if r["status"] == 403] == []
    kit.assert_clean()
