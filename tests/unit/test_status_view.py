"""``keel status`` rendering from a hand-made snapshot (no I/O)."""

from keel.model import CrsOptions, Guest, HaResource, LocalDisk, Node, Snapshot
from keel.status_view import Style, render, summary

GiB = 1024**3


def snapshot(**overrides):
    nodes = {
        "pve1": Node("pve1", True, 32, 0.80, 128 * GiB, 100 * GiB, 100 * GiB, 10 * GiB, ha_state="online"),
        "pve2": Node("pve2", True, 32, 0.10, 128 * GiB, 20 * GiB, 100 * GiB, 10 * GiB, ha_state="maintenance"),
        "pve3": Node("pve3", False, 32, 0.0, 128 * GiB, 0),
    }
    guests = {
        100: Guest(100, "qemu", "web1", "pve1", "running", 4, 0.5, 8 * GiB, 6 * GiB, uptime_s=3600,
                   tags=("web",), pool="prod", ha=HaResource("vm:100", "started", "started")),
        101: Guest(101, "lxc", "dns", "pve2", "running", 1, 0.05, GiB, GiB // 2,
                   local_disks=(LocalDisk("local-lvm:vm-101-disk-0", "local-lvm", 8 * GiB),)),
        9000: Guest(9000, "qemu", "tmpl", "pve1", "stopped", 2, 0, 4 * GiB, 0, template=True),
    }
    values = dict(taken_at=0.0, cluster_name="lab", pve_version="9.1.4", quorate=True, nodes=nodes,
                  guests=guests, ha_master="pve1", api_calls=10)
    values.update(overrides)
    return Snapshot(**values)


def test_summary_figures():
    data = summary(snapshot())
    assert data["cluster"] == "lab"
    assert [n["node"] for n in data["nodes"]] == ["pve1", "pve2", "pve3"]
    assert data["nodes"][0]["guests"] == 2 and data["nodes"][0]["ha_guests"] == 1
    assert data["nodes"][1]["maintenance"] is True
    assert data["nodes"][2]["load"] is None
    # two online nodes: loads (0.8 + 100/128)/2 and (0.1 + 20/128)/2
    assert data["imbalance"]["pve"] == 0.7211
    assert data["imbalance"]["spread_cpu"] == 70.0
    assert {g["vmid"] for g in data["guests"]} == {100, 101, 9000}


def test_plain_render_without_colour_or_unicode():
    text = render(snapshot(), Style(color=False, unicode=False), show_guests=True)
    assert "\033[" not in text
    assert "█" not in text
    lines = text.splitlines()
    assert lines[0] == "Cluster lab - Proxmox VE 9.1.4 - quorate - HA master pve1"
    assert lines[1] == "3 nodes (2 online) - 3 guests (2 running, 1 template) - 1 HA resources"
    # pve2 is in HA maintenance: Keel balances over pve1 alone (0.00); PVE's figure counts pve2
    assert lines[2].startswith("Imbalance 0.00 (typical distance of a node from the cluster average) - "
                               "PVE's CRS figure 0.72 - spread")
    pve1 = next(line for line in lines if line.startswith("pve1"))
    assert "online" in pve1 and "80%" in pve1 and "#############..." in pve1
    assert next(line for line in lines if line.startswith("pve2")).split()[1] == "maintenance"
    assert next(line for line in lines if line.startswith("pve3")).split()[1] == "offline"
    web1 = next(line for line in lines if "web1" in line)
    assert "HA started" in web1 and "pool prod" in web1 and "tags web" in web1
    assert "local disk 8 GiB" in next(line for line in lines if "dns" in line)
    assert "template" in next(line for line in lines if "tmpl" in line)


def test_no_quorum_and_pves_own_balancer_are_called_out():
    crs = CrsOptions(ha="dynamic", auto_rebalance=True, auto_rebalance_threshold=0.3)
    text = render(snapshot(quorate=False, crs=crs), Style(color=False, unicode=True))
    assert "NO QUORUM" in text
    assert "auto-rebalance is ON" in text and "threshold 30%" in text
