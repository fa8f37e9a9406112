/*
 * Keel: Datacenter -> HA -> Rebalancing and Runners for the Proxmox VE web UI.
 *
 * Copyright (C) 2026 the Keel developers
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Built from pve-ui/src/*.js (in name order) by `make ui`, the way pve-manager builds
 * pvemanagerlib.js; installed as /usr/share/pve-manager/js/keel.js and loaded after
 * pvemanagerlib.js by one marked line in index.html.tpl.
 */
