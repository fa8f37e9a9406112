"""Node power and corosync: ``POST /nodes/{node}/status`` (shutdown, reboot),
``POST /nodes/{node}/wakeonlan``, ``GET``/``PUT /nodes/{node}/config`` (where the
``wakeonlan`` MAC lives) and ``/cluster/config`` (the corosync node list with its votes).

As in pve-manager's Nodes.pm and NodeConfig.pm and pve-cluster's ClusterConfig.pm."""

from __future__ import annotations

import hashlib
from typing import Any

from keel.sim.api.base import Call, route
from keel.sim.errors import ApiError
from keel.sim.schema import parse_property_string, split_list


@route("POST", "/nodes/{node}/status")
def node_cmd(call: Call) -> None:
    """``(sleep 2;/sbin/poweroff)&`` or ``reboot``: null at once, no task of its own."""
    call.cluster.power.shutdown(call.params["node"], call.params["command"] == "reboot", call.user)
    return None


@route("POST", "/nodes/{node}/wakeonlan")
def wakeonlan(call: Call) -> str:
    """Sent from the node the API runs on (no proxyto): ``{node}`` is the node to wake.
    Answers the MAC the magic packet was made for."""
    cluster = call.cluster
    target = call.params["node"]
    local = cluster.scenario.local_node
    if target in ("localhost", local):
        raise ApiError(500, f"'{target}' is local node, cannot wake my self!")
    if target not in cluster.nodes:
        raise ApiError(500, f"no such cluster node '{target}'")
    mac = wol_mac(cluster.node_config[target])
    if mac is None:
        raise ApiError(500, f"No wake on LAN MAC address defined for '{target}'!")
    cluster.power.wake(target, sender=local)
    return mac


def wol_mac(config: dict[str, Any]) -> str | None:
    """PVE::NodeConfig::get_wakeonlan_config's ``mac`` (the default key)."""
    from keel.sim.scenario import node_config_specs
    text = config.get("wakeonlan")
    if not text:
        return None
    parsed = parse_property_string(node_config_specs()["wakeonlan"]["format"], str(text))
    return parsed.get("mac")


def _digest(config: dict[str, Any]) -> str:
    """SHA1 of the file as PVE writes it (``key: value`` lines, sorted)."""
    text = "".join(f"{k}: {v}\n" for k, v in sorted(config.items()))
    return hashlib.sha1(text.encode()).hexdigest()


@route("GET", "/nodes/{node}/config")
def get_config(call: Call) -> dict[str, Any]:
    config = call.cluster.node_config[call.cluster.node(call.params["node"]).name]
    prop = call.params.get("property")
    if prop is not None and prop != "all":
        return {prop: config[prop]} if prop in config else {}
    result = dict(config)
    result["digest"] = _digest(config)
    return result


@route("PUT", "/nodes/{node}/config")
def set_config(call: Call) -> None:
    cluster = call.cluster
    config = cluster.node_config[cluster.node(call.params["node"]).name]
    digest = call.params.get("digest")
    if digest and digest != _digest(config):
        raise ApiError(500, "detected modified configuration - file changed by other user? "
                            "Try again.")
    for key, value in call.params.items():
        if key not in ("node", "delete", "digest"):
            config[key] = value
    for key in split_list(str(call.params.get("delete", "")), r"[,;\s]"):
        config.pop(key, None)
    return None


# -- corosync ----------------------------------------------------------------------------


@route("GET", "/cluster/config")
def config_index(call: Call) -> list[dict[str, str]]:
    return [{"name": n} for n in ("nodes", "totem", "join", "qdevice", "apiversion")]


@route("GET", "/cluster/config/nodes")
def corosync_nodes(call: Call) -> list[dict[str, Any]]:
    """The corosync.conf node list: its values are strings, as pve-cluster parses them."""
    cluster = call.cluster
    return [{"node": name, "name": name, "nodeid": str(node.nodeid),
             "quorum_votes": str(node.spec.votes), "ring0_addr": node.spec.ip}
            for name, node in sorted(cluster.nodes.items())]


@route("GET", "/cluster/config/totem")
def totem(call: Call) -> dict[str, Any]:
    return {"cluster_name": call.cluster.scenario.cluster_name, "config_version": "7",
            "interface": {"0": {"linknumber": "0"}}, "ip_version": "ipv4-6",
            "link_mode": "passive", "secauth": "on", "version": "2"}
