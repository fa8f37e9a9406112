"""What a node's sleep depends on besides the snapshot (``keel.model.PowerFacts``), and the
calls that put a node to sleep and wake it.

Reads, for a cluster of N online nodes:

| call                                   | gives                                             |
|----------------------------------------|---------------------------------------------------|
| GET /cluster/status                    | the node the API runs on (``local``)              |
| GET /cluster/config/nodes              | corosync's ``quorum_votes`` of every node         |
| GET /nodes/{n}/config, per online node | its ``wakeonlan`` MAC                             |
| GET /cluster/ha/status/manager_status  | each node's LRM mode (active, maintenance, ...)   |
| GET /cluster/ceph/status               | Ceph's health, monitors and PG states (if Ceph)   |
| GET /nodes/{local}/ceph/osd and /pool  | OSDs per host, their state; pools' size/min_size  |

That is N + 4 calls without Ceph, N + 6 with it.
"""

from __future__ import annotations

import logging
from typing import Any

from keel.errors import KeelError, NotFoundError, UnavailableError
from keel.model import CephFacts, CephPool, PowerFacts, Snapshot
from keel.pve.client import PveClient

log = logging.getLogger("keel.pve")

# What PVE answers where a node has no Ceph at all: then the cluster has none to care for.
_NO_CEPH = ("binary not installed", "not configured", "configuration not initialized", "not installed")


def wol_mac(text: str | None) -> str | None:
    """The MAC of a node config's ``wakeonlan`` (``MAC`` or ``mac=MAC,bind-interface=...``)."""
    if not text:
        return None
    for part in str(text).split(","):
        key, _, value = part.partition("=")
        if not value:
            return key.strip() or None
        if key.strip() == "mac":
            return value.strip() or None
    return None


def read_facts(client: PveClient, snapshot: Snapshot) -> PowerFacts:
    calls0 = client.calls
    status = client.get("/cluster/status")
    local = next((str(e.get("name")) for e in status if e.get("type") == "node" and int(e.get("local", 0))),
                 None)
    try:
        corosync = client.get("/cluster/config/nodes")
        votes = {str(e.get("node") or e.get("name")): int(e.get("quorum_votes", 1)) for e in corosync}
    except UnavailableError:
        raise
    except KeelError as err:            # a single node that is no cluster has no corosync.conf
        log.warning("cannot read corosync's nodes: %s", err)
        votes = {name: 1 for name in snapshot.nodes} if len(snapshot.nodes) == 1 else {}
    wol: dict[str, str | None] = {}
    for name, node in snapshot.nodes.items():
        if node.online:
            try:
                wol[name] = wol_mac(client.get(f"/nodes/{name}/config").get("wakeonlan"))
            except UnavailableError as err:       # gone since the snapshot (asleep, lost): as if off
                log.info("cannot read %s's config: %s", name, err)
    manager = client.get("/cluster/ha/status/manager_status") or {}
    lrm = {str(n): str(v.get("mode", "")) for n, v in (manager.get("lrm_status") or {}).items()
           if isinstance(v, dict)}
    return PowerFacts(local_node=local, votes=votes, wol=wol, ceph=read_ceph(client, local), lrm_modes=lrm,
                      api_calls=client.calls - calls0)


def read_ceph(client: PveClient, local: str | None) -> CephFacts | None:
    try:
        status = client.get("/cluster/ceph/status")
    except UnavailableError:
        raise
    except KeelError as err:
        if any(hint in str(err) for hint in _NO_CEPH) or isinstance(err, NotFoundError):
            return None
        return CephFacts(health="", error=str(err))
    try:
        tree = client.get(f"/nodes/{local}/ceph/osd")
        pools = client.get(f"/nodes/{local}/ceph/pool")
    except UnavailableError:
        raise
    except KeelError as err:
        return CephFacts(health="", error=str(err))
    health = status.get("health") or {}
    monmap = status.get("monmap") or {}
    pg = {str(e.get("state_name")): int(e.get("count", 0))
          for e in (status.get("pgmap") or {}).get("pgs_by_state", [])}
    return CephFacts(
        health=str(health.get("status", "")), checks=tuple(sorted(health.get("checks") or {})),
        osds=_osds_by_host(tree), mons=tuple(str(m.get("name")) for m in monmap.get("mons", [])),
        mons_in_quorum=tuple(str(n) for n in status.get("quorum_names", [])),
        pools=tuple(CephPool(str(p.get("pool_name")), int(p.get("size", 3)), int(p.get("min_size", 2)))
                    for p in pools),
        pg_states=pg, flags=frozenset(f for f in str(tree.get("flags", "")).split(",") if f))


def _osds_by_host(tree: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """host -> (OSDs, OSDs up), from the CRUSH tree PVE returns."""
    found: dict[str, tuple[int, int]] = {}

    def walk(item: dict[str, Any]) -> None:
        if item.get("type") == "host":
            osds = [c for c in item.get("children", []) if c.get("type") == "osd"]
            found[str(item.get("name"))] = (len(osds), sum(1 for c in osds if c.get("status") == "up"))
            return
        for child in item.get("children", []):
            walk(child)

    walk(tree.get("root") or {})
    return found


# -- acting --------------------------------------------------------------------------------

# PVE's API has no call for HA maintenance: pve-ha-manager's own command writes
# /etc/pve/ha/crm_commands.  Fixed, never from the config: keel.yaml may be written by a web
# user with Sys.Modify, and nothing written there may choose what root runs
# (docs/security.md).  Found on PATH (/usr/sbin on a PVE node).
HA_MAINTENANCE = ("ha-manager", "crm-command", "node-maintenance")


def ha_maintenance(enable: bool, node: str, timeout_s: float = 60.0) -> None:
    """``ha-manager crm-command node-maintenance enable|disable NODE``; raise with what it said
    if it fails."""
    import subprocess
    argv = [*HA_MAINTENANCE, "enable" if enable else "disable", node]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise KeelError(f"{' '.join(argv)}: {err}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise KeelError(f"{' '.join(argv)} failed (exit {done.returncode})" + (f": {said[-1]}" if said else ""))


def set_noout(client: PveClient, on: bool) -> None:
    client.put("/cluster/ceph/flags/noout", value=int(on))


def shutdown(client: PveClient, node: str) -> None:
    client.post(f"/nodes/{node}/status", command="shutdown")


def wake(client: PveClient, node: str) -> str:
    """Send the magic packet for ``node`` from the node the API runs on; answers the MAC."""
    return str(client.post(f"/nodes/{node}/wakeonlan"))


def node_online(client: PveClient, node: str) -> bool:
    """In the cluster (``/cluster/status``) and its own API answering (pveproxy is up)."""
    status = client.get("/cluster/status")
    entry = next((e for e in status if e.get("type") == "node" and e.get("name") == node), None)
    if entry is None or not int(entry.get("online", 0)):
        return False
    try:
        client.get(f"/nodes/{node}/status")
    except UnavailableError:
        return False
    return True
