"""PVE task ids: ``UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<user>:``."""

from __future__ import annotations

from dataclasses import dataclass

from keel.errors import InvalidError


@dataclass(frozen=True)
class Upid:
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str
    text: str

    def __str__(self) -> str:
        return self.text


def parse_upid(text: str) -> Upid:
    """``parse_upid('UPID:pve1:0002A1B4:01C2F3D5:6A1B2C3D:qmigrate:100:root@pam:').type == 'qmigrate'``"""
    parts = text.split(":")
    if len(parts) < 9 or parts[0] != "UPID":
        raise InvalidError(f"not a PVE task id (UPID): {text!r}")
    try:
        return Upid(node=parts[1], pid=int(parts[2], 16), pstart=int(parts[3], 16),
                    starttime=int(parts[4], 16), type=parts[5], id=parts[6],
                    user=":".join(parts[7:-1]), text=text)
    except ValueError:
        raise InvalidError(f"not a PVE task id (UPID): {text!r}") from None
