/*
 * After keel.js, as PVE's inline Ext.onReady: create the workspace.  ?fault=menu makes
 * the plugin's menu code throw, to prove the Datacenter panel survives it (UI tests).
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
if (Harness.params.fault === 'menu' && window.PVE && PVE.keel && PVE.keel.Menu) {
    PVE.keel.Menu.items = function () { throw new Error('a fault injected by the harness'); };
}
Ext.onReady(function () { Harness.start(); });
