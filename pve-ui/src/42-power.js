/*
 * PVE.keel.Power (xtype pveKeelPower): power saving on the Rebalancing tab (docs/power.md).
 * Each node's power state (awake, emptying, sleeping since, waking, did not wake), the
 * energy estimate (node-hours asleep x watts) and the last sleeps and wakes with their
 * reasons, from GET /api/power (the Rebalancing panel polls it every 10 s and calls
 * onPower).  Hidden while power saving is off and Keel has put no node to sleep.
 * Sleep, Wake and Wake test act on the node selected (Sys.PowerMgmt, from GuiCap's nodes, as
 * PVE's own node shutdown): Sleep and Wake test after a confirmation that shows the node's
 * plan (GET /api/power/plan?node=), each a job the Rebalancing panel follows as it follows Apply.
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
        var caps = Ext.state.Manager.get('GuiCap') || {};
        // as PVE's node Shutdown and Wake-on-LAN: Sys.PowerMgmt on some node (keel-engine checks
        // /nodes/<node> itself and answers 403 for a node the user may not power)
        me.canPower = !!(caps.nodes && caps.nodes['Sys.PowerMgmt']);
        me.tbar = [{
            text: gettext('Sleep'),
            itemId: 'sleepButton',
            iconCls: 'fa fa-power-off',
            disabled: true,
            handler: function () { me.confirmSleep(); },
        }, {
            text: gettext('Wake'),
            itemId: 'wakeButton',
            iconCls: 'fa fa-sun-o',
            disabled: true,
            handler: function () { me.wake(); },
        }, {
            text: gettext('Wake test'),
            itemId: 'testButton',
            iconCls: 'fa fa-check-square-o',
            disabled: true,
            handler: function () { me.confirmSleep(true); },
        }, {
            xtype: 'component', itemId: 'buttonHint', cls: 'pmx-hint', margin: '0 0 0 8',
        }];
        me.nodeStore = R.store(['node', 'state', 'since', 'asleep_hours', 'may_sleep', 'watts', 'wake_test'], 'node');
        me.eventStore = R.store(['key', 'time', 'node', 'event', 'detail', 'reason', 'by'], 'key',
            { sorters: [{ property: 'time', direction: 'DESC' }] });
        me.items = [{
            xtype: 'grid',
            itemId: 'powerNodes',
            store: me.nodeStore,
            flex: 3,
            minWidth: 600,
            viewConfig: { emptyText: gettext('No data yet'), deferEmptyText: false, markDirty: false },
            listeners: { selectionchange: function () { me.updateButtons(); } },
            columns: [
                { text: gettext('Node'), dataIndex: 'node', width: 110, renderer: R.node },
                { text: gettext('Power'), dataIndex: 'state', flex: 1, minWidth: 160,
                  renderer: function (v, meta, rec) { return me.renderState(v, rec); } },
                { text: gettext('May sleep'), dataIndex: 'may_sleep', width: 90,
                  renderer: function (v) { return v ? gettext('Yes') : gettext('No'); } },
                { text: gettext('Hours asleep'), dataIndex: 'asleep_hours', width: 120, align: 'right',
                  renderer: function (v) { return !v ? '-' : v < 0.05 ? '&lt; 0.1' : Number(v).toFixed(1); } },
                { text: gettext('Wake test'), dataIndex: 'wake_test', width: 110,
                  renderer: function (v, meta, rec) {
                      return v ? me.when(v) : rec.get('may_sleep') ? '<span class="pmx-hint">' +
                          gettext('never') + '</span>' : '-';
                  } },
            ],
        }, {
            xtype: 'grid',
            itemId: 'powerEvents',
            store: me.eventStore,
            flex: 2,
            margin: '0 0 0 10',
            maxHeight: 260,
            disableSelection: true,
            viewConfig: { emptyText: gettext('No sleeps or wakes yet'), deferEmptyText: false, markDirty: false },
            columns: [
                { text: gettext('Time'), dataIndex: 'time', width: 95, cellWrap: true,
                  renderer: function (v) { return me.when(v, true); } },
                { text: gettext('Node'), dataIndex: 'node', width: 70, renderer: Ext.htmlEncode },
                { text: gettext('What'), dataIndex: 'detail', flex: 1, minWidth: 120, cellWrap: true,
                  renderer: Ext.htmlEncode },
                { text: gettext('Why'), dataIndex: 'reason', flex: 1, minWidth: 120, cellWrap: true,
                  renderer: function (v, meta, rec) { return Ext.htmlEncode(v || rec.get('by') || ''); } },
            ],
        }];
        me.callParent();
    },

    selected: function () {
        var sel = this.down('#powerNodes').getSelection();
        return sel && sel.length ? sel[0] : null;
    },

    // Sleep for an awake node that may sleep, Wake for one asleep or that did not wake; both
    // off without Sys.PowerMgmt, with power saving off (Sleep), and while a job runs.  The
    // hint beside them says why a button is off.
    updateButtons: function () {
        var me = this;
        var rec = me.selected();
        var panel = me.up('pveKeelRebalancing');
        var running = !!(panel && panel.jobId);
        var mode = me.power ? me.power.mode : 'off';
        var state = rec ? rec.get('state') : null;
        var canSleep = me.canPower && !running && state === 'awake' && rec.get('may_sleep') && mode !== 'off';
        var canWake = me.canPower && !running && (state === 'sleeping' || state === 'did not wake');
        me.down('#sleepButton').setDisabled(!canSleep);
        me.down('#testButton').setDisabled(!canSleep);        // a sleep, then at once the wake
        me.down('#wakeButton').setDisabled(!canWake);
        var why = '';
        if (!me.canPower) {
            why = gettext('Sleeping and waking a node need Sys.PowerMgmt on it');
        } else if (running) {
            why = gettext('A job is running');
        } else if (!rec) {
            why = gettext('Select a node to sleep or wake it');
        } else if (state === 'awake' && mode === 'off') {
            why = gettext('Power saving is off (Settings, Power saving)');
        } else if (state === 'awake' && !rec.get('may_sleep')) {
            why = Ext.String.format(gettext('{0} is not one of the nodes that may sleep (Settings, Power saving)'),
                rec.get('node'));
        }
        me.down('#buttonHint').update(Ext.htmlEncode(why));
        ['#sleepButton', '#wakeButton', '#testButton'].forEach(function (id) {
            var button = me.down(id);
            button.setTooltip(button.disabled && why ? why : null);
        });
    },

    // The node's own plan first (a dry run), then a confirmation that says what will happen.
    // test: the wake test (POST .../test): the same sleep, its own gate set aside, then at
    // once the wake; it is what lets a node sleep (balancing.power.wake_test_max_age).
    confirmSleep: function (test) {
        var me = this, rec = me.selected();
        if (!rec) {
            return;
        }
        var node = rec.get('node');
        var params = test ? { node: node, test: 1 } : { node: node };
        PVE.keel.Api.request({
            url: '/api/power/plan', params: params, waitMsgTarget: me,
            success: function (plan) {
                if (me.destroyed) {
                    return;
                }
                if (plan.verdict !== 'SLEEP' || (plan.sleep || []).indexOf(node) < 0) {
                    me.refused(node, plan, test);
                    return;
                }
                Ext.create('PVE.keel.PowerSleepConfirm', { node: node, plan: plan, test: !!test,
                    go: function () { me.act(node, test ? 'test' : 'sleep'); } }).show();
            },
            failure: function (error) { PVE.keel.Api.alert(error); },
        });
    },

    // The plan says the node stays awake: why, each gate named, as keel power plan says it.
    refused: function (node, plan, test) {
        var reasons = (plan.refusals || []).filter(function (r) { return !r.node || r.node === node; })
            .map(function (r) { return '<li><b>' + Ext.htmlEncode(r.gate) + '</b>: ' + Ext.htmlEncode(r.detail) + '</li>'; });
        Ext.Msg.show({
            title: test ? gettext('Wake test') : gettext('Sleep'),
            icon: Ext.Msg.ERROR,
            buttons: Ext.Msg.OK,
            message: Ext.String.format(gettext('{0} stays awake: {1}'), Ext.htmlEncode(node),
                Ext.htmlEncode(plan.reason || plan.verdict)) + (reasons.length ? '<ul>' + reasons.join('') + '</ul>' : ''),
        });
    },

    wake: function () {
        var me = this, rec = me.selected();
        if (rec) {
            me.act(rec.get('node'), 'wake');
        }
    },

    // POST /api/power/nodes/<node>/<action>: a job (202) the Rebalancing panel follows; a
    // refusal (409 with the gates' reasons, 400 with power saving off, 403) said as it is.
    act: function (node, action) {
        var me = this, panel = me.up('pveKeelRebalancing');
        PVE.keel.Api.request({
            url: '/api/power/nodes/' + encodeURIComponent(node) + '/' + action, method: 'POST', jsonData: {},
            waitMsgTarget: me,
            success: function (job) {
                if (panel && !panel.destroyed) {
                    panel.followJob(job);
                    panel.powerPoller.tick();
                }
            },
            failure: function (error) {
                PVE.keel.Api.alert(error, { sleep: gettext('Sleep'), wake: gettext('Wake'),
                    test: gettext('Wake test') }[action]);
            },
        });
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
                     may_sleep: n.may_sleep, wake_test: n.wake_test || null };
        }), 'node');
        me.updateButtons();
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

/*
 * The confirmation of a sleep: what will happen to the node (its guests migrated off, HA
 * maintenance, Ceph's noout, the shutdown), step by step from its own plan, before anything
 * is done.
 */
Ext.define('PVE.keel.PowerSleepConfirm', {
    extend: 'Ext.window.Window',
    itemId: 'keelPowerSleepConfirm',
    iconCls: 'fa fa-power-off',
    modal: true,
    width: 760,
    layout: { type: 'vbox', align: 'stretch' },
    bodyPadding: 10,

    initComponent: function () {
        var me = this, p = me.plan, R = PVE.keel.Render, node = me.node;
        me.title = Ext.String.format(me.test ? gettext('Wake test of {0}') : gettext('Sleep {0}'), node);
        var moves = (p.moves || []).filter(function (m) { return m.from === node; });
        var steps = (p.steps || []).filter(function (s) { return !s.node || s.node === node; });
        var gib = p.summary && p.summary.gib_moved !== undefined ? p.summary.gib_moved
            : moves.reduce(function (sum, m) { return sum + (m.mem_bytes || 0) + (m.disk_bytes || 0); }, 0) / 1073741824;
        me.items = [{
            xtype: 'component', itemId: 'head', margin: '0 0 8 0',
            html: R.health('warning', '') + Ext.String.format(me.test
                ? gettext('Test that {0} wakes? Keel migrates its {1} guests off ({2} GiB), puts it in HA ' +
                    'maintenance so that the HA manager neither fences it nor recovers its services, sets ' +
                    'Ceph\'s noout if it has OSDs, shuts it down, and at once wakes it by Wake-on-LAN. ' +
                    'Back in the cluster, it has passed and may sleep; if it does not come back, it is ' +
                    'reported and left off.')
                : gettext('Put {0} to sleep? Keel migrates its {1} guests off ({2} GiB), puts it in HA ' +
                    'maintenance so that the HA manager neither fences it nor recovers its services, sets ' +
                    'Ceph\'s noout if it has OSDs, and shuts it down. It stays off until it is woken ' +
                    '(Wake here, keel power wake, or power saving in automatic mode).'),
                Ext.htmlEncode(node), moves.length, Number(gib).toFixed(2)) +
                '<br><span class="pmx-hint">' + Ext.htmlEncode(p.reason || '') + '</span>',
        }, {
            xtype: 'grid', itemId: 'steps', title: gettext('Steps'), disableSelection: true,
            store: { fields: ['n', 'action', 'node', 'detail'],
                data: steps.map(function (s, i) { return Ext.apply({ n: i + 1 }, s); }) },
            viewConfig: { emptyText: gettext('No steps'), deferEmptyText: false },
            columns: [
                { text: '#', dataIndex: 'n', width: 40, align: 'right' },
                { text: gettext('Step'), dataIndex: 'action', width: 130, renderer: Ext.htmlEncode },
                { text: gettext('Node'), dataIndex: 'node', width: 80, renderer: Ext.htmlEncode },
                { text: gettext('What'), dataIndex: 'detail', flex: 1, cellWrap: true, renderer: Ext.htmlEncode },
            ],
        }, {
            xtype: 'grid', itemId: 'moves', title: gettext('Guests that move'), disableSelection: true,
            margin: '10 0 0 0', maxHeight: 220, hidden: !moves.length,
            store: { fields: ['vmid', 'name', 'type', 'to', 'detail'], data: moves },
            columns: [
                { text: gettext('Guest'), dataIndex: 'vmid', width: 190, cellWrap: true,
                  renderer: function (v, meta, rec) { return R.guest(v, rec.get('name'), rec.get('type')); } },
                { text: gettext('To'), dataIndex: 'to', width: 80, renderer: Ext.htmlEncode },
                { text: gettext('Why'), dataIndex: 'detail', flex: 1, cellWrap: true, renderer: Ext.htmlEncode },
            ],
        }];
        me.buttons = [{
            text: me.test ? gettext('Wake test') : gettext('Sleep'), itemId: 'confirm',
            iconCls: me.test ? 'fa fa-check-square-o' : 'fa fa-power-off',
            handler: function () { me.close(); me.go(); },
        }, {
            text: gettext('Cancel'), handler: function () { me.close(); },
        }];
        me.callParent();
    },
});
