/*
 * Datacenter -> HA -> Rebalancing (PVE.keel.Rebalancing, xtype pveKeelRebalancing).
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
Ext.define('PVE.keel.Rebalancing', {
    extend: 'Ext.panel.Panel',
    alias: 'widget.pveKeelRebalancing',
    layout: { type: 'vbox', align: 'stretch' },
    scrollable: 'y',
    initComponent: function () {
        var me = this;
        me.dockedItems = [{ xtype: 'pveKeelNotice', dock: 'top', itemId: 'notice' }];
        me.items = [{ xtype: 'component', itemId: 'summary', padding: 10, cls: 'keel-rebalancing-summary' }];
        me.callParent();
        me.poller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/status',
            onData: function (data) { me.down('#notice').clear(); me.down('#summary').update(Ext.htmlEncode(data.leader_node)); },
            onError: function (error) { me.down('#notice').showError(error); },
        });
        me.on('afterrender', function () { me.poller.start(); });
    },
});
