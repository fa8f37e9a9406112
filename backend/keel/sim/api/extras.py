"""What monitoring tools read besides the cluster's load: backup jobs and the guests no
backup covers, replication jobs, a node's subscription, the QDevice.

The simulated cluster has no backup jobs, no replication jobs and no QDevice; a node has
a subscription only when its scenario entry names a ``level``.  Each answer is what PVE
answers in that case (pve-manager's Cluster/BackupInfo.pm, Backup.pm, Replication.pm,
ReplicationConfig.pm and Subscription.pm; pve-cluster's ClusterConfig.pm).
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from keel.sim.api.base import Call, route

SHOP_URL = "https://www.proxmox.com/en/proxmox-virtual-environment/pricing"
LEVELS = {"c": "Community", "b": "Basic", "s": "Standard", "p": "Premium"}
DAY = 86400


@route("GET", "/cluster/backup")
def backup_jobs(call: Call) -> list[dict[str, Any]]:
    """The backup jobs (vzdump.cron and jobs.cfg): none."""
    return []


@route("GET", "/cluster/backup-info")
def backup_info_index(call: Call) -> list[dict[str, str]]:
    return [{"subdir": "not-backed-up"}]


@route("GET", "/cluster/backup-info/not-backed-up")
def not_backed_up(call: Call) -> list[dict[str, Any]]:
    """Every guest no backup job includes, which is all of them, templates too (PVE does
    not leave them out); only guests the caller may audit, so that no name leaks. A guest
    without a name in its config comes without ``name``."""
    result = []
    for vmid, guest in sorted(call.cluster.guests.items()):
        if not call.can(f"/vms/{vmid}", ["VM.Audit"]):
            continue
        entry: dict[str, Any] = {"vmid": vmid, "type": guest.type}
        name = guest.config.get("name" if guest.type == "qemu" else "hostname")
        if name is not None:
            entry["name"] = str(name)
        result.append(entry)
    return result


@route("GET", "/cluster/replication")
def replication_jobs(call: Call) -> list[dict[str, Any]]:
    """The storage replication jobs (replication.cfg): none."""
    return []


@route("GET", "/nodes/{node}/replication")
def node_replication(call: Call) -> list[dict[str, Any]]:
    """The status of the replication jobs on a node: none."""
    call.cluster.node(call.params["node"])
    return []


@route("GET", "/nodes/{node}/subscription")
def subscription(call: Call) -> dict[str, Any]:
    """Subscription.pm ``get``: without a key ``notfound``; with one (the scenario's ``level``)
    an active subscription. The server ID and the key's details need Sys.Audit on the node."""
    cluster = call.cluster
    name = call.params["node"]
    node = cluster.node(name)
    audit = call.can(f"/nodes/{name}", ["Sys.Audit"])
    digest = hashlib.md5(f"{cluster.seed}:{name}".encode()).hexdigest()
    level = node.spec.level
    if level not in LEVELS:
        info: dict[str, Any] = {"status": "notfound", "message": "There is no subscription key",
                                "url": SHOP_URL}
        if audit:
            info["serverid"] = digest.upper()
        return info
    if not audit:   # PVE sends the key's message, which an active key lacks: null
        return {"status": "active", "message": None, "url": SHOP_URL}
    sockets = node.spec.sockets
    key_sockets = next((n for n in (1, 2, 4, 8) if n >= sockets), 8)
    registered = int(cluster.scenario.start_time or cluster.t) - 200 * DAY
    due = registered + 365 * DAY
    cpus = "CPU" if key_sockets == 1 else "CPUs"
    return {
        "status": "active", "level": level,
        "key": f"pve{key_sockets}{level}-{digest[:10]}",
        "productname": f"Proxmox VE {LEVELS[level]} Subscription {key_sockets} {cpus}/year",
        "regdate": time.strftime("%Y-%m-%d 00:00:00", time.gmtime(registered)),
        "nextduedate": time.strftime("%Y-%m-%d", time.gmtime(due)),
        "checktime": int(cluster.t) - DAY, "serverid": digest.upper(), "sockets": sockets,
        "url": SHOP_URL,
    }


@route("GET", "/cluster/config/qdevice")
def qdevice(call: Call) -> dict[str, Any]:
    """ClusterConfig.pm ``status``: an empty object when no corosync-qdevice runs."""
    return {}
