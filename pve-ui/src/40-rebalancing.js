/*
 * Datacenter -> HA -> Rebalancing (PVE.keel.Rebalancing, xtype pveKeelRebalancing): the
 * nodes' load, the imbalance and threshold, the leader and its last round, the current
 * plan (a dry run) with each move's reason and the predicted after-state, Apply with its
 * progress and PVE tasks, maintenance, the history of moves, and the settings.
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
Ext.define('PVE.keel.Rebalancing', {
    extend: 'Ext.panel.Panel',
    alias: 'widget.pveKeelRebalancing',
    cls: 'keel-rebalancing',
    scrollable: 'y',
    layout: { type: 'vbox', align: 'stretch' },
    bodyPadding: '0 0 10 0',

    initComponent: function () {
        var me = this;
        var caps = Ext.state.Manager.get('GuiCap') || {};
        me.canMigrate = !!(caps.vms && caps.vms['VM.Migrate']);
        me.canModify = !!(caps.dc && caps.dc['Sys.Modify']);
        me.status = null;
        me.jobId = null;

        me.nodeStore = PVE.keel.Render.store(['node', 'state', 'cpu', 'mem', 'disk', 'guests', 'running', 'ha_guests', 'maxcpu',
                'maxmem', 'after_cpu', 'after_mem', 'after_guests', 'plan_cpu', 'plan_mem'], 'node');
        me.planStore = PVE.keel.Render.store(['vmid', 'name', 'type', 'from', 'to', 'reason', 'detail', 'wave', 'mem_bytes',
                'disk_bytes', 'est_seconds', 'running', 'state', 'upid', 'error'], 'vmid');
        me.historyStore = PVE.keel.Render.store(['id', 'vmid', 'name', 'type', 'source', 'target', 'reason',
            'detail', 'status', 'upid', 'error', 'requested_by', 'started_at', 'ended_at'], 'id',
        { sorters: [{ property: 'id', direction: 'DESC' }] });
        me.summaryStore = PVE.keel.Render.store(['key', 'name', 'value'], 'key', {
            data: [
                { key: 'imbalance', name: gettext('Imbalance') },
                { key: 'leader', name: gettext('Leader') },
                { key: 'round', name: gettext('Last round') },
                { key: 'automatic', name: gettext('Automatic balancing') },
                { key: 'maintenance', name: gettext('Maintenance') },
            ],
        });

        me.tbar = [{
            text: gettext('Plan'),
            itemId: 'planButton',
            iconCls: 'fa fa-refresh',
            tooltip: gettext('Plan again from the cluster as it is now (dry run)'),
            disabled: !me.canMigrate,
            handler: function () { me.loadPlan(); },
        }, {
            text: gettext('Apply'),
            itemId: 'applyButton',
            iconCls: 'fa fa-play',
            disabled: true,
            handler: function () { me.confirmApply(); },
        }, {
            text: gettext('Stop'),
            itemId: 'cancelButton',
            iconCls: 'fa fa-stop',
            hidden: true,
            handler: function () { me.cancelJob(); },
        }, '-', {
            text: gettext('Maintenance'),
            itemId: 'maintenanceButton',
            iconCls: 'fa fa-wrench',
            disabled: !me.canMigrate,
            handler: function () {
                Ext.create('PVE.keel.MaintenanceWindow', { panel: me }).show();
            },
        }, {
            text: gettext('Settings'),
            itemId: 'settingsButton',
            iconCls: 'fa fa-pencil',
            disabled: !me.canModify,
            handler: function () {
                Ext.create('PVE.keel.BalancingEdit', {
                    listeners: { saved: function () { me.refreshAll(); } },
                }).show();
            },
        }, '->', {
            xtype: 'component', itemId: 'updated', cls: 'pmx-hint',
        }];

        me.dockedItems = [
            { xtype: 'pveKeelNotice', dock: 'top', itemId: 'notice' },
            { xtype: 'pveKeelNotice', dock: 'top', itemId: 'crsNotice' },
            { xtype: 'pveKeelNotice', dock: 'top', itemId: 'configNotice' },
        ];

        me.items = [{
            xtype: 'container',
            layout: { type: 'hbox', align: 'stretch' },
            items: [{
                xtype: 'grid',
                itemId: 'summary',
                cls: 'keel-rebalancing-summary',
                title: gettext('Status'),
                flex: 1,
                store: me.summaryStore,
                hideHeaders: true,
                disableSelection: true,
                viewConfig: { markDirty: false },
                trackMouse: false,
                columns: [
                    { dataIndex: 'name', width: 170 },
                    { dataIndex: 'value', flex: 1, renderer: function (v) { return v || ''; },
                      cellWrap: true },
                ],
            }, {
                xtype: 'panel',
                itemId: 'jobPanel',
                title: gettext('Job'),
                flex: 1,
                hidden: true,
                bodyPadding: 10,
                layout: { type: 'vbox', align: 'stretch' },
                items: [
                    { xtype: 'component', itemId: 'jobText' },
                    { xtype: 'progressbarwidget', itemId: 'jobProgress', margin: '8 0 0 0', height: 20 },
                ],
            }],
        }, {
            xtype: 'grid',
            itemId: 'nodes',
            title: gettext('Nodes'),
            store: me.nodeStore,
            disableSelection: true,
            margin: '10 0 0 0',
            viewConfig: { emptyText: gettext('No data yet'), deferEmptyText: false, markDirty: false },
            columns: [
                { text: gettext('Node'), dataIndex: 'node', width: 160, renderer: me.renderNode },
                PVE.keel.Render.loadColumn(gettext('CPU usage'), 'cpu'),
                PVE.keel.Render.loadColumn(gettext('Memory usage'), 'mem'),
                PVE.keel.Render.loadColumn(gettext('Disk usage'), 'disk'),
                { text: gettext('Guests'), dataIndex: 'guests', width: 90, align: 'right',
                  renderer: function (v, meta, rec) {
                      return v === null ? '-' : Ext.htmlEncode(v) + (rec.get('ha_guests')
                          ? ' <span class="pmx-hint">(' + Ext.htmlEncode(rec.get('ha_guests')) + ' HA)</span>' : '');
                  } },
                { text: gettext('After the plan'), columns: [
                    { text: gettext('CPU'), dataIndex: 'after_cpu', width: 110, renderer: me.renderAfter('cpu') },
                    { text: gettext('Memory'), dataIndex: 'after_mem', width: 110, renderer: me.renderAfter('mem') },
                    { text: gettext('Guests'), dataIndex: 'after_guests', width: 90,
                      renderer: me.renderAfter('guests') },
                ] },
            ],
        }, {
            xtype: 'grid',
            itemId: 'plan',
            title: gettext('Plan'),
            store: me.planStore,
            margin: '10 0 0 0',
            minHeight: 120,
            viewConfig: { emptyText: gettext('No plan yet'), deferEmptyText: false, markDirty: false },
            bbar: { itemId: 'leftAlone', hidden: true,
                items: [{ xtype: 'component', itemId: 'leftAloneText', flex: 1, cls: 'pmx-hint' }] },
            columns: [
                { text: gettext('Wave'), dataIndex: 'wave', width: 70, align: 'right' },
                { text: gettext('Guest'), dataIndex: 'vmid', width: 170,
                  renderer: function (v, meta, rec) { return PVE.keel.Render.guest(v, rec.get('name'), rec.get('type')); } },
                { text: gettext('From'), dataIndex: 'from', width: 90, renderer: Ext.htmlEncode },
                { text: gettext('To'), dataIndex: 'to', width: 90, renderer: Ext.htmlEncode },
                { text: gettext('Reason'), dataIndex: 'reason', width: 110, renderer: Ext.htmlEncode },
                { text: gettext('Why'), dataIndex: 'detail', flex: 1, renderer: Ext.htmlEncode, cellWrap: true },
                { text: gettext('Copies'), dataIndex: 'mem_bytes', width: 90, align: 'right',
                  renderer: function (v, meta, rec) {
                      return rec.get('running') || rec.get('disk_bytes')
                          ? PVE.keel.Render.size((v || 0) + (rec.get('disk_bytes') || 0)) : gettext('config');
                  } },
                { text: gettext('Time'), dataIndex: 'est_seconds', width: 70, align: 'right',
                  renderer: PVE.keel.Render.duration },
                { text: gettext('Status'), dataIndex: 'state', width: 130, renderer: me.renderMoveState },
            ],
        }, {
            xtype: 'grid',
            itemId: 'history',
            title: gettext('History'),
            store: me.historyStore,
            margin: '10 0 0 0',
            height: 300,
            viewConfig: { emptyText: gettext('No moves yet'), deferEmptyText: false, markDirty: false },
            columns: [
                { text: gettext('Started'), dataIndex: 'started_at', width: 150,
                  renderer: PVE.keel.Render.timestamp },
                { text: gettext('Guest'), dataIndex: 'vmid', width: 170,
                  renderer: function (v, meta, rec) { return PVE.keel.Render.guest(v, rec.get('name'), rec.get('type')); } },
                { text: gettext('From'), dataIndex: 'source', width: 90, renderer: Ext.htmlEncode },
                { text: gettext('To'), dataIndex: 'target', width: 90, renderer: Ext.htmlEncode },
                { text: gettext('Reason'), dataIndex: 'reason', width: 110, renderer: Ext.htmlEncode },
                { text: gettext('Why'), dataIndex: 'detail', flex: 1, renderer: Ext.htmlEncode },
                { text: gettext('Status'), dataIndex: 'status', width: 130, renderer: me.renderMoveState },
                { text: gettext('Task'), dataIndex: 'upid', width: 80, renderer: PVE.keel.Render.task },
                { text: gettext('By'), dataIndex: 'requested_by', width: 140, renderer: Ext.htmlEncode },
            ],
        }];

        me.callParent();
        PVE.keel.Render.wireTaskLinks(me);

        me.statusPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/status',
            onData: me.onStatus, onError: me.onError, scope: me,
        });
        me.historyPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/history', params: { limit: 50 },
            onData: me.onHistory, onError: me.onError, scope: me,
        });
        me.crsPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/pve/crs', interval: 30000,
            onData: me.onCrs, onError: Ext.emptyFn, scope: me,
        });
        me.jobPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/jobs/', interval: 1000,
            onData: me.onJob, onError: me.onError, scope: me,
        });
        me.on('afterrender', function () {
            me.statusPoller.start();
            me.historyPoller.start();
            me.crsPoller.start();
            me.loadPlan();
        });
    },

    refreshAll: function () {
        var me = this;
        me.statusPoller.tick();
        me.historyPoller.tick();
        me.loadPlan();
    },

    onError: function (error) {
        this.down('#notice').showError(error);
    },

    // -- status --------------------------------------------------------------------------

    onStatus: function (status) {
        var me = this, R = PVE.keel.Render;
        me.status = status;
        me.down('#notice').clear();
        var config = status.config || {};
        if (config.error) {
            me.down('#configNotice').showWarning(Ext.htmlEncode(Ext.String.format(
                gettext('The config file was refused; the last good one runs: {0}'), config.error)));
        } else {
            me.down('#configNotice').clear();
        }
        var cluster = status.cluster || {};
        // The imbalance (docs/balancing.md): the figure keel status and keel plan show; PVE's
        // CRS figure beside it, named, and the threshold said of the figure it applies to.
        var figure = me.figureOf(status);
        var threshold = config.threshold !== undefined ? Number(config.threshold).toFixed(2) : '-';
        var pve = cluster.imbalance ? cluster.imbalance.pve : null;
        var imbalance = '-';
        if (figure !== null) {
            var over = config.imbalance_figure === 'pve' ? pve !== null && pve > config.threshold
                : config.imbalance_figure === 'keel' ? figure > config.threshold : false;
            var text = config.imbalance_figure === 'keel'
                ? Ext.String.format(gettext('{0} (threshold {1})'), figure.toFixed(2), threshold)
                : Ext.String.format(gettext('{0} (threshold {1} on the {2})'), figure.toFixed(2), threshold,
                    config.imbalance_figure === 'pve' ? gettext("PVE's CRS figure") : gettext('spread'));
            if (pve !== null) {
                text += ' \u00b7 ' + Ext.String.format(gettext("PVE's CRS figure {0}"), pve.toFixed(2));
            }
            imbalance = R.health(over ? 'warning' : 'good', text);
        } else if (status.cluster_error) {
            imbalance = R.health('critical', status.cluster_error);
        }
        var round = status.last_round;
        var roundText = round
            ? R.health(round.verdict === 'BALANCED' ? 'good' : round.applied ? 'busy' : 'warning',
                round.verdict) + ' ' + Ext.htmlEncode(round.reason || '') +
                ' <span class="pmx-hint">(' + Ext.htmlEncode(R.ago(round.time, status.time)) + ')</span>'
            : '<span class="pmx-hint">' + gettext('none yet') + '</span>';
        var leader = status.leader_node
            ? R.node(status.leader_node) + (status.leader_node === status.node
                ? ' <span class="pmx-hint">(' + gettext('this node') + ')</span>' : '')
            : R.health('critical', gettext('no leader'));
        var maintenance = Object.keys(status.maintenance || {});
        var rows = {
            imbalance: imbalance,
            leader: leader,
            round: roundText,
            automatic: config.balancing_enabled
                ? R.health('good', Ext.String.format(gettext('on, method {0}'), config.method))
                : R.health('off', gettext('off: plans run only when applied here or with keel apply')),
            maintenance: maintenance.length ? maintenance.map(R.node).join(', ')
                : '<span class="pmx-hint">' + gettext('no node') + '</span>',
        };
        Ext.Object.each(rows, function (key, value) {
            var rec = me.summaryStore.getById(key);
            if (rec && rec.get('value') !== value) {
                rec.set('value', value);
            }
        });
        me.mergeNodes(cluster.nodes || [], status.maintenance || {});
        var job = status.job;
        if (job && job.state === 'running' && me.jobId !== job.id) {
            me.followJob(job);
        }
        me.updateButtons();
        me.down('#updated').update(Ext.String.format(gettext('Updated {0}'),
            Ext.Date.format(new Date(), 'H:i:s')));
        if (me.maintenanceWindow && !me.maintenanceWindow.destroyed) {
            me.maintenanceWindow.onStatus(status);
        }
    },

    figureOf: function (status) {
        var round = status.last_round;
        if (round && round.imbalance !== undefined && round.imbalance !== null) {
            return round.imbalance;
        }
        var imb = status.cluster && status.cluster.imbalance;
        return imb && imb.keel !== undefined ? imb.keel : null;
    },

    mergeNodes: function (nodes, maintenance) {
        var me = this;
        var rows = nodes.map(function (n) {
            var state = !n.online ? 'offline' : maintenance[n.node] || n.maintenance ? 'maintenance'
                : n.ha_state && n.ha_state !== 'online' ? n.ha_state : 'online';
            return {
                node: n.node, state: state, cpu: n.online ? n.cpu_frac : null,
                mem: n.online && n.maxmem ? n.mem / n.maxmem : null,
                disk: n.online && n.maxdisk ? n.disk / n.maxdisk : null,
                guests: n.guests, running: n.running, ha_guests: n.ha_guests,
                maxcpu: n.maxcpu, maxmem: n.maxmem,
            };
        });
        PVE.keel.Render.mergeStore(me.nodeStore, rows, 'node');
        me.applyPlanToNodes();
    },

    renderNode: function (value, meta, rec) {
        var state = rec.get('state');
        var health = { online: 'good', maintenance: 'warning', offline: 'critical' }[state] || 'critical';
        return PVE.keel.Render.healthIcon(health) + ' ' + Ext.htmlEncode(value) +
            (state !== 'online' ? ' <span class="pmx-hint">(' + Ext.htmlEncode(gettext(state)) + ')</span>' : '');
    },

    renderAfter: function (what) {
        return function (value, meta, rec) {
            if (value === null || value === undefined) {
                return '';
            }
            if (what === 'guests') {
                var before = rec.get('guests');
                return before === value ? Ext.htmlEncode(value)
                    : Ext.htmlEncode(before) + ' <i class="fa fa-long-arrow-right"></i> ' + Ext.htmlEncode(value);
            }
            return PVE.keel.Render.change(rec.get(what === 'cpu' ? 'plan_cpu' : 'plan_mem') === undefined
                ? value : rec.get(what === 'cpu' ? 'plan_cpu' : 'plan_mem'), value);
        };
    },

    renderMoveState: function (value, meta, rec) {
        var R = PVE.keel.Render;
        if (!value) {
            return '';
        }
        var states = {
            planned: ['off', gettext('planned')], starting: ['busy', gettext('starting')],
            running: ['busy', gettext('migrating')],
            ok: ['good', gettext('done')], done: ['good', gettext('done')],
            failed: ['critical', gettext('failed')], skipped: ['warning', gettext('not started')],
            not_started: ['warning', gettext('not started')],
        };
        var s = states[value] || ['warning', value];
        var text = R.health(s[0], s[1]);
        if (rec.get('error')) {
            meta.tdAttr = 'data-qtip="' + Ext.htmlEncode(Ext.htmlEncode(rec.get('error'))) + '"';
        }
        return text;
    },

    // -- the plan ------------------------------------------------------------------------

    loadPlan: function () {
        var me = this;
        if (!me.canMigrate) {
            me.down('#plan').setTitle(gettext('Plan') + ': ' +
                gettext('planning needs VM.Migrate on the guests to move'));
            return;
        }
        if (me.jobId) {
            return;                      // the job's moves are shown until it ends
        }
        var grid = me.down('#plan');
        PVE.keel.Api.request({
            url: '/api/plan',
            waitMsgTarget: grid,
            success: function (plan) {
                if (!me.destroyed && !me.jobId) {
                    me.showPlan(plan);
                }
            },
            failure: function (error) {
                if (!me.destroyed) {
                    me.plan = null;
                    grid.setTitle(gettext('Plan') + ': ' + PVE.keel.Api.errorHtml(error));
                    me.updateButtons();
                }
            },
        });
    },

    showPlan: function (plan) {
        var me = this, R = PVE.keel.Render;
        me.plan = plan;
        var before = plan.before.imbalance, after = plan.after.imbalance;
        var verdictHealth = plan.verdict === 'BALANCED' ? 'good' : plan.verdict === 'PLANNED' ? 'warning'
            : 'critical';
        var title = gettext('Plan') + ': ' + R.health(verdictHealth, plan.verdict) + ' &middot; ' +
            Ext.htmlEncode(plan.reason);
        if (plan.moves.length) {
            title += ' &middot; ' + Ext.String.format(gettext('imbalance {0} {1} {2}, fullest node {3} {1} {4}'),
                before.keel.toFixed(2), '<i class="fa fa-long-arrow-right"></i>', after.keel.toFixed(2),
                R.percent(before.peak), R.percent(after.peak));
            title += ' &middot; ' + Ext.String.format(gettext('{0} moves, about {1}'), plan.moves.length,
                R.duration(plan.summary ? plan.summary.est_seconds : null));
        }
        me.down('#plan').setTitle(title);
        me.planStore.loadData(plan.moves.map(function (m) {
            return Ext.apply({ state: 'planned' }, m);
        }));
        var notes = (plan.conflicts || []).concat(plan.notices || []);
        me.down('#plan').getView().emptyText = '<div class="x-grid-empty">' +
            Ext.htmlEncode(notes.length ? notes.join(' ') : gettext('Nothing to move')) + '</div>';
        me.down('#plan').getView().refresh();
        me.showLeftAlone(plan.skipped || []);
        me.applyPlanToNodes();
        me.updateButtons();
    },

    // Under the plan, what Keel does not move, by reason: "container: 109 (cache1), 117 (dns1)";
    // at most ten guests a reason (a big cluster leaves hundreds alone), the reason's detail
    // in a tooltip.
    showLeftAlone: function (skipped) {
        var me = this;
        var bar = me.down('#leftAlone');
        if (!skipped.length) {
            bar.hide();
            return;
        }
        var byReason = {}, order = [];
        skipped.forEach(function (s) {
            if (!byReason[s.reason]) {
                byReason[s.reason] = [];
                order.push(s.reason);
            }
            byReason[s.reason].push(s);
        });
        var parts = order.map(function (reason) {
            var items = byReason[reason];
            var names = items.slice(0, 10).map(function (s) {
                return s.vmid ? Ext.htmlEncode(s.vmid) + (s.name ? ' (' + Ext.htmlEncode(s.name) + ')' : '')
                    : Ext.htmlEncode(s.detail);
            });
            if (items.length > 10) {
                names.push(Ext.String.format(gettext('{0} more'), items.length - 10));
            }
            return '<span data-qtip="' + Ext.htmlEncode(Ext.htmlEncode(items[0].detail || '')) + '"><b>' +
                Ext.htmlEncode(reason) + '</b></span>: ' + names.join(', ');
        });
        me.down('#leftAloneText').update('<i class="fa fa-fw fa-info-circle"></i> ' + gettext('Left alone') +
            ' &middot; ' + parts.join(' &middot; '));
        bar.show();
    },

    applyPlanToNodes: function () {
        var me = this, plan = me.plan;
        me.nodeStore.each(function (rec) {
            var after = plan && plan.after.nodes[rec.get('node')];
            var before = plan && plan.before.nodes[rec.get('node')];
            var values = after && plan.moves.length
                ? { after_cpu: after.cpu, after_mem: after.memory, after_guests: after.guests,
                    plan_cpu: before.cpu, plan_mem: before.memory }
                : { after_cpu: null, after_mem: null, after_guests: null };
            rec.set(values, { dirty: false });
        });
    },

    updateButtons: function () {
        var me = this;
        var running = !!me.jobId;
        var leader = me.status && me.status.leader_node;
        me.down('#applyButton').setDisabled(!me.canMigrate || running || !leader ||
            !me.plan || !me.plan.moves.length);
        me.down('#planButton').setDisabled(!me.canMigrate || running);
        me.down('#cancelButton').setHidden(!running);
    },

    confirmApply: function () {
        var me = this, plan = me.plan;
        if (!plan || !plan.moves.length) {
            return;
        }
        Ext.Msg.confirm(gettext('Apply'), Ext.String.format(
            gettext('Migrate {0} guests as planned, about {1}? Keel plans again from the cluster as it is ' +
                'when it starts and stops at the first move it cannot make safely.'),
            plan.moves.length, PVE.keel.Render.duration(plan.summary ? plan.summary.est_seconds : null)),
        function (answer) {
            if (answer !== 'yes') {
                return;
            }
            PVE.keel.Api.request({
                url: '/api/apply', method: 'POST', jsonData: {}, waitMsgTarget: me,
                success: function (job) { me.followJob(job); },
                failure: function (error) { PVE.keel.Api.alert(error); },
            });
        });
    },

    // -- a job (apply or maintenance) ----------------------------------------------------

    followJob: function (job) {
        var me = this;
        me.jobId = job.id;
        me.jobEvents = 0;
        me.plan = null;
        me.planStore.loadData(job.plan.moves.map(function (m) {
            return Ext.apply({ state: 'planned' }, m);
        }));
        me.down('#plan').setTitle(Ext.String.format(gettext('Plan: {0} running ({1})'),
            job.kind === 'maintenance' ? gettext('maintenance') : gettext('apply'),
            Ext.htmlEncode(job.requested_by)));
        me.down('#leftAlone').hide();
        me.applyPlanToNodes();
        me.onJob(job);
        me.jobPoller.url = '/api/jobs/' + encodeURIComponent(job.id);
        me.jobPoller.params = function () { return { since: me.jobEvents }; };
        me.jobPoller.start();
        me.updateButtons();
    },

    onJob: function (job) {
        var me = this, R = PVE.keel.Render;
        if (job.id !== me.jobId) {
            return;
        }
        (job.events || []).forEach(function (event) {
            var rec = event.vmid !== undefined ? me.planStore.getById(event.vmid) : null;
            if (!rec) {
                return;
            }
            if (event.event === 'start') {
                rec.set({ state: 'running' });
            } else if (event.event === 'done') {
                rec.set({ state: 'ok', upid: event.upid });
            } else if (event.event === 'failed') {
                rec.set({ state: 'failed', upid: event.upid, error: event.error });
            } else if (event.event === 'not_started') {
                rec.set({ state: 'not_started', error: event.error });
            }
        });
        me.jobEvents = job.next;
        var progress = job.progress || { completed: 0, total: 0 };
        var panel = me.down('#jobPanel');
        panel.show();
        var kind = job.kind === 'maintenance' ? gettext('Maintenance') : gettext('Apply');
        var state = { running: ['busy', gettext('running')], cancelling: ['busy', gettext('stopping')],
            done: ['good', gettext('done')], failed: ['critical', gettext('failed')],
            cancelled: ['warning', gettext('stopped')] }[job.state] || ['warning', job.state];
        me.down('#jobText').update(R.health(state[0], kind + ': ' + state[1]) + ' &middot; ' +
            Ext.String.format(gettext('{0} of {1} migrations done'), progress.ok, progress.total) +
            (job.error ? '<br>' + Ext.htmlEncode(job.error) : '') +
            ' <span class="pmx-hint">(' + Ext.htmlEncode(job.requested_by) + ')</span>');
        me.down('#jobProgress').setValue(progress.total ? progress.completed / progress.total : 0);
        if (job.state !== 'running' && job.state !== 'cancelling') {
            me.down('#plan').setTitle(gettext('Plan') + ': ' + R.health(state[0], kind + ': ' + state[1]) +
                ' &middot; ' + Ext.String.format(gettext('{0} of {1} migrations done'), progress.ok,
                progress.total) + ' &middot; ' + gettext('planning again...'));
            me.jobPoller.stop();
            me.jobId = null;
            me.updateButtons();
            me.statusPoller.tick();
            me.historyPoller.tick();
            Ext.defer(function () {
                if (!me.destroyed && !me.jobId) {
                    me.loadPlan();
                }
            }, 1500);
        }
    },

    cancelJob: function () {
        var me = this;
        if (!me.jobId) {
            return;
        }
        Ext.Msg.confirm(gettext('Stop'), gettext('Start no further migration? Those running finish.'),
            function (answer) {
                if (answer === 'yes') {
                    PVE.keel.Api.request({
                        url: '/api/jobs/' + encodeURIComponent(me.jobId), method: 'DELETE',
                        failure: function (error) { PVE.keel.Api.alert(error); },
                    });
                }
            });
    },

    // -- history -------------------------------------------------------------------------

    onHistory: function (history) {
        PVE.keel.Render.mergeStore(this.historyStore, history.moves || [], 'id');
    },

    onCrs: function (crs) {
        var notice = this.down('#crsNotice');
        if (crs.auto_rebalance) {
            notice.showWarning(Ext.htmlEncode(Ext.String.format(
                gettext('Proxmox VE\'s own HA auto-rebalance is on (Datacenter > Options > CRS: {0}, ' +
                    'threshold {1}). Keel leaves HA guests to it; turn one of them off to avoid both ' +
                    'moving the same guests.'), crs.ha, crs.threshold)));
        } else {
            notice.clear();
        }
    },
});

/*
 * Maintenance: choose a node, enter or leave, and watch it empty.
 */
Ext.define('PVE.keel.MaintenanceWindow', {
    extend: 'Ext.window.Window',
    title: gettext('Maintenance'),
    iconCls: 'fa fa-wrench',
    itemId: 'keelMaintenance',
    modal: true,
    width: 520,
    bodyPadding: 10,
    layout: { type: 'vbox', align: 'stretch' },

    initComponent: function () {
        var me = this;
        me.panel.maintenanceWindow = me;
        var nodes = me.panel.nodeStore.collect('node');
        me.items = [{
            xtype: 'combobox',
            itemId: 'node',
            fieldLabel: gettext('Node'),
            store: nodes,
            editable: false,
            queryMode: 'local',
            value: nodes[0],
            listeners: { change: function () { me.onStatus(me.panel.status); } },
        }, {
            xtype: 'component', itemId: 'state', margin: '10 0 0 0', minHeight: 60,
        }, {
            xtype: 'component', cls: 'pmx-hint', margin: '10 0 0 0',
            html: gettext('Entering maintenance moves every guest Keel may move off the node, as planned ' +
                'for the rest of the cluster; the node is no target until it leaves maintenance.'),
        }];
        me.buttons = [{
            text: gettext('Enter maintenance'), itemId: 'enter', iconCls: 'fa fa-sign-out',
            handler: function () { me.act('enter'); },
        }, {
            text: gettext('Leave maintenance'), itemId: 'leave', iconCls: 'fa fa-sign-in',
            handler: function () { me.act('leave'); },
        }, {
            text: gettext('Close'), handler: function () { me.close(); },
        }];
        me.callParent();
        me.on('afterrender', function () { me.onStatus(me.panel.status); });
    },

    onStatus: function (status) {
        var me = this, R = PVE.keel.Render;
        if (!status || me.destroyed) {
            return;
        }
        var node = me.down('#node').getValue();
        var info = (status.maintenance || {})[node];
        var rec = me.panel.nodeStore.getById(node);
        var guests = rec ? rec.get('guests') : null;
        var running = rec ? rec.get('running') : null;
        var html;
        if (info) {
            html = R.health('warning', Ext.String.format(gettext('{0} is in maintenance since {1}, by {2}.'),
                node, R.timestamp(info.since), info.requested_by));
            if (!guests) {
                html += '<br>' + R.health('good', gettext('Empty: no guest left on it.'));
            } else if (me.panel.jobId) {
                html += '<br>' + R.health('busy', Ext.String.format(
                    gettext('Emptying: {0} guests left ({1} running).'), guests, running));
            } else {
                html += '<br>' + R.health('warning', Ext.String.format(
                    gettext('{0} guests stay ({1} running): Keel leaves them alone; the plan\'s "Left alone" ' +
                        'line says why.'), guests, running));
            }
        } else {
            html = R.health('good', Ext.String.format(gettext('{0} is not in maintenance; {1} guests on it.'),
                node, guests === null ? '-' : guests));
        }
        me.down('#state').update(html);
        me.down('#enter').setDisabled(!!info);
        me.down('#leave').setDisabled(!info);
    },

    act: function (action) {
        var me = this, node = me.down('#node').getValue();
        var go = function () {
            PVE.keel.Api.request({
                url: '/api/maintenance/' + encodeURIComponent(node), method: 'POST',
                jsonData: { action: action }, waitMsgTarget: me,
                success: function (data) {
                    if (data.job && !me.panel.destroyed) {
                        me.panel.followJob(data.job);
                    }
                    me.panel.statusPoller.tick();
                },
                failure: function (error) { PVE.keel.Api.alert(error); },
            });
        };
        if (action === 'enter') {
            Ext.Msg.confirm(gettext('Enter maintenance'), Ext.String.format(
                gettext('Move every guest off {0}?'), Ext.htmlEncode(node)),
            function (answer) { if (answer === 'yes') { go(); } });
        } else {
            go();
        }
    },
});
