"""The ``proxmox`` provider: runners as VMs cloned from a template on a Proxmox VE cluster.

Every call goes through ``keel.pve.client.PveClient``; one provider is one cluster, this
one by default or another by ``url`` and token.  Each call returns at once: a clone, a
start or a delete is a task whose UPID the caller checks on later (``task``).

**Where a runner goes** (``choose``): of the allowed nodes that are online, the one with
the most memory free that fits it, cloned from the template's copy on that node if it has
one, else from a copy on another node that is up (a linked clone across nodes needs the
template on shared storage).  A template given by name is every template VM of that name;
one given per node is those VMs; a copy on a node that is down is never cloned from.  Free is what Proxmox VE reports (``maxmem - mem``)
less what Keel's own runners there will still take: each of them counts at its full
size until it uses it, so a VM just started, or not yet cloned, is not taken for room.
Cores are checked only against a node's size, since VMs share them.  Refusals:

* ``full``: no node has the memory free now (the message says what each has);
* ``never``: no allowed node could ever hold it, or the template is missing or is not a
  template, or ``nodes`` names nodes the cluster does not have; also a clone PVE refuses
  for its setup (a linked clone of a template on local storage to another node);
* ``failing``: no allowed node online, no copy of the template on a node that is up, or
  Proxmox VE failed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from keel.errors import KeelError, TaskFailedError, UnavailableError
from keel.pve.client import PveClient
from keel.pve.upid import parse_upid
from keel.runners.placement import FAILING, FULL, NEVER
from keel.runners.spec import ProviderSettings, RunnerSpec
from keel.units import format_bytes

log = logging.getLogger("keel.runners")

MiB = 1024**2


class Refused(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


class VmidTaken(Exception):
    """Another clone took the VMID first: ask for the next one."""


@dataclass(frozen=True)
class NodeView:
    name: str
    online: bool
    maxmem: int
    mem: int
    maxcpu: int


@dataclass(frozen=True)
class VmView:
    vmid: int
    name: str
    node: str
    status: str
    tags: frozenset[str]
    mem: int
    maxmem: int
    template: bool
    lock: str | None


@dataclass(frozen=True)
class Spot:
    """Where a runner goes: its node, and the template (and its node) it is cloned from."""

    node: str
    template: int
    source: str


@dataclass
class ClusterView:
    nodes: dict[str, NodeView] = field(default_factory=dict)
    vms: dict[int, VmView] = field(default_factory=dict)


class ProxmoxProvider:
    def __init__(self, settings: ProviderSettings, connect: Callable[[], PveClient]):
        self.settings = settings
        self.name = settings.name
        self._connect = connect
        self._client: PveClient | None = None
        self.calls: dict[tuple[str, str], int] = {}

    @property
    def client(self) -> PveClient:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def close(self) -> None:
        if self._client is not None and self.settings.url:
            self._client.close()

    def count(self, call: str, result: str) -> None:
        self.calls[(call, result)] = self.calls.get((call, result), 0) + 1

    # -- reading --------------------------------------------------------------------------

    def view(self) -> ClusterView:
        """Nodes and VMs in one call (``/cluster/resources``)."""
        try:
            rows = self.client.get("/cluster/resources")
        except KeelError:
            self.count("list", "error")
            raise
        self.count("list", "ok")
        view = ClusterView()
        for row in rows:
            if row.get("type") == "node":
                view.nodes[row["node"]] = NodeView(row["node"], row.get("status") == "online",
                                                   int(row.get("maxmem") or 0), int(row.get("mem") or 0),
                                                   int(row.get("maxcpu") or 0))
            elif row.get("type") == "qemu":
                tags = frozenset(t for t in str(row.get("tags") or "").replace(",", ";").split(";") if t)
                view.vms[int(row["vmid"])] = VmView(
                    int(row["vmid"]), str(row.get("name", "")), str(row.get("node", "")),
                    str(row.get("status", "")), tags, int(row.get("mem") or 0), int(row.get("maxmem") or 0),
                    bool(row.get("template")), row.get("lock") or None)
        return view

    @staticmethod
    def templates(view: ClusterView, spec: RunnerSpec) -> list[VmView]:
        """The template VMs ``spec`` names, or ``Refused(NEVER)`` if there is none."""
        if spec.template_name:
            found = [vm for vm in view.vms.values() if vm.template and vm.name == spec.template_name]
            if not found:
                raise Refused(NEVER, f"no template named {spec.template_name} on the cluster")
            return sorted(found, key=lambda vm: vm.vmid)
        found = []
        for node, vmid in spec.templates or (("", spec.template),):
            vm = view.vms.get(vmid)
            if vm is not None and vm.template and (not node or vm.node == node):
                found.append(vm)
        if not found:
            vmid = spec.template_ids[0] if spec.template_ids else spec.template
            vm = view.vms.get(vmid)
            if len(spec.template_ids) > 1:
                raise Refused(NEVER, f"none of the templates {spec.template_text} exists where named")
            if vm is None:
                raise Refused(NEVER, f"template {vmid} does not exist")
            raise Refused(NEVER, f"VM {vmid} is not a template")
        return found

    def choose(self, view: ClusterView, spec: RunnerSpec, pending: dict[str, int]) -> Spot:
        """Where a runner of ``spec`` goes, or ``Refused``; ``pending``: bytes Keel's runners
        on each node will still take."""
        copies = self.templates(view, spec)
        up = [vm for vm in copies if vm.node in view.nodes and view.nodes[vm.node].online]
        allowed = list(self.settings.nodes) or sorted(view.nodes)
        known = [n for n in allowed if n in view.nodes]
        if not known:
            raise Refused(NEVER, f"the cluster has none of the nodes {', '.join(allowed)}")
        size = f"{spec.cores} cores and {format_bytes(spec.memory_bytes)}"
        could = [n for n in known if view.nodes[n].maxmem >= spec.memory_bytes
                 and view.nodes[n].maxcpu >= spec.cores]
        if not could:
            raise Refused(NEVER, f"no node could ever hold {size}")
        online = [n for n in could if view.nodes[n].online]
        if not online:
            raise Refused(FAILING, f"no node that could hold {size} is online")
        free = {n: view.nodes[n].maxmem - view.nodes[n].mem - pending.get(n, 0) for n in online}
        if not up:
            down = ", ".join(f"{vm.vmid} on {vm.node}" for vm in copies)
            raise Refused(FAILING, f"the template ({down}) is on no node that is up: give a copy on "
                                   f"each node (template: {{node: VMID, ...}}, or by name)")
        fits = [n for n in online if free[n] >= spec.memory_bytes]
        if not fits:
            room = ", ".join(f"{n} {format_bytes(max(0, free[n]))}" for n in online)
            raise Refused(FULL, f"full: needs {format_bytes(spec.memory_bytes)}; free {room}")
        node = max(fits, key=lambda n: (free[n], -online.index(n)))
        local = [vm for vm in up if vm.node == node]
        source = (local or up)[0]
        return Spot(node, source.vmid, source.node)

    # -- acting ----------------------------------------------------------------------------

    def next_vmid(self) -> int:
        return int(self.client.get("/cluster/nextid"))

    def clone(self, spot: Spot, spec: RunnerSpec, name: str, vmid: int, description: str) -> str:
        params: dict[str, Any] = {"newid": vmid, "name": name, "description": description,
                                  "full": spec.full_clone}
        if spot.node != spot.source:
            params["target"] = spot.node
        if spec.full_clone and spec.storage:
            params["storage"] = spec.storage
        if spec.pool:
            params["pool"] = spec.pool
        try:
            upid = str(self.client.post(f"/nodes/{spot.source}/qemu/{spot.template}/clone", **params))
        except KeelError as err:
            self.count("create", "error")
            text = str(err)
            if "already exists" in text:
                raise VmidTaken(text) from None
            if "local storage" in text or "not supported" in text or "does not exist" in text:
                raise Refused(NEVER, text) from None
            if "not online" in text or isinstance(err, UnavailableError):
                raise Refused(FAILING, text) from None
            raise Refused(_full_or_failing(text), text) from None
        return upid

    def task(self, upid: str) -> tuple[bool, str | None]:
        """(finished, error or None)."""
        node = parse_upid(upid).node
        status = self.client.get(f"/nodes/{node}/tasks/{upid}/status")
        if status.get("status") == "running":
            return False, None
        exit_status = str(status.get("exitstatus", ""))
        return True, None if exit_status == "OK" else exit_status or "failed"

    def configure(self, node: str, vmid: int, spec: RunnerSpec, tags: list[str]) -> None:
        self.client.put(f"/nodes/{node}/qemu/{vmid}/config", cores=spec.cores,
                        memory=spec.memory_bytes // MiB, agent=1, onboot=0, tags=";".join(tags))

    def start(self, node: str, vmid: int) -> str:
        return str(self.client.post(f"/nodes/{node}/qemu/{vmid}/status/start"))

    def ping(self, node: str, vmid: int) -> bool:
        try:
            self.client.post(f"/nodes/{node}/qemu/{vmid}/agent/ping")
        except KeelError as err:
            if "agent" in str(err) or "not running" in str(err):
                return False
            raise
        return True

    def write_file(self, node: str, vmid: int, path: str, content: str) -> None:
        """Through the guest agent; PVE base64-encodes ``content`` on its way to the guest."""
        self.client.post(f"/nodes/{node}/qemu/{vmid}/agent/file-write", file=path, content=content)

    def stop(self, node: str, vmid: int) -> str:
        return str(self.client.post(f"/nodes/{node}/qemu/{vmid}/status/stop"))

    def destroy(self, node: str, vmid: int) -> str:
        try:
            upid = str(self.client.delete(f"/nodes/{node}/qemu/{vmid}", purge=1,
                                          **{"destroy-unreferenced-disks": 1}))
        except KeelError:
            self.count("delete", "error")
            raise
        self.count("delete", "ok")
        return upid

    def config(self, node: str, vmid: int) -> dict[str, Any]:
        return dict(self.client.get(f"/nodes/{node}/qemu/{vmid}/config"))


def _full_or_failing(text: str) -> str:
    lowered = text.lower()
    if "no space" in lowered or "not enough" in lowered or "cannot allocate memory" in lowered \
            or "out of memory" in lowered:
        return FULL
    return FAILING


def task_refusal(error: str) -> Refused:
    """A clone or start task that failed, as a refusal of the provider."""
    return Refused(_full_or_failing(error), error)


__all__ = ["ClusterView", "NodeView", "ProxmoxProvider", "Refused", "Spot", "TaskFailedError", "VmView",
           "VmidTaken", "task_refusal"]
