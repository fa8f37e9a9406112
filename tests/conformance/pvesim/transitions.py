"""The per-service state machine of the HA manager (one pass per round, repeated while
anything changes), and fencing with recovery."""

from __future__ import annotations

from typing import Any

from pvesim.manager import ERROR, EWRONG_NODE, IGNORED, SUCCESS, Manager


def run_state_machine(m: Manager, sc: dict[str, Any], results: dict[str, Any],
                      modes: dict[str, str]) -> None:
    handlers = {"stopped": stopped, "started": started, "request_start": request_start,
                "migrate": migrate_relocate, "relocate": migrate_relocate,
                "request_start_balance": migrate_relocate, "recovery": recovery,
                "request_stop": request_stop, "error": error}
    while True:
        repeat = False
        for sid in sorted(m.ss):
            sd = m.ss[sid]
            cd = sc.get(sid) or {"state": "disabled"}
            lrm_res = results.get(sd.get("uid")) if sd.get("uid") else None
            last = sd["state"]
            if last == "freeze":
                if sd.get("node") and modes.get(sd["node"]) == "active":
                    m.change_state(sid, "started" if cd["state"] == "started" else "request_stop")
            elif last in handlers:
                handlers[last](m, sid, cd, sd, lrm_res)
            mode = modes.get(sd["node"]) if sd.get("node") else None
            if mode == "restart" and sd["state"] in ("started", "stopped", "request_stop"):
                m.change_state(sid, "freeze")
            repeat = repeat or sd["state"] != last
        fenced: dict[str, bool] = {}
        for sid in sorted(m.ss):
            sd = m.ss[sid]
            if sd["state"] != "fence":
                continue
            node = sd["node"]
            if node not in fenced:
                fenced[node] = m.ns.fence(node)
            if fenced[node]:
                m.change_state(sid, "recovery")
                repeat = True
        for node in sorted(n for n in m.ns.status if n not in fenced):
            if m.ns.get(node) != "fence":
                continue
            m.log(f"node '{node}' in fence state but no services to-fence! admin interference?!",
                  "notice")
            repeat = m.ns.fence(node) or repeat
        if not repeat:
            return


def request_stop(m: Manager, sid: str, cd: dict, sd: dict, lrm_res: dict | None) -> None:
    if lrm_res:
        if lrm_res["exit_code"] == SUCCESS:
            m.change_state(sid, "stopped")
        else:
            m.log(f"service '{sid}' stop failed (exit code {lrm_res['exit_code']})", "err")
            m.change_state(sid, "error")
        return
    if m.ns.offline_delayed(sd["node"]):
        m.change_state(sid, "fence")


def migrate_relocate(m: Manager, sid: str, cd: dict, sd: dict, lrm_res: dict | None) -> None:
    if lrm_res:
        code = lrm_res["exit_code"]
        req = "started" if cd["state"] == "started" else "request_stop"
        if code == SUCCESS:
            m.change_state(sid, req, node=sd["target"])
            return
        if code == EWRONG_NODE:
            m.log(f"service '{sid}' - migration failed: service registered on wrong node!", "err")
            m.change_state(sid, "error")
        elif code == IGNORED:
            m.log(f"service '{sid}' - rebalance-on-start request ignored - service already running")
            m.change_state(sid, req, node=sd["node"])
        else:
            m.log(f"service '{sid}' - migration failed (exit code {code})", "err")
            m.change_state(sid, req, node=sd["node"])
            return
    if m.ns.offline_delayed(sd["node"]):
        m.change_state(sid, "fence")


def stopped(m: Manager, sid: str, cd: dict, sd: dict, lrm_res: dict | None) -> None:
    if sd["node"] != cd.get("node"):
        m.log(f"fixup service '{sid}' location ({sd['node']} => {cd['node']})")
        sd["node"] = cd["node"]
    if sd.get("cmd"):
        cmd = sd["cmd"].pop(0)
        if cmd in ("migrate", "relocate"):
            target = sd["cmd"].pop(0)
            if not m.ns.is_online(target):
                m.log(f"ignore service '{sid}' {cmd} request - node '{target}' not online", "err")
            elif sd["node"] == target:
                m.log(f"ignore service '{sid}' {cmd} request - service already on node '{target}'")
            else:
                m.change_state(sid, cmd, node=sd["node"], target=target)
                return
        elif cmd == "stop":
            m.log(f"ignore service '{sid}' {cmd} request - service already stopped")
        sd.pop("cmd", None)
    if cd["state"] == "disabled":
        return
    if m.ns.offline_delayed(sd["node"]) and m.ns.get(sd["node"]) != "maintenance":
        m.change_state(sid, "fence")
        return
    if cd["state"] == "started":
        m.change_state(sid, "request_start", node=sd["node"])


def request_start(m: Manager, sid: str, cd: dict, sd: dict, lrm_res: dict | None) -> None:
    current = sd["node"]
    if m.rebalance_on_start:
        selected = m.select_node(sid, cd, "best-score")
        which = "new" if selected != current else "current"
        m.log(f"service {sid}: re-balance selected {which} node {selected} for startup")
        if selected != current:
            m.change_state(sid, "request_start_balance", node=current, target=selected)
            return
    m.change_state(sid, "started", node=current)


def started(m: Manager, sid: str, cd: dict, sd: dict, lrm_res: dict | None) -> None:
    ns = m.ns
    if not ns.is_online(sd["node"]):
        if ns.offline_delayed(sd["node"]):
            m.change_state(sid, "fence")
        if ns.get(sd["node"]) != "maintenance":
            return
        sd["maintenance_node"] = sd["node"]
    if cd["state"] in ("disabled", "stopped"):
        m.change_state(sid, "request_stop")
        return
    if cd["state"] != "started":
        m.log(f"service '{sid}' - unknown state '{cd['state']}' in service configuration", "err")
        return
    if sd.get("cmd"):
        _started_command(m, sid, sd)
        return
    preference = "none"
    if lrm_res:
        code = lrm_res["exit_code"]
        if code == SUCCESS:
            if sd.get("failed_nodes") is not None:
                m.log(f"relocation policy successful for '{sid}' on node '{sd['node']}', failed nodes: "
                      + ", ".join(sd["failed_nodes"]))
            sd.pop("failed_nodes", None)
            sd["running"] = 1
        elif code in (ERROR, EWRONG_NODE):
            sd.pop("running", None)
            sd.setdefault("failed_nodes", []).append(sd["node"])
            if len(sd["failed_nodes"]) <= cd.get("max_relocate", 1):
                preference = "try-next"
                m.log(f"starting service {sid} on node '{sd['node']}' failed, relocating service.", "warning")
            else:
                m.log(f"recovery policy for service {sid} failed, entering error state. Failed nodes: "
                      + ", ".join(sd["failed_nodes"]), "err")
                m.change_state(sid, "error")
                return
        else:
            sd.setdefault("failed_nodes", []).append(sd["node"])
            m.log(f"service '{sid}' got unrecoverable error (exit code {code})", "err")
            m.change_state(sid, "error")
            return
    node = m.select_node(sid, cd, preference)
    if node and sd["node"] != node:
        fallback = sd.get("maintenance_node")
        if fallback is not None:
            if node == fallback:
                m.log(f"moving service '{sid}' back to '{fallback}', node came back from maintenance.")
                sd.pop("maintenance_node", None)
            elif sd["node"] != fallback:
                m.log(f"dropping maintenance fallback node '{fallback}' for '{sid}'")
                sd.pop("maintenance_node", None)
        if cd["type"] == "vm":
            m.log(f"migrate service '{sid}' to node '{node}' (running)")
            m.change_state(sid, "migrate", node=sd["node"], target=node)
        else:
            m.log(f"relocate service '{sid}' to node '{node}'")
            m.change_state(sid, "relocate", node=sd["node"], target=node)
        return
    if preference == "try-next" and node is None:
        m.log(f"Start Error Recovery: Tried all available nodes for service '{sid}', retry start on "
              "current node. Tried nodes: " + ", ".join(sd.get("failed_nodes") or []), "warning")
    if sd.get("maintenance_node") and sd["node"] == sd["maintenance_node"] and ns.get(sd["node"]) == "online":
        m.log(f"service '{sid}': clearing stale maintenance node '{sd['maintenance_node']}' setting "
              "(is current node)")
        sd.pop("maintenance_node", None)
    if lrm_res is not None:
        sd["uid"] = f"{sd['uid']}+"   # a new uid: start again if it went down, lose no result


def _started_command(m: Manager, sid: str, sd: dict) -> None:
    cmd = sd["cmd"].pop(0)
    if cmd in ("migrate", "relocate"):
        target = sd["cmd"].pop(0)
        if not m.ns.is_online(target):
            m.log(f"ignore service '{sid}' {cmd} request - node '{target}' not online", "err")
        elif sd["node"] == target:
            m.log(f"ignore service '{sid}' {cmd} request - service already on node '{target}'")
        else:
            m.log(f"{cmd} service '{sid}' to node '{target}'")
            m.change_state(sid, cmd, node=sd["node"], target=target)
    elif cmd == "stop":
        timeout = sd["cmd"].pop(0)
        if int(timeout) == 0:
            m.log(f"request immediate service hard-stop for service '{sid}'")
        else:
            m.log(f"request graceful stop with timeout '{timeout}' for service '{sid}'")
        m.change_state(sid, "request_stop", timeout=timeout)
        m.world.service_config[sid]["state"] = "stopped"
    else:
        m.log(f"unknown command '{cmd}' for service '{sid}'", "err")
    m.ss[sid].pop("cmd", None)


def error(m: Manager, sid: str, cd: dict, sd: dict, lrm_res: dict | None) -> None:
    if cd["state"] == "disabled":
        sd.pop("failed_nodes", None)
        m.change_state(sid, "stopped")


def recovery(m: Manager, sid: str, cd: dict, sd: dict, lrm_res: dict | None) -> None:
    fenced = sd["node"]
    node = m.select_node(sid, cd, "best-score")
    if node:
        if node == fenced:
            m.log(f"recover service '{sid}' to previous failed and fenced node '{fenced}' again")
        else:
            m.log(f"recover service '{sid}' from fenced node '{fenced}' to node '{node}'")
        m.world.change_service_location(sid, sd["node"], node)
        cd["node"] = sd["node"] = node
        m.change_state(sid, "started" if cd["state"] == "started" else "request_stop", node=node)
        return
    m.log(f"recovering service '{sid}' from fenced node '{fenced}' failed, no recovery node found", "err")
    if cd["state"] == "disabled":
        sd.pop("failed_nodes", None)
        m.change_state(sid, "stopped")
