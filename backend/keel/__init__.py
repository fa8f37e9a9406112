"""Keel keeps a Proxmox VE cluster level, and runs GitHub Actions runners on it.

The package is laid out by job (see docs/development.md): ``model`` holds plain data,
``pve`` is the only place that talks to the Proxmox VE API, ``balance`` decides,
``sim`` is a Proxmox VE cluster in a process, and ``cli`` ties them together.
"""

__version__ = "0.1.0"
