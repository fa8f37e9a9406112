/*
 * PVE.keel.Power (xtype pveKeelPower): power saving on the Rebalancing tab (docs/power.md).
 * Each node's power state (awake, emptying, sleeping since, waking, did not wake), the
 * energy estimate (node-hours asleep x watts) and the last sleeps and wakes with their
 * reasons, from GET /api/power (the Rebalancing panel polls it every 10 s and calls
 * onPower).  Hidden while power saving is off and Keel has put no node to sleep.
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
Ext.define('PVE.keel.Power', {
    extend: 'Ext.panel.Panel',
    xtype: 'pveKeelPower',
    cls: 'keel-power',
    title: gettext('Power saving'),
    hidden: true,
    layout: { type: 'hbox', align: 'stretch' },

    initComponent: function () {
        var me = this;
        var R = PVE.keel.Render;
        me.nodeStore = R.store(['node', 'state', 'since', 'asleep_hours', 'may_sleep', 'watts'], 'node');
        me.eventStore = R.store(['key', 'time', 'node', 'event', 'detail', 'reason', 'by'], 'key',
            { sorters: [{ property: 'time', direction: 'DESC' }] });
        me.items = [{
            xtype: 'grid',
            itemId: 'powerNodes',
            store: me.nodeStore,
            flex: 1,
            minWidth: 600,
            disableSelection: true,
            viewConfig: { emptyText: gettext('No data yet'), deferEmptyText: false, markDirty: false },
            columns: [
                { text: gettext('Node'), dataIndex: 'node', width: 120, renderer: R.node },
                { text: gettext('Power'), dataIndex: 'state', flex: 1, minWidth: 230,
                  renderer: function (v, meta, rec) { return me.renderState(v, rec); } },
                { text: gettext('May sleep'), dataIndex: 'may_sleep', width: 100,
                  renderer: function (v) { return v ? gettext('Yes') : gettext('No'); } },
                { text: gettext('Hours asleep'), dataIndex: 'asleep_hours', width: 125, align: 'right',
                  renderer: function (v) { return v ? Number(v).toFixed(1) : '-'; } },
            ],
        }, {
            xtype: 'grid',
            itemId: 'powerEvents',
            store: me.eventStore,
            flex: 1,
            margin: '0 0 0 10',
            maxHeight: 260,
            disableSelection: true,
            viewConfig: { emptyText: gettext('No sleeps or wakes yet'), deferEmptyText: false, markDirty: false },
            columns: [
                { text: gettext('Time'), dataIndex: 'time', width: 130,
                  renderer: function (v) { return me.when(v, true); } },
                { text: gettext('Node'), dataIndex: 'node', width: 80, renderer: Ext.htmlEncode },
                { text: gettext('What'), dataIndex: 'detail', width: 170, cellWrap: true,
                  renderer: Ext.htmlEncode },
                { text: gettext('Why'), dataIndex: 'reason', flex: 1, minWidth: 200, cellWrap: true,
                  renderer: function (v, meta, rec) { return Ext.htmlEncode(v || rec.get('by') || ''); } },
            ],
        }];
        me.callParent();
    },

    // "19:24" today, "2026-03-02 19:24" another day
    when: function (t, seconds) {
        if (!t) {
            return '-';
        }
        var d = new Date(t * 1000);
        var today = Ext.Date.format(d, 'Y-m-d') === Ext.Date.format(new Date(), 'Y-m-d');
        return Ext.Date.format(d, (today ? '' : 'Y-m-d ') + (seconds ? 'H:i:s' : 'H:i'));
    },

    renderState: function (state, rec) {
        var R = PVE.keel.Render;
        var since = rec.get('since');
        R = Ext.apply({}, { health: R.health, timestamp: this.when });
        switch (state) {
            case 'sleeping':
                return R.health('off', Ext.String.format(gettext('sleeping since {0}'), R.timestamp(since)));
            case 'emptying':
                return R.health('busy', gettext('emptying'));
            case 'shutting down':
                return R.health('busy', gettext('shutting down'));
            case 'waking':
                return R.health('busy', Ext.String.format(gettext('waking since {0}'), R.timestamp(since)));
            case 'did not wake':
                return R.health('critical', Ext.String.format(gettext('did not wake ({0})'), R.timestamp(since)));
            case 'awake':
                return R.health('good', gettext('awake'));
            default:
                return R.health('warning', state);
        }
    },

    onPower: function (data) {
        var me = this;
        var R = PVE.keel.Render;
        me.power = data;
        var used = data.mode !== 'off' || (data.events || []).length > 0;
        me.setHidden(!used);
        if (!used) {
            return;
        }
        R.mergeStore(me.nodeStore, (data.nodes || []).map(function (n) {
            return { node: n.node, state: n.state, since: n.since, asleep_hours: n.asleep_hours,
                     may_sleep: n.may_sleep };
        }), 'node');
        R.mergeStore(me.eventStore, (data.events || []).map(function (e) {
            return Ext.apply({ key: e.time + '/' + e.node + '/' + e.event }, e);
        }), 'key');
        var energy = data.energy || {};
        var asleep = (data.asleep || []).length;
        me.setTitle(Ext.String.format(gettext('Power saving ({0})'), Ext.htmlEncode(data.mode)) +
            ' <span class="pmx-hint">' + Ext.String.format(
                gettext('{0} asleep, saving about {1} W now; {2} node-hours asleep, about {3} kWh saved'),
                asleep, Math.round(data.saving_watts || 0), Number(energy.node_hours_asleep || 0).toFixed(1),
                Number(energy.kwh_saved || 0).toFixed(1)) +
            (energy.wakes_failed ? '; ' + Ext.String.format(gettext('{0} wakes failed'), energy.wakes_failed) : '') +
            '</span>');
    },
});
