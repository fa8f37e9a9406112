"""All talk with the Proxmox VE API goes through this package (and only it imports
proxmoxer): ``client`` (connect, call, map errors, retry what is safe), ``tasks``
(UPIDs and waiting for them), ``snapshot`` (the whole cluster in O(nodes) calls).

Contract: a failed read raises; it never returns "empty" for "unknown".
"""

from keel.pve.client import PveClient, Target

__all__ = ["PveClient", "Target"]
