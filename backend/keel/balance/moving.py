"""Making a move in the planner's working state: the model, where each unit is, and the
list of moves so far; and what a move costs."""

from __future__ import annotations

from keel.balance.loads import LoadModel
from keel.balance.plan import Move
from keel.balance.rules import Unit

GiB = 1024**3
MOVE_OVERHEAD_GIB = 1.0      # a migration costs about as much as moving 1 GiB more


def move_unit(model: LoadModel, unit: Unit, target: str, reason: str, detail: str,
              placed: dict[str, str], moves: list[Move], gain: float) -> None:
    for guest in unit.guests:
        source = current_node(guest, moves)
        if source == target:
            continue
        model.move([guest.vmid], source, target)
        moves.append(Move(
            vmid=guest.vmid, name=guest.name, type=guest.type, source=source, target=target,
            reason=reason, detail=detail, mem_bytes=model.footprint[guest.vmid],
            disk_bytes=model.disk_bytes[guest.vmid], ha_sid=guest.sid if guest.ha else None,
            group=unit.key if len(unit.guests) > 1 else None, running=guest.running, gain=gain,
            est_seconds=estimate_seconds(model.footprint[guest.vmid], model.disk_bytes[guest.vmid],
                                         guest.running)))
    placed[unit.key] = target


def current_node(guest, moves: list[Move]) -> str:
    for move in reversed(moves):
        if move.vmid == guest.vmid:
            return move.target
    return guest.node


def estimate_seconds(mem_bytes: int, disk_bytes: int, running: bool) -> float:
    """Setup, then RAM at ~1 GiB/s and local disk at ~500 MiB/s (PVE's usual 10 GbE)."""
    if not running:
        return 2.0 + disk_bytes / (512 * 1024**2)
    return 3.0 + mem_bytes / GiB + disk_bytes / (512 * 1024**2)
