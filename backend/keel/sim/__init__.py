"""A Proxmox VE cluster in a process, speaking PVE's real wire protocol (``keel sim``).

``scenario`` reads the starting state, ``cluster`` holds it and runs its clock-driven
events, ``ops`` and ``ha`` are what migrations, clones and the HA manager do,
``api/`` answers the PVE API (checked against PVE's own schema by ``schema``), and
``server``/``serve`` put it on HTTPS.  It never touches a real cluster.
"""
