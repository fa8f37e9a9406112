"""What the planner returns: a plan with its moves, the loads before and after, and what
was left alone and why.  Plain data; ``to_json()`` is the documented ``keel plan --json``.

    {"verdict": "PLANNED", "method": "keel", "moves": [{"vmid": 105, "name": "build1",
      "type": "qemu", "from": "pve1", "to": "pve3", "reason": "balance", "wave": 1, ...}],
     "before": {"nodes": {...}, "imbalance": {...}}, "after": {...}, "skipped": [...],
     "conflicts": [...], "config": {...}}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

GiB = 1024**3


@dataclass(frozen=True)
class Move:
    vmid: int
    name: str
    type: str                   # qemu|lxc
    source: str
    target: str
    reason: str                 # words.MAINTENANCE / RULE / BALANCE / PARK
    detail: str                 # a sentence for a person
    mem_bytes: int              # memory that travels (and is held on both nodes meanwhile)
    disk_bytes: int = 0         # local disk that travels (with_local_disks)
    wave: int = 0
    ha_sid: str | None = None   # moved through the HA manager
    group: str | None = None    # a bundle that moves together
    running: bool = True
    gain: float = 0.0           # how much this move cut the objective
    est_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["from"] = data.pop("source")
        data["to"] = data.pop("target")
        data["gain"] = round(self.gain, 6)
        data["est_seconds"] = round(self.est_seconds, 1)
        return data


@dataclass(frozen=True)
class Skip:
    reason: str                 # a words.* reason
    detail: str
    vmid: int | None = None
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NodeLoad:
    node: str
    cpu: float                  # fraction of capacity, 0..1+
    memory: float
    disk: float
    guests: int
    eligible: bool              # a target for balancing (online, not in maintenance, not ignored)

    def to_json(self) -> dict[str, Any]:
        return {"cpu": round(self.cpu, 4), "memory": round(self.memory, 4), "disk": round(self.disk, 4),
                "guests": self.guests, "eligible": self.eligible}


@dataclass(frozen=True)
class Figures:
    """Imbalance figures over the eligible nodes."""

    keel: float                 # weighted quadratic mean of per-resource SDs of node utilisation
    pve: float                  # Proxmox CRS: CV of (cpu+mem)/2 over sqrt(n-1)
    spread: dict[str, float]    # ProxLB's balanciness: max - min, percentage points, per resource
    peak: float                 # highest node utilisation on a weighted resource
    objective: float            # what the planner minimises (keel's squared, times n)

    def to_json(self) -> dict[str, Any]:
        return {"keel": round(self.keel, 4), "pve": round(self.pve, 4),
                "spread": {k: round(v, 2) for k, v in self.spread.items()},
                "peak": round(self.peak, 4), "objective": round(self.objective, 6)}


@dataclass(frozen=True)
class State:
    nodes: dict[str, NodeLoad]
    figures: Figures

    def to_json(self) -> dict[str, Any]:
        return {"nodes": {name: load.to_json() for name, load in self.nodes.items()},
                "imbalance": self.figures.to_json()}


@dataclass(frozen=True)
class Plan:
    verdict: str
    method: str
    reason: str                 # one sentence: why this verdict
    moves: tuple[Move, ...]
    before: State
    after: State
    skipped: tuple[Skip, ...] = ()
    conflicts: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    stopped: str = ""           # what stopped the balancing: words.LEVEL_REACHED, NOTHING_WORTH_IT,
                                # BUDGET, CLUSTER_FULL ("" where no balancing was asked for)

    def mandatory_moves(self) -> tuple[Move, ...]:
        """The moves that do not wait for hold or schedule (maintenance, broken rules), with
        any parking they need."""
        must = {m.vmid for m in self.moves if m.reason in ("maintenance", "rule")}
        return tuple(m for m in self.moves if m.vmid in must)

    @property
    def bytes_moved(self) -> int:
        return sum(m.mem_bytes + m.disk_bytes for m in self.moves)

    @property
    def waves(self) -> int:
        return max((m.wave for m in self.moves), default=0)

    @property
    def est_seconds(self) -> float:
        """How long the moves take, streamed through the executor's slots as it runs them."""
        from keel.balance import slots
        limits = self.config.get("limits") or {}
        moves = list(self.moves)
        return slots.eta(moves, slots.dependencies(moves),
                         slots.Slots(int(limits.get("concurrent", 2)), int(limits.get("per_node", 1))),
                         list(range(len(moves))), {}, set(), {i: m.est_seconds for i, m in enumerate(moves)})

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict, "method": self.method, "reason": self.reason,
            "stopped": self.stopped, "created_at": self.created_at,
            "moves": [m.to_json() for m in self.moves],
            "summary": {"moves": len(self.moves), "waves": self.waves,
                        "gib_moved": round(self.bytes_moved / GiB, 2),
                        "est_seconds": round(self.est_seconds, 1)},
            "before": self.before.to_json(), "after": self.after.to_json(),
            "skipped": [s.to_json() for s in self.skipped],
            "conflicts": list(self.conflicts), "notices": list(self.notices),
            "config": self.config,
        }


def plan_from_json(data: dict[str, Any]) -> Plan:
    """The Plan that ``to_json`` described (what the CLI gets from keel-engine)."""
    def state(d: dict[str, Any]) -> State:
        f = d["imbalance"]
        return State({name: NodeLoad(name, n["cpu"], n["memory"], n["disk"], n["guests"], n["eligible"])
                      for name, n in d["nodes"].items()},
                     Figures(f["keel"], f["pve"], dict(f["spread"]), f["peak"], f["objective"]))

    moves = []
    for m in data["moves"]:
        m = dict(m)
        m["source"], m["target"] = m.pop("from"), m.pop("to")
        moves.append(Move(**m))
    return Plan(data["verdict"], data["method"], data["reason"], tuple(moves), state(data["before"]),
                state(data["after"]), tuple(Skip(**s) for s in data["skipped"]), tuple(data["conflicts"]),
                tuple(data["notices"]), dict(data["config"]), data["created_at"], data.get("stopped", ""))
