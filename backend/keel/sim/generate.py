"""``keel sim generate``: a scenario of any size, reproducible from its seed.

Profiles say where the guests start:

* ``even``: spread round-robin, the cluster is already level;
* ``skewed``: the first node holds five times what the last does (a balancer has work);
* ``random``: each guest on a node chosen at random;
* ``hotspot``: one node holds three times what each other node does.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

PROFILES = ("even", "skewed", "random", "hotspot")
GiB = 1024**3

_GUEST_MEM_GIB = [(1, 8), (2, 20), (4, 30), (8, 25), (16, 12), (32, 5)]
_GUEST_CORES = [(1, 25), (2, 35), (4, 25), (8, 12), (16, 3)]
_NODE_CPUS = [32, 48, 64, 96, 128]
_LOAD_PROFILES = ["office", "batch", "steady", None]
_TAGS = ["web", "db", "cache", "worker", "monitoring", "backup"]
DEMO_TOKEN_USER = "keel@pve"
DEMO_TOKEN_NAME = "keel"


def _weighted(rng: random.Random, table: list[tuple[int, int]]) -> int:
    values, weights = zip(*table)
    return rng.choices(values, weights)[0]


def generate(nodes: int, guests: int, seed: int = 1, profile: str = "skewed",
             pve_version: str = "9.1.4", name: str | None = None) -> dict[str, Any]:
    if nodes < 1:
        raise ValueError("--nodes must be at least 1")
    if guests < 0:
        raise ValueError("--guests cannot be negative")
    if profile not in PROFILES:
        raise ValueError(f"--profile must be one of {', '.join(PROFILES)}")
    rng = random.Random(seed)
    width = len(str(nodes))
    node_names = [f"pve{i + 1:0{width}d}" if nodes >= 10 else f"pve{i + 1}" for i in range(nodes)]

    guest_specs = []
    total_mem = 0
    for index in range(guests):
        vmid = 100 + index
        kind = "lxc" if rng.random() < 0.15 else "qemu"
        mem_gib = _weighted(rng, _GUEST_MEM_GIB)
        cores = _weighted(rng, _GUEST_CORES)
        template = kind == "qemu" and rng.random() < 0.01
        running = not template and rng.random() < 0.9
        cpu = round(min(0.95, rng.lognormvariate(-2.0, 0.8)), 3)
        spec: dict[str, Any] = {
            "vmid": vmid, "name": f"{'vm' if kind == 'qemu' else 'ct'}{vmid}", "type": kind,
            "status": "running" if running else "stopped", "cpus": cores,
            "memory": f"{mem_gib}GiB", "cpu": cpu, "mem_used": round(rng.uniform(0.35, 0.9), 2),
        }
        if template:
            spec["template"] = True
            spec["name"] = f"tmpl{vmid}"
        load_profile = rng.choice(_LOAD_PROFILES)
        if load_profile:
            spec["profile"] = load_profile
        if rng.random() < 0.3:
            spec["tags"] = sorted(rng.sample(_TAGS, rng.randint(1, 2)))
        if rng.random() < 0.25:
            spec["pool"] = rng.choice(["prod", "dev", "ci"])
        if rng.random() < 0.05:
            spec["storage"] = "local-lvm"
        if kind == "qemu" and not template and rng.random() < 0.2:
            spec["ha"] = "started" if running else "stopped"
        if kind == "qemu" and rng.random() < 0.01:
            spec["devices"] = ["hostpci0"]
        guest_specs.append(spec)
        if running:
            total_mem += mem_gib

    weights = _placement_weights(profile, nodes, rng)
    placement = _place(rng, profile, len(guest_specs), weights)
    placed_mem = [0] * nodes
    for spec, node_index in zip(guest_specs, placement):
        spec["node"] = node_names[node_index]
        if spec["status"] == "running":
            placed_mem[node_index] += int(spec["memory"][:-3]) * spec["mem_used"]

    # One node size for all: the cluster runs at about 55 % memory, the fullest node at 90 %.
    need = max(total_mem * 0.7 / 0.55 / nodes, max(placed_mem) / 0.9)
    per_node_mem = max(64, int(need / 64 + 1) * 64)
    node_specs = []
    for i, node_name in enumerate(node_names):
        node_specs.append({"name": node_name, "cpus": rng.choice(_NODE_CPUS),
                           "memory": f"{per_node_mem}GiB", "ip": f"10.0.{i // 250}.{i % 250 + 1}"})

    scenario: dict[str, Any] = {
        "name": name or f"generated-{nodes}x{guests}-{profile}-{seed}",
        "description": f"{nodes} nodes, {guests} guests, placement {profile}, seed {seed} "
                       f"(keel sim generate)",
        "pve_version": pve_version, "cluster_name": "keel-sim", "seed": seed,
        "storages": [
            {"storage": "local", "type": "dir", "content": ["iso", "vztmpl", "backup"],
             "size": "100GiB"},
            {"storage": "local-lvm", "type": "lvmthin", "content": ["images", "rootdir"],
             "size": "2TiB"},
            {"storage": "ceph", "type": "rbd", "content": ["images", "rootdir"], "shared": True,
             "size": "500TiB"},
        ],
        "profiles": {
            "office": {"daily": {"amplitude": 0.6, "peak_hour": 14}, "noise": 0.1},
            "batch": {"bursts": {"per_hour": 1, "duration": "10m", "level": 0.9}, "noise": 0.05},
            "steady": {"noise": 0.03},
        },
        "pools": ["prod", "dev", "ci"],
        "users": [
            {"userid": "root@pam", "password": "keel-sim"},
            {"userid": DEMO_TOKEN_USER, "password": "keel-sim",
             "tokens": [{"id": DEMO_TOKEN_NAME, "secret": str(uuid.UUID(int=rng.getrandbits(128))),
                         "privsep": True}]},
        ],
        "acl": [
            {"path": "/", "role": "Administrator", "user": DEMO_TOKEN_USER},
            {"path": "/", "role": "Administrator", "token": f"{DEMO_TOKEN_USER}!{DEMO_TOKEN_NAME}"},
        ],
        "cluster_options": {"crs": {"ha": "static"}},
        "nodes": node_specs,
        "guests": guest_specs,
    }
    return scenario


def _placement_weights(profile: str, nodes: int, rng: random.Random) -> list[float]:
    if nodes == 1:
        return [1.0]
    if profile == "skewed":
        return [2.0 - 1.6 * i / (nodes - 1) for i in range(nodes)]   # the first node 5x the last
    if profile == "hotspot":
        return [3.0] + [1.0] * (nodes - 1)                           # one node 3x the others
    return [1.0] * nodes


def _place(rng: random.Random, profile: str, count: int, weights: list[float]) -> list[int]:
    nodes = len(weights)
    if profile == "even":
        return [i % nodes for i in range(count)]
    return rng.choices(range(nodes), weights, k=count)
