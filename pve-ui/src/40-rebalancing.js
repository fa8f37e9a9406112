/*
 * Datacenter -> HA -> Rebalancing (PVE.keel.Rebalancing, xtype pveKeelRebalancing): the
 * nodes' load, the imbalance and threshold, the leader and its last round, the current
 * plan (a dry run) with each move's reason and the predicted after-state, Apply with its
 * progress and PVE tasks, maintenance, power saving (PVE.keel.Power), the history of moves,
 * and the settings.
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
                'maxmem', 'after_cpu', 'after_mem', 'after_guests', 'plan_cpu', 'plan_mem', 'cpu_now', 'mem_now',
                'cpu_used', 'cpu_cap', 'mem_used', 'mem_cap', 'disk_used', 'disk_cap', 'hot', 'hotspot', 'eligible'],
        'node');
        me.jobStore = PVE.keel.Render.store(['id', 'kind', 'requested_by', 'started_at', 'ended_at', 'state', 'detail',
            'promised', 'achieved'], 'id', { sorters: [{ property: 'started_at', direction: 'DESC' }] });
        me.planStore = PVE.keel.Render.store(['vmid', 'name', 'type', 'from', 'to', 'reason', 'detail', 'wave', 'mem_bytes',
                'disk_bytes', 'est_seconds', 'running', 'state', 'upid', 'error'], 'vmid');
        me.historyStore = PVE.keel.Render.store(['id', 'vmid', 'name', 'type', 'source', 'target', 'reason',
            'detail', 'status', 'upid', 'error', 'requested_by', 'started_at', 'ended_at'], 'id',
        { sorters: [{ property: 'id', direction: 'DESC' }] });
        me.summaryStore = PVE.keel.Render.store(['key', 'name', 'value'], 'key', {
            data: [
                { key: 'imbalance', name: gettext('Imbalance') },
                { key: 'hottest', name: gettext('Hottest node') },
                { key: 'leader', name: gettext('Leader') },
                { key: 'round', name: gettext('Last round') },
                { key: 'automatic', name: gettext('Automatic balancing') },
                { key: 'maintenance', name: gettext('Maintenance') },
                { key: 'lastjob', name: gettext('Last job') },
            ],
        });

        me.tbar = [{
            text: gettext('Plan'),
            itemId: 'planButton',
            iconCls: 'fa fa-refresh',
            tooltip: me.canMigrate ? gettext('Plan again from the cluster as it is now (dry run)')
                : gettext('Planning needs VM.Migrate on the guests to move'),
            disabled: !me.canMigrate,
            handler: function () { me.loadPlan(); },
        }, {
            text: gettext('Apply'),
            itemId: 'applyButton',
            iconCls: 'fa fa-play',
            disabled: true,
            tooltip: me.canMigrate ? null : gettext('Applying needs VM.Migrate on the guests to move'),
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
            tooltip: me.canMigrate ? null : gettext('Maintenance needs VM.Migrate on every guest of the node'),
            handler: function () {
                Ext.create('PVE.keel.MaintenanceWindow', { panel: me }).show();
            },
        }, {
            text: gettext('Settings'),
            itemId: 'settingsButton',
            iconCls: 'fa fa-pencil',
            disabled: !me.canModify,
            tooltip: me.canModify ? null : gettext('Changing the settings needs Sys.Modify on /'),
            handler: function () {
                Ext.create('PVE.keel.BalancingEdit', {
                    nodes: me.nodeStore.collect('node'),
                    listeners: { saved: function () { me.refreshAll(); } },
                }).show();
            },
        }, '->', {
            xtype: 'component', itemId: 'updated', cls: 'pmx-hint',
        }, PVE.keel.Render.helpButton('ui.md#the-rebalancing-tab')];

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
                    { dataIndex: 'name', width: 165 },
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
                    { xtype: 'progressbarwidget', itemId: 'jobProgress', margin: '8 0 0 0', height: 20,
                      textTpl: ['{percent:number("0")}%'] },
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
                { text: gettext('Node'), dataIndex: 'node', minWidth: 150, flex: 1, renderer: me.renderNode },
                PVE.keel.Render.loadColumn(gettext('CPU usage'), 'cpu', { itemId: 'cpuColumn', width: 210,
                    barText: function (rec) { return PVE.keel.Render.cpuUsage(rec.get('cpu'), rec.get('cpu_cap')); },
                    health: function (rec) { return me.barHealth(rec, 'cpu'); } }),
                PVE.keel.Render.loadColumn(gettext('Memory usage'), 'mem', { itemId: 'memColumn', width: 250,
                    barText: function (rec) {
                        return PVE.keel.Render.usage(rec.get('mem'), rec.get('mem_used'), rec.get('mem_cap'));
                    },
                    health: function (rec) { return me.barHealth(rec, 'memory'); } }),
                PVE.keel.Render.loadColumn(gettext('Local disk'), 'disk', { itemId: 'diskColumn', width: 250,
                    hidden: true,
                    barText: function (rec) {
                        return PVE.keel.Render.usage(rec.get('disk'), rec.get('disk_used'), rec.get('disk_cap'));
                    },
                    health: function (rec) { return me.barHealth(rec, 'disk'); } }),
                { text: gettext('Guests'), dataIndex: 'guests', width: 90, align: 'right',
                  renderer: function (v, meta, rec) {
                      return v === null ? '-' : Ext.htmlEncode(v) + (rec.get('ha_guests')
                          ? ' <span class="pmx-hint">(' + Ext.htmlEncode(rec.get('ha_guests')) + ' HA)</span>' : '');
                  } },
                { text: gettext('After the plan'), columns: [
                    { text: gettext('CPU'), dataIndex: 'after_cpu', width: 120, renderer: me.renderAfter('cpu') },
                    { text: gettext('Memory'), dataIndex: 'after_mem', width: 120, renderer: me.renderAfter('mem') },
                    { text: gettext('Guests'), dataIndex: 'after_guests', width: 90,
                      renderer: me.renderAfter('guests') },
                ] },
            ],
        }, {
            xtype: 'pveKeelPower',
            itemId: 'power',
            margin: '10 0 0 0',
        }, {
            xtype: 'panel',
            itemId: 'charts',
            title: gettext('Load over time') + ' <span class="pmx-hint">(' + gettext('dashed: the cluster\'s ' +
                'average and the threshold above it, or the imbalance\'s threshold; dots: jobs applied') + ')</span>',
            margin: '10 0 0 0',
            height: 290,
            layout: { type: 'hbox', align: 'stretch' },
            tools: [PVE.keel.Chart.spanButtons('timeframe', function () { return me.chartPoller; }, 'timeframe',
                ['hour', 'day'], function () { me.chartNodes = null; })],
            items: [
                { xtype: 'component', itemId: 'chartsEmpty', flex: 1, padding: 10, cls: 'pmx-hint',
                  html: gettext('Reading the nodes\' history from Proxmox VE...') },
            ],
        }, {
            xtype: 'grid',
            itemId: 'plan',
            title: gettext('Plan'),
            listeners: { afterrender: PVE.keel.Render.wrapTitle },
            store: me.planStore,
            margin: '10 0 0 0',
            minHeight: 120,
            viewConfig: { emptyText: gettext('No plan yet'), deferEmptyText: false, markDirty: false },
            bbar: { itemId: 'leftAlone', hidden: true,
                items: [{ xtype: 'component', itemId: 'leftAloneText', flex: 1, cls: 'pmx-hint' }] },
            columns: [
                { text: gettext('Wave'), dataIndex: 'wave', width: 72, align: 'right' },
                { text: gettext('Guest'), dataIndex: 'vmid', width: 170, cellWrap: true,
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
            itemId: 'jobs',
            title: gettext('Jobs: promised and reached'),
            store: me.jobStore,
            margin: '10 0 0 0',
            maxHeight: 240,
            disableSelection: true,
            viewConfig: { emptyText: gettext('No jobs yet'), deferEmptyText: false, markDirty: false },
            columns: [
                { text: gettext('Started'), dataIndex: 'started_at', width: 150, renderer: PVE.keel.Render.timestamp },
                { text: gettext('Job'), dataIndex: 'kind', width: 100, renderer: me.renderJobKind },
                { text: gettext('Status'), dataIndex: 'state', width: 100, renderer: me.renderJobState },
                { text: gettext('Imbalance promised'), dataIndex: 'promised', width: 165, align: 'right',
                  renderer: function (v) { return v ? Number(v.imbalance).toFixed(2) : '-'; } },
                { text: gettext('Reached'), dataIndex: 'achieved', width: 95, align: 'right',
                  renderer: function (v) { return v ? Number(v.imbalance).toFixed(2) : '-'; } },
                { text: gettext('Why they differ'), dataIndex: 'achieved', flex: 2, minWidth: 200, cellWrap: true,
                  renderer: function (v, meta, rec) { return me.whyText(rec.get('promised'), v, rec.get('detail')); } },
                { text: gettext('By'), dataIndex: 'requested_by', width: 140, renderer: Ext.htmlEncode },
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
                { text: gettext('Guest'), dataIndex: 'vmid', width: 170, cellWrap: true,
                  renderer: function (v, meta, rec) { return PVE.keel.Render.guest(v, rec.get('name'), rec.get('type')); } },
                { text: gettext('From'), dataIndex: 'source', width: 90, renderer: Ext.htmlEncode },
                { text: gettext('To'), dataIndex: 'target', width: 90, renderer: Ext.htmlEncode },
                { text: gettext('Reason'), dataIndex: 'reason', width: 110, renderer: Ext.htmlEncode },
                { text: gettext('Why'), dataIndex: 'detail', flex: 1, minWidth: 120, renderer: Ext.htmlEncode,
                  cellWrap: true },
                { text: gettext('Status'), dataIndex: 'status', width: 130, renderer: me.renderMoveState },
                { text: gettext('Task'), dataIndex: 'upid', width: 80, renderer: PVE.keel.Render.task },
                { text: gettext('By'), dataIndex: 'requested_by', width: 140, renderer: Ext.htmlEncode },
            ],
        }];

        me.callParent();
        PVE.keel.Render.wireTaskLinks(me);

        // What the panel costs (docs/ui.md, "What the panels cost"): only the fields it reads,
        // 304 when unchanged, nothing while the browser tab is hidden.
        me.statusPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/status', interval: 5000,
            fields: ['node', 'leader_node', 'config', 'last_round', 'job', 'maintenance', 'inputs', 'cluster',
                'cluster_error'],
            onData: me.onStatus, onError: me.onError, scope: me,
        });
        me.historyPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/history', params: { limit: 50 }, interval: 30000,
            onData: me.onHistory, onError: me.onError, scope: me,
        });
        me.crsPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/pve/crs', interval: 60000, fields: ['auto_rebalance', 'ha', 'threshold'],
            onData: me.onCrs, onError: Ext.emptyFn, scope: me,
        });
        me.chartPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/charts/nodes', params: { timeframe: 'hour' }, interval: 60000,
            onData: me.onCharts, onError: Ext.emptyFn, scope: me,
        });
        me.powerPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/power', interval: 10000,
            onData: function (data) {
                me.down('#power').onPower(data);
                if (me.status) {       // a node power saving put to sleep reads asleep at once, not offline
                    me.mergeNodes((me.status.cluster || {}).nodes || [], me.status.maintenance || {}, me.model);
                }
            },
            onError: Ext.emptyFn, scope: me,
        });
        me.jobPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/jobs/', interval: 2000,
            onData: me.onJob, onError: me.onError, scope: me,
        });
        me.on('afterrender', function () {
            me.statusPoller.start();
            me.historyPoller.start();
            me.crsPoller.start();
            me.chartPoller.start();
            me.powerPoller.start();
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
        var model = cluster.model || null;
        me.model = model;
        // The imbalance (docs/balancing.md): the figure keel status and keel plan show, from the
        // plan's own load model (smoothed over balancing.window as a plan made now smooths it,
        // the figure of the moment beside it); PVE's CRS figure beside it, named, and the
        // threshold said of the figure it applies to.
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
            if (model && model.smoothed) {
                text += ' \u00b7 ' + Ext.String.format(gettext('smoothed over {0} min, now {1}'),
                    Math.round(model.window_s / 60), Number(model.imbalance.now).toFixed(2));
            } else if (model) {
                text += ' \u00b7 ' + gettext('now (no samples yet to smooth)');
            }
            if (pve !== null) {
                text += ' \u00b7 ' + Ext.String.format(gettext("PVE's CRS figure {0}"), pve.toFixed(2));
            }
            imbalance = me.sparkline(config.threshold) + ' ' + R.health(over ? 'warning' : 'good', text);
        } else if (status.cluster_error) {
            imbalance = R.health('critical', status.cluster_error);
        }
        var hottest = '<span class="pmx-hint">-</span>';
        if (model && model.hottest) {
            var h = model.hottest, hotRow = model.nodes[h.node] || {};
            var state = hotRow.hotspot && hotRow.hotspot.length ? 'critical'
                : hotRow.hot && hotRow.hot.length ? 'warning' : 'good';
            hottest = R.health(state, Ext.String.format(gettext('{0}: {1} {2}'), h.node,
                h.resource === 'cpu' ? gettext('CPU') : h.resource === 'memory' ? gettext('memory') : gettext('disk'),
                R.percent(h.value))) + ' <span class="pmx-hint">(' + Ext.htmlEncode(Ext.String.format(
                gettext('average {0}; hot above {1}, hotspot at {2}'), R.percent(h.average),
                R.percent(h.average + model.threshold), model.hotspot ? R.percent(model.hotspot) : '-')) + ')</span>';
        }
        var round = status.last_round;
        var roundText = round
            ? R.health(round.verdict === 'BALANCED' ? 'good' : round.applied ? 'busy' : 'warning',
                round.verdict) + ' ' + Ext.htmlEncode(round.reason || '') +
                ' <span class="pmx-hint">(' + Ext.htmlEncode(R.ago(round.time)) + ')</span>'
            : '<span class="pmx-hint">' + gettext('none yet') + '</span>';
        var leader = status.leader_node
            ? R.node(status.leader_node) + (status.leader_node === status.node
                ? ' <span class="pmx-hint">(' + gettext('this node') + ')</span>' : '')
            : R.health('critical', gettext('no leader'));
        var maintenance = Object.keys(status.maintenance || {});
        var rows = {
            imbalance: imbalance,
            hottest: hottest,
            lastjob: me.lastJobText(),
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
        me.mergeNodes(cluster.nodes || [], status.maintenance || {}, model);
        if (model && me.plan && !me.jobId && me.titledWithModel !== !!model.smoothed) {
            me.titledWithModel = !!model.smoothed;          // the title says what load it is of
            me.down('#plan').setTitle(me.planTitle(me.plan));
        }
        me.checkPlanInputs(status);
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

    // The imbalance now, in the plan's terms (the figure a plan made now starts from).
    figureOf: function (status) {
        var model = status.cluster && status.cluster.model;
        if (model && model.imbalance) {
            return model.imbalance.keel;
        }
        var imb = status.cluster && status.cluster.imbalance;
        return imb && imb.keel !== undefined ? imb.keel : null;
    },

    // The bars show the plan's own figures (cluster.model): the load averaged over
    // balancing.window (as a plan made now sees it), capacity after the reservation.
    mergeNodes: function (nodes, maintenance, model) {
        var me = this;
        // a node power saving put to sleep is asleep, not down (PVE.keel.Power's last answer)
        var powerPanel = me.down('pveKeelPower');
        var power = {};
        ((powerPanel && powerPanel.power && powerPanel.power.nodes) || []).forEach(function (p) {
            power[p.node] = p.state;
        });
        var rows = nodes.map(function (n) {
            var slept = { sleeping: 'asleep', waking: 'waking', 'shutting down': 'shutting down' }[power[n.node]];
            var state = !n.online ? slept || 'offline' : maintenance[n.node] || n.maintenance ? 'maintenance'
                : n.ha_state && n.ha_state !== 'online' ? n.ha_state : 'online';
            var m = model && model.nodes[n.node];
            var row = {
                node: n.node, state: state, guests: n.guests, running: n.running, ha_guests: n.ha_guests,
                maxcpu: n.maxcpu, maxmem: n.maxmem,
                cpu: null, mem: null, disk: null, cpu_now: null, mem_now: null, hot: [], hotspot: [], eligible: false,
            };
            if (m) {
                Ext.apply(row, { cpu: m.cpu, mem: m.memory, disk: m.disk, cpu_now: m.cpu_now, mem_now: m.memory_now,
                    cpu_used: m.cpu_used, cpu_cap: m.cpu_cap, mem_used: m.memory_used, mem_cap: m.memory_cap,
                    disk_used: m.disk_used, disk_cap: m.disk_cap, hot: m.hot, hotspot: m.hotspot,
                    eligible: m.eligible });
            }
            return row;
        });
        PVE.keel.Render.mergeStore(me.nodeStore, rows, 'node');
        if (model) {
            var grid = me.down('#nodes');
            var label = model.smoothed ? Ext.String.format(gettext('avg. {0} min'), Math.round(model.window_s / 60))
                : gettext('now');
            me.down('#cpuColumn').setText(gettext('CPU usage') + ' (' + label + ')');
            me.down('#memColumn').setText(gettext('Memory usage') + ' (' + label + ')');
            me.down('#diskColumn').setHidden(!(model.weights && model.weights.disk > 0));
            if (!grid.keelTitled) {
                grid.keelTitled = true;
                grid.setTitle(gettext('Nodes') + ' <span class="pmx-hint">' + Ext.htmlEncode(model.smoothed
                    ? Ext.String.format(gettext('(load as the plan sees it: averaged over {0} min; the bar\'s ' +
                        'tooltip has the load now)'), Math.round(model.window_s / 60))
                    : gettext('(load now; the plan averages it once samples are in)')) + '</span>');
            }
        }
        me.applyPlanToNodes();
    },

    // PVE's coloured bars: critical at the hotspot limit, warning more than the threshold
    // above the cluster's average (the thresholds in force: balancing.hotspot, .threshold).
    barHealth: function (rec, resource) {
        if ((rec.get('hotspot') || []).indexOf(resource) >= 0) {
            return 'critical';
        }
        return (rec.get('hot') || []).indexOf(resource) >= 0 ? 'warning' : null;
    },

    sparkline: function (threshold) {
        var me = this, R = PVE.keel.Render;
        var decisions = (me.decisions || []).slice().reverse();
        if (decisions.length < 2) {
            return '';
        }
        var values = decisions.map(function (d) { return d.figure || 0; });
        var dots = [];
        decisions.forEach(function (d, i) {
            if (d.moves) {
                dots.push(i);
            }
        });
        return '<span data-qtip="' + Ext.htmlEncode(Ext.String.format(gettext('The imbalance of the last {0} ' +
            'rounds; dashed: the threshold; dots: rounds that moved guests'), values.length)) + '">' +
            R.sparkline(values, null, threshold, dots, 100, 16) + '</span>';
    },

    // "Apply by root@pam: promised 0.03, reached 0.06 (2 of 9 moves were not made)"
    lastJobText: function () {
        var me = this, R = PVE.keel.Render;
        var job = me.jobStore.getCount() ? me.jobStore.getAt(0) : null;
        if (!job) {
            return '<span class="pmx-hint">' + gettext('none yet') + '</span>';
        }
        var promised = job.get('promised'), achieved = job.get('achieved');
        var text = me.renderJobKind(job.get('kind')) + ' ' + me.renderJobState(job.get('state')) +
            ' <span class="pmx-hint">(' + Ext.htmlEncode(job.get('requested_by')) + ', ' +
            Ext.htmlEncode(R.ago(job.get('ended_at') || job.get('started_at'))) + ')</span>';
        if (promised && achieved) {
            text += ' &middot; ' + Ext.String.format(gettext('imbalance promised {0}, reached {1}'),
                Number(promised.imbalance).toFixed(2), Number(achieved.imbalance).toFixed(2));
            var why = me.whyText(promised, achieved, null);
            if (why) {
                text += ': ' + why;
            }
        } else if (job.get('detail')) {
            text += ' &middot; ' + Ext.htmlEncode(job.get('detail'));
        }
        return text;
    },

    whyText: function (promised, achieved, detail) {
        if (!achieved) {
            return detail ? Ext.htmlEncode(detail) : '';
        }
        if (!(achieved.why || []).length) {
            return gettext('as promised');
        }
        return Ext.htmlEncode(achieved.why.join('; '));
    },

    renderJobKind: function (kind) {
        return Ext.htmlEncode({ apply: gettext('Apply'), maintenance: gettext('Maintenance'),
            round: gettext('Balancing round'), power: gettext('Power saving'), 'power-sleep': gettext('Sleep'),
            'power-wake': gettext('Wake'), 'power-test': gettext('Wake test') }[kind] || kind);
    },

    renderJobState: function (state) {
        var s = { running: ['busy', gettext('running')], ok: ['good', gettext('done')],
            done: ['good', gettext('done')], failed: ['critical', gettext('failed')],
            cancelled: ['warning', gettext('stopped')], interrupted: ['warning', gettext('interrupted')] }[state]
            || ['warning', state];
        return PVE.keel.Render.health(s[0], s[1]);
    },

    renderNode: function (value, meta, rec) {
        var state = rec.get('state');
        var health = { online: 'good', maintenance: 'warning', offline: 'critical', asleep: 'off',
            waking: 'busy', 'shutting down': 'busy' }[state] || 'critical';
        var R = PVE.keel.Render;
        if (rec.get('cpu_now') !== null && rec.get('cpu_now') !== undefined) {
            meta.tdAttr = 'data-qtip="' + Ext.htmlEncode(Ext.htmlEncode(Ext.String.format(
                gettext('Now: CPU {0}, memory {1}'), R.percent(rec.get('cpu_now')), R.percent(rec.get('mem_now'))))) + '"';
        }
        return R.healthIcon(health) + ' ' + Ext.htmlEncode(value) +
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
        var inputs = me.status ? Ext.encode(me.status.inputs || null) : null;
        me.planLoading = true;
        PVE.keel.Api.request({
            url: '/api/plan',
            waitMsgTarget: grid,
            callback: function () { me.planLoading = false; },
            success: function (plan) {
                if (!me.destroyed && !me.jobId) {
                    me.planInputs = inputs;
                    me.planAt = Date.now();
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

    // A plan made under other inputs (maintenance, the config, a job since) is out of date:
    // Apply is off, the title says why, and a fresh plan is asked for.
    checkPlanInputs: function (status) {
        var me = this;
        var now = Ext.encode(status.inputs || null);
        if (me.planInputs === undefined || me.planInputs === null) {
            me.planInputs = me.plan ? now : me.planInputs;
            return;
        }
        if (me.jobId || me.planLoading || !me.canMigrate) {
            return;
        }
        // the load itself moved on: the bars no longer start where the plan's "before" does
        // (re-planned at most once a minute; the figures are smoothed over balancing.window)
        var figure = me.figureOf(status), drifted = false;
        if (me.plan && figure !== null && Math.abs(figure - me.plan.before.imbalance.keel) >= 0.005 &&
                (!me.planAt || Date.now() - me.planAt > 60000)) {
            drifted = true;
        }
        if (now === me.planInputs && !drifted) {
            return;
        }
        var was = Ext.decode(me.planInputs) || {}, is = status.inputs || {};
        var why = now === me.planInputs ? gettext('the load changed since it was made')
            : Ext.encode(was.maintenance) !== Ext.encode(is.maintenance) ? gettext('maintenance changed')
                : was.config !== is.config ? gettext('the settings changed')
                    : gettext('a job ran since');
        me.plan = null;
        me.planInputs = now;
        me.updateButtons();
        me.down('#plan').setTitle(gettext('Plan') + ': ' + PVE.keel.Render.health('warning',
            Ext.String.format(gettext('out of date ({0}): planning again...'), why)));
        me.loadPlan();
    },

    showPlan: function (plan) {
        var me = this;
        me.plan = plan;
        me.down('#plan').setTitle(me.planTitle(plan));
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

    // The plan's verdict, reason, figures (before -> after, as the bars and the "after"
    // column show them), what the last job reached, and what load the figures are of.
    planTitle: function (plan) {
        var me = this, R = PVE.keel.Render;
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
        if (me.lastOutcome) {
            title += ' &middot; ' + Ext.String.format(gettext('after the last job: imbalance promised {0}, reached {1}'),
                Number(me.lastOutcome.promised.imbalance).toFixed(2), Number(me.lastOutcome.achieved.imbalance).toFixed(2)) +
                ((me.lastOutcome.achieved.why || []).length
                    ? ' (' + Ext.htmlEncode(me.lastOutcome.achieved.why.join('; ')) + ')' : '');
        }
        if (me.model) {
            title += ' <span class="pmx-hint">(' + Ext.htmlEncode(me.model.smoothed
                ? Ext.String.format(gettext('load averaged over {0} min'), Math.round(me.model.window_s / 60))
                : gettext('load now')) + ')</span>';
        }
        return title;
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
        me.down('#power').updateButtons();
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
        me.jobSaid = null;
        me.plan = null;
        me.planStore.loadData(job.plan.moves.map(function (m) {
            return Ext.apply({ state: 'planned' }, m);
        }));
        me.down('#plan').setTitle(Ext.String.format(gettext('Plan: {0} running ({1})'),
            { maintenance: gettext('maintenance'), 'power-sleep': gettext('sleep'),
                'power-wake': gettext('wake'), 'power-test': gettext('wake test') }[job.kind] || gettext('apply'),
            Ext.htmlEncode(job.requested_by)));
        me.down('#leftAlone').hide();
        me.applyPlanToNodes();
        me.onJob(job);
        me.jobPoller.url = '/api/jobs/' + encodeURIComponent(job.id);
        me.jobPoller.params = function () { return { since: me.jobEvents }; };
        me.jobPoller.start();
        me.historyPoller.interval = 5000;          // the moves' history follows the job
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
        (job.events || []).forEach(function (event) {
            if (event.eta_s !== undefined && event.eta_s !== null) {
                me.jobEta = { s: event.eta_s, at: event.time || Date.now() / 1000 };
            }
        });
        // a sleep's or wake's own steps (HA maintenance, the shutdown, the wait...): the last one said
        (job.events || []).forEach(function (event) {
            if (event.event === 'power' && event.detail) {
                me.jobSaid = event.detail;
            }
        });
        if ((job.events || []).length && /^power-/.test(job.kind)) {
            me.powerPoller.tick();              // the node's power state follows the job
        }
        me.jobEvents = job.next;
        var progress = job.progress || { completed: 0, total: 0 };
        var panel = me.down('#jobPanel');
        panel.show();
        var kind = { maintenance: gettext('Maintenance'), 'power-sleep': gettext('Sleep'),
            'power-wake': gettext('Wake'), 'power-test': gettext('Wake test') }[job.kind] || gettext('Apply');
        var state = { running: ['busy', gettext('running')], cancelling: ['busy', gettext('stopping')],
            done: ['good', gettext('done')], failed: ['critical', gettext('failed')],
            cancelled: ['warning', gettext('stopped')] }[job.state] || ['warning', job.state];
        // a wake moves no guest: its text is its own steps alone
        var migrations = progress.total || job.kind !== 'power-wake'
            ? Ext.String.format(gettext('{0} of {1} migrations done'), progress.ok, progress.total) : '';
        me.down('#jobText').update(R.health(state[0], kind + ': ' + state[1]) +
            (migrations ? ' &middot; ' + migrations : '') +
            (me.jobSaid ? '<br>' + Ext.htmlEncode(me.jobSaid) : '') +
            (job.error ? '<br>' + R.health('critical', job.error) : '') +
            ' <span class="pmx-hint">(' + Ext.htmlEncode(job.requested_by) + ')</span>');
        var left = me.jobEta ? Math.max(0, me.jobEta.s - (Date.now() / 1000 - me.jobEta.at)) : null;
        var bar = me.down('#jobProgress');
        bar.setValue(progress.total ? progress.completed / progress.total : 0);
        bar.setText(Ext.String.format(gettext('{0} of {1} moves ended'), progress.completed, progress.total) +
            (left !== null && (job.state === 'running' || job.state === 'cancelling')
                ? ' \u00b7 ' + Ext.String.format(gettext('about {0} left'), R.duration(left)) : ''));
        if (job.state !== 'running' && job.state !== 'cancelling') {
            var outcome = job.outcome;
            me.down('#plan').setTitle(gettext('Plan') + ': ' + R.health(state[0], kind + ': ' + state[1]) +
                (migrations ? ' &middot; ' + migrations : '') +
                (job.error ? ' &middot; ' + Ext.htmlEncode(job.error) : '') + (outcome && outcome.promised && outcome.achieved ? ' &middot; ' +
                Ext.String.format(gettext('imbalance promised {0}, reached {1}'),
                    Number(outcome.promised.imbalance).toFixed(2), Number(outcome.achieved.imbalance).toFixed(2)) +
                ((outcome.achieved.why || []).length ? ': ' + Ext.htmlEncode(outcome.achieved.why.join('; ')) : '')
                : '') + ' &middot; ' + gettext('planning again...'));
            me.lastOutcome = outcome && outcome.achieved ? outcome : null;
            me.jobEta = null;
            me.jobPoller.stop();
            me.powerPoller.tick();
            me.historyPoller.interval = 30000;
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
        var me = this;
        PVE.keel.Render.mergeStore(me.historyStore, history.moves || [], 'id');
        PVE.keel.Render.mergeStore(me.jobStore, history.jobs || [], 'id');
        me.decisions = history.decisions || [];
        var rec = me.summaryStore.getById('lastjob');
        if (rec) {
            rec.set('value', me.lastJobText());
        }
        me.drawImbalanceChart();
    },

    // -- charts (ExtJS charts, as PVE's RRD panels draw them) -----------------------------

    // Each node's CPU and memory over the last hour (or day), one line per node, the
    // cluster's average and the threshold above it dashed (the band a node is "hot" over).
    onCharts: function (data) {
        var me = this;
        var panel = me.down('#charts');
        var nodes = Object.keys(data.nodes || {}).sort();
        if (!nodes.length) {
            return;
        }
        var threshold = me.model ? me.model.threshold : 0.1;
        var key = nodes.join(',');
        if (me.chartNodes !== key) {
            me.chartNodes = key;
            panel.removeAll();
            var fields = [{ name: 'time', type: 'date', dateFormat: 'timestamp' }, 'avg', 'hot'];
            var make = function (suffix, title) {
                var series = nodes.map(function (n) { return PVE.keel.Chart.line(n + suffix, n); });
                series.push(PVE.keel.Chart.line('avg', gettext('average'), true));
                series.push(PVE.keel.Chart.line('hot', gettext('hot above'), true));
                return PVE.keel.Chart.make(me, suffix === '_cpu' ? 'cpuChart' : 'memChart', title,
                    fields.concat(nodes.map(function (n) { return n + suffix; })), series,
                    { percent: true, maximum: 1 });
            };
            panel.add(make('_cpu', gettext('CPU usage')));
            panel.add(make('_mem', gettext('Memory usage')));
            panel.add(PVE.keel.Chart.make(me, 'imbalanceChart', gettext('Imbalance'),
                [{ name: 'time', type: 'date', dateFormat: 'timestamp' }, 'figure', 'threshold'],
                [PVE.keel.Chart.line('figure', gettext('imbalance')), PVE.keel.Chart.line('threshold', gettext('threshold'), true),
                    { type: 'scatter', xField: 'time', yField: 'figure', title: gettext('jobs applied'),
                      store: Ext.create('Ext.data.Store', { fields: [{ name: 'time', type: 'date', dateFormat: 'timestamp' },
                          'figure', 'text'], data: [] }),
                      marker: { type: 'circle', radius: 4 },
                      tooltip: { trackMouse: true, renderer: function (tooltip, record) {
                          tooltip.setHtml(Ext.htmlEncode(record.get('text')));
                      } } }],
                { chart: { margin: 0 } }));
        }
        var rows = {};
        ['_cpu', '_mem'].forEach(function (suffix, index) {
            nodes.forEach(function (n) {
                (data.nodes[n] || []).forEach(function (p) {
                    var row = rows[p[0]] || (rows[p[0]] = { time: p[0] });
                    row[n + suffix] = p[index + 1];
                });
            });
        });
        var cpuRows = [], memRows = [];
        Object.keys(rows).sort().forEach(function (t) {
            var row = rows[t];
            var avg = function (suffix) {
                var values = nodes.map(function (n) { return row[n + suffix]; })
                    .filter(function (v) { return v !== null && v !== undefined; });
                return values.length ? values.reduce(function (a, b) { return a + b; }, 0) / values.length : null;
            };
            var c = Ext.apply({}, row), m = Ext.apply({}, row);
            c.avg = avg('_cpu');
            c.hot = c.avg === null ? null : c.avg + threshold;
            m.avg = avg('_mem');
            m.hot = m.avg === null ? null : m.avg + threshold;
            cpuRows.push(c);
            memRows.push(m);
        });
        me.down('#cpuChart').getStore().loadData(cpuRows);
        me.down('#memChart').getStore().loadData(memRows);
        me.drawImbalanceChart();
    },

    // The imbalance of each round (the decisions' figure), the threshold, and the jobs that
    // were applied marked where they started.
    drawImbalanceChart: function () {
        var me = this, chart = me.down('#imbalanceChart');
        if (!chart) {
            return;
        }
        var threshold = me.status && me.status.config ? me.status.config.threshold : null;
        var decisions = (me.decisions || []).slice().reverse();
        chart.getStore().loadData(decisions.map(function (d) {
            return { time: d.t, figure: d.figure, threshold: threshold };
        }));
        var marks = [];
        me.jobStore.each(function (job) {
            var at = job.get('started_at');
            var near = null;
            decisions.forEach(function (d) {
                if (d.t <= at || near === null) {
                    near = d.t <= at ? d : near || d;
                }
            });
            if (near && decisions.length && at >= decisions[0].t) {
                var p = job.get('promised'), a = job.get('achieved');
                marks.push({ time: at, figure: near.figure, text: me.renderJobKind(job.get('kind')) + ' (' +
                    job.get('requested_by') + ')' + (p && a ? ': ' + Ext.String.format(
                    gettext('promised {0}, reached {1}'), Number(p.imbalance).toFixed(2),
                    Number(a.imbalance).toFixed(2)) : '') });
            }
        });
        chart.getSeries()[2].getStore().loadData(marks);
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
            // The confirmation shows what will move where and what stays, with why, before
            // anything moves (GET /api/maintenance/<node>/preview: nothing is done).
            PVE.keel.Api.request({
                url: '/api/maintenance/' + encodeURIComponent(node) + '/preview', waitMsgTarget: me,
                success: function (preview) {
                    if (!me.destroyed) {
                        Ext.create('PVE.keel.MaintenancePreview', { preview: preview, go: go }).show();
                    }
                },
                failure: function (error) { PVE.keel.Api.alert(error); },
            });
        } else {
            go();
        }
    },
});

/*
 * The confirmation of maintenance: every guest that moves (where to, why) and every guest
 * that stays (why), from the engine's preview, before anything moves.
 */
Ext.define('PVE.keel.MaintenancePreview', {
    extend: 'Ext.window.Window',
    itemId: 'keelMaintenancePreview',
    title: gettext('Enter maintenance'),
    iconCls: 'fa fa-wrench',
    modal: true,
    width: 760,
    layout: { type: 'vbox', align: 'stretch' },
    bodyPadding: 10,

    initComponent: function () {
        var me = this, p = me.preview, R = PVE.keel.Render;
        var summary = p.summary || {};
        var head = Ext.String.format(gettext('{0} guests move off {1} ({2} GiB, about {3}); {4} stay on it.'),
            summary.moves, Ext.htmlEncode(p.node), Number(summary.gib_moved || 0).toFixed(2),
            R.duration(summary.est_seconds), summary.stays);
        me.items = [{
            xtype: 'component', itemId: 'head', margin: '0 0 8 0',
            html: R.health(summary.stays ? 'warning' : 'good', '') + head +
                ((p.conflicts || []).length ? '<br>' + R.health('warning', p.conflicts.join(' ')) : ''),
        }, {
            xtype: 'grid', itemId: 'stays', title: gettext('Will stay'), disableSelection: true, maxHeight: 180,
            hidden: !(p.stays || []).length,
            store: { fields: ['vmid', 'name', 'type', 'reason', 'detail'], data: p.stays || [] },
            columns: [
                { text: gettext('Guest'), dataIndex: 'vmid', width: 190, cellWrap: true,
                  renderer: function (v, meta, rec) { return R.guest(v, rec.get('name'), rec.get('type')); } },
                { text: gettext('Reason'), dataIndex: 'reason', width: 120, renderer: Ext.htmlEncode },
                { text: gettext('Why'), dataIndex: 'detail', flex: 1, cellWrap: true, renderer: Ext.htmlEncode },
            ],
        }, {
            xtype: 'grid', itemId: 'moves', title: gettext('Will move'), disableSelection: true,
            margin: '10 0 0 0', maxHeight: 250,
            store: { fields: ['vmid', 'name', 'type', 'from', 'to', 'reason', 'detail'], data: p.moves || [] },
            viewConfig: { emptyText: gettext('Nothing moves'), deferEmptyText: false },
            columns: [
                { text: gettext('Guest'), dataIndex: 'vmid', width: 190, cellWrap: true,
                  renderer: function (v, meta, rec) { return R.guest(v, rec.get('name'), rec.get('type')); } },
                { text: gettext('From'), dataIndex: 'from', width: 80, renderer: Ext.htmlEncode },
                { text: gettext('To'), dataIndex: 'to', width: 80, renderer: Ext.htmlEncode },
                { text: gettext('Why'), dataIndex: 'detail', flex: 1, cellWrap: true, renderer: Ext.htmlEncode },
            ],
        }];
        me.buttons = [{
            text: gettext('Enter maintenance'), itemId: 'confirm', iconCls: 'fa fa-sign-out',
            handler: function () { me.close(); me.go(); },
        }, {
            text: gettext('Cancel'), handler: function () { me.close(); },
        }];
        me.callParent();
    },
});
