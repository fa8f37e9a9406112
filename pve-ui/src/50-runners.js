/*
 * Datacenter -> HA -> Runners (PVE.keel.Runners, xtype pveKeelRunners): scale sets with
 * their state in plain words (paused, drained and resumed from here), providers, the jobs
 * waiting for a runner, runner VMs, job wait times, and the settings (GitHub, providers,
 * scale sets) in edit windows; secrets are write-only.
 * Calls keel-web: GET /api/runners, /api/runners/waits, /api/runners/settings;
 * PUT /api/runners/settings, POST /api/runners/test,
 * POST /api/runners/scale-sets/<name>/{pause,resume,drain} (docs/ui.md, docs/runners.md).
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
Ext.define('PVE.keel.RunnersUtil', {
    singleton: true,

    // A scale set's or provider's state word -> health (the words of `keel runners status`).
    stateHealth: {
        LISTENING: 'good', OK: 'good', STARTING: 'busy', STANDBY: 'off', PAUSED: 'off', DISABLED: 'off',
        'OFF SCHEDULE': 'off', 'HOLDING BACK': 'warning', HELD: 'warning', 'BACKING OFF': 'warning',
        DRAINING: 'busy', 'RATE LIMITED': 'warning', DEGRADED: 'warning', UNREACHABLE: 'critical',
        MISCONFIGURED: 'critical',
    },

    runnerHealth: {
        idle: 'good', busy: 'good', creating: 'busy', starting: 'busy', removing: 'off',
    },

    // Colours of the wait chart's bars, one per scale set: mid tones, legible on light and dark.
    palette: ['#3892d4', '#e08a2c', '#4aa564', '#a36bd1', '#d45d5d', '#2fa8a8', '#b59a2a', '#7f8c99'],

    // Rows into `store` in place: changed records are set, gone ones removed, new ones added,
    // so that the grid neither flickers nor loses its selection.
    merge: function (store, rows, idOf) {
        var seen = {};
        rows.forEach(function (row) {
            var id = idOf(row);
            seen[id] = true;
            var record = store.getById(id);
            if (record) {
                var changes = {};
                Ext.Object.each(row, function (key, value) {
                    if (Ext.encode(record.get(key)) !== Ext.encode(value)) {
                        changes[key] = value;
                    }
                });
                if (Ext.Object.getSize(changes)) {     // only rows that changed are redrawn
                    record.set(changes, { dirty: false });
                }
            } else {
                store.add(Ext.apply({ id: id }, row));
            }
        });
        var gone = [];
        store.each(function (record) {
            if (!seen[record.getId()]) {
                gone.push(record);
            }
        });
        if (gone.length) {
            store.remove(gone);
        }
    },

    canModify: function () {
        var caps = Ext.state.Manager.get('GuiCap');
        return !!(caps && caps.dc && caps.dc['Sys.Modify']);
    },

    list: function (value) {
        if (Array.isArray(value)) {
            return value.join(', ');
        }
        return value === undefined || value === null ? '' : String(value);
    },

    // A template as the config has it (9000, a name, {pve1: 9000, ...}) <-> as typed in one field.
    templateText: function (value) {
        if (value && typeof value === 'object') {
            return Object.keys(value).map(function (node) { return node + '=' + value[node]; }).join(', ');
        }
        return value === undefined || value === null ? '' : String(value);
    },

    templateValue: function (text) {
        text = String(text || '').trim();
        if (!text) {
            return null;
        }
        if (/^\d+$/.test(text)) {
            return parseInt(text, 10);
        }
        if (text.indexOf('=') < 0) {
            return text;
        }
        var perNode = {};
        text.split(/[\s,;]+/).filter(function (x) { return x; }).forEach(function (pair) {
            var parts = pair.split('=');
            perNode[parts[0]] = /^\d+$/.test(parts[1] || '') ? parseInt(parts[1], 10) : parts[1];
        });
        return perNode;
    },

    splitList: function (text) {
        return String(text || '').split(/[\s,;]+/).filter(function (x) { return x; });
    },

    // Sets `key` of `obj` to `value`, or removes it when the value is empty.
    put: function (obj, key, value) {
        if (value === undefined || value === null || value === '' ||
            (Array.isArray(value) && !value.length)) {
            delete obj[key];
        } else {
            obj[key] = value;
        }
    },
});

/*
 * PVE.keel.RunnerEdit: an edit window for one part of the runners: section.  Subclasses
 * give `items` (form fields named by their key, relative to the part), `load(settings)`
 * and `apply(settings, values)` which returns the secrets to set.  OK sends the whole
 * section (PUT /api/runners/settings); errors keyed by config path are shown beside the
 * field named after them (`errorFields`), the others above the form.
 */
Ext.define('PVE.keel.RunnerEdit', {
    extend: 'Ext.window.Window',
    modal: true,
    width: 620,
    layout: 'fit',
    resizable: false,
    cls: 'keel-runner-edit',

    settings: null,      // the runners: section as written (a copy is edited)
    secretsState: null,  // [{id, field, set, ...}]
    stamp: null,         // the config file's version the settings were read from
    prefix: '',          // config path of the edited part: 'runners.github', 'runners.scale_sets[2]'
    onDone: null,

    initComponent: function () {
        var me = this;
        me.items = [{
            xtype: 'form',
            itemId: 'form',
            border: false,
            bodyPadding: 10,
            scrollable: 'y',
            maxHeight: 640,
            fieldDefaults: { labelWidth: 150, anchor: '100%', msgTarget: 'side' },
            items: [{ xtype: 'component', itemId: 'errors', hidden: true, cls: 'pmx-hint', padding: '0 0 8 0' }]
                .concat(me.formItems()),
        }];
        me.buttons = [{
            text: gettext('OK'),
            itemId: 'ok',
            handler: function () { me.submit(); },
        }, {
            text: gettext('Cancel'),
            handler: function () { me.close(); },
        }];
        me.callParent();
        me.down('#form').getForm().setValues(me.load(Ext.clone(me.settings || {})));
    },

    secretSet: function (id) {
        var found = (this.secretsState || []).filter(function (s) { return s.id === id; })[0];
        return !!(found && found.set);
    },

    // A write-only field: empty keeps the secret; it says whether one is set, never what.
    secretField: function (name, label, id, textarea) {
        var set = this.secretSet(id);
        return {
            xtype: textarea ? 'textareafield' : 'textfield',
            inputType: textarea ? undefined : 'password',
            name: name,
            fieldLabel: label,
            height: textarea ? 70 : undefined,
            emptyText: set ? gettext('set (write-only): leave empty to keep it') : gettext('not set'),
            keelSecret: id,
            keelSecretSet: set,
        };
    },

    // config path (after the prefix) -> field name; subclasses extend it.
    errorField: function (rest) {
        return rest.replace(/^\./, '');
    },

    showErrors: function (errors, message) {
        var me = this;
        var form = me.down('#form').getForm();
        var loose = [];
        Ext.Object.each(errors || {}, function (path, text) {
            var field = null;
            if (path.indexOf(me.prefix) === 0) {
                var name = me.errorField(path.substring(me.prefix.length));
                field = name ? form.findField(name) : null;
            }
            if (field) {
                field.markInvalid(Ext.htmlEncode(text));      // errors quote what was typed
            } else {
                loose.push(Ext.htmlEncode(path) + ': ' + Ext.htmlEncode(text));
            }
        });
        var box = me.down('#errors');
        if (loose.length || (message && !Ext.Object.getSize(errors || {}))) {
            box.update('<i class="fa fa-fw critical fa-times-circle"></i> ' +
                (loose.length ? loose.join('<br>') : Ext.htmlEncode(message)));
            box.show();
        } else {
            box.hide();
        }
    },

    submit: function () {
        var me = this;
        var form = me.down('#form').getForm();
        if (!form.isValid()) {
            return;
        }
        var settings = Ext.clone(me.settings || {});
        var secrets = me.apply(settings, form.getValues(false, false, false, true)) || {};
        var failure = function (error) {
            if (error.unreachable) {
                PVE.keel.Api.alert(error);
                return;
            }
            me.showErrors(error.errors, error.message);
        };
        // Checked first (an answer of 200 with the problems), then written.
        PVE.keel.Api.request({
            url: '/api/runners/settings/validate',
            method: 'POST',
            jsonData: { settings: settings, secrets: secrets, stamp: me.stamp },
            waitMsgTarget: me,
            failure: failure,
            success: function (checked) {
                if (me.destroyed) {
                    return;
                }
                if (!checked.valid) {
                    me.showErrors(checked.errors, checked.message);
                    return;
                }
                me.write(settings, secrets, failure);
            },
        });
    },

    write: function (settings, secrets, failure) {
        var me = this;
        PVE.keel.Api.request({
            url: '/api/runners/settings',
            method: 'PUT',
            jsonData: { settings: settings, secrets: secrets, stamp: me.stamp },
            waitMsgTarget: me,
            success: function () {
                if (me.onDone) {
                    me.onDone();
                }
                me.close();
            },
            failure: failure,
        });
    },
});

Ext.define('PVE.keel.GitHubEdit', {
    alias: 'widget.pveKeelGitHubEdit',
    extend: 'PVE.keel.RunnerEdit',
    title: gettext('Runners') + ': GitHub',
    prefix: 'runners',

    formItems: function () {
        var me = this;
        return [{
            xtype: 'textfield', name: 'url', fieldLabel: gettext('Organisation or repository URL'),
            emptyText: 'https://github.com/my-org', allowBlank: false,
        }, {
            xtype: 'radiogroup', fieldLabel: gettext('Authentication'), itemId: 'auth', columns: 2,
            items: [
                { boxLabel: gettext('GitHub App'), name: 'auth', inputValue: 'app' },
                { boxLabel: gettext('Token (enterprises)'), name: 'auth', inputValue: 'token' },
            ],
            listeners: { change: function () { me.showAuth(); } },
        }, {
            xtype: 'textfield', name: 'app_client_id', fieldLabel: gettext('App client ID'), itemId: 'app1',
        }, {
            xtype: 'numberfield', name: 'app_installation_id', fieldLabel: gettext('Installation ID'),
            itemId: 'app2', minValue: 1, allowDecimals: false, hideTrigger: true,
        },
        Ext.apply(me.secretField('app_private_key', gettext('App private key (PEM)'),
            'github.app_private_key', true), { itemId: 'app3' }),
        Ext.apply(me.secretField('token', gettext('Token'), 'github.token'), { itemId: 'token1' }),
        me.secretField('webhook_secret', gettext('Webhook secret'), 'webhook.secret'),
        {
            xtype: 'displayfield', fieldLabel: gettext('Webhook URL'),
            value: Ext.htmlEncode(PVE.keel.Api.baseUrl() + '/webhook') +
                ' <span class="pmx-hint">(' + gettext('optional: workflow_job events') + ')</span>',
        }];
    },

    load: function (settings) {
        var gh = settings.github || {};
        return {
            url: gh.url, app_client_id: gh.app_client_id, app_installation_id: gh.app_installation_id,
            auth: gh.token_path && !gh.app_client_id ? 'token' : 'app',
        };
    },

    showAuth: function () {
        var me = this;
        var auth = me.down('#auth').getValue().auth;
        ['app1', 'app2', 'app3'].forEach(function (id) { me.down('#' + id).setHidden(auth === 'token'); });
        me.down('#token1').setHidden(auth !== 'token');
    },

    afterRender: function () {
        this.callParent(arguments);
        this.showAuth();
    },

    errorField: function (rest) {
        var map = {
            '.github.url': 'url', '.github.app_client_id': 'app_client_id',
            '.github.app_installation_id': 'app_installation_id',
            '.github.app_private_key': 'app_private_key', '.github.app_private_key_path': 'app_private_key',
            '.github.token': 'token', '.github.token_path': 'token',
            '.webhook.secret': 'webhook_secret', '.webhook.secret_path': 'webhook_secret',
        };
        return map[rest] || null;
    },

    apply: function (settings, values) {
        var put = PVE.keel.RunnersUtil.put;
        var gh = settings.github = settings.github || {};
        put(gh, 'url', values.url);
        var secrets = {};
        if (values.auth === 'token') {
            ['app_client_id', 'app_installation_id', 'app_private_key_path'].forEach(function (k) { delete gh[k]; });
            if (values.token) {
                secrets['github.token'] = values.token;
            }
        } else {
            delete gh.token_path;
            put(gh, 'app_client_id', values.app_client_id);
            put(gh, 'app_installation_id', values.app_installation_id === '' || values.app_installation_id === null
                ? null : parseInt(values.app_installation_id, 10));
            if (values.app_private_key) {
                secrets['github.app_private_key'] = values.app_private_key;
            }
        }
        if (values.webhook_secret) {
            secrets['webhook.secret'] = values.webhook_secret;
        }
        return secrets;
    },
});

Ext.define('PVE.keel.ProviderEdit', {
    alias: 'widget.pveKeelProviderEdit',
    extend: 'PVE.keel.RunnerEdit',
    index: null,         // the provider's index in runners.providers, null: a new one

    initComponent: function () {
        var me = this;
        var count = ((me.settings || {}).providers || []).length;
        me.slot = me.index === null ? count : me.index;
        me.prefix = 'runners.providers[' + me.slot + ']';
        me.title = gettext('Runners') + ': ' + (me.index === null ? gettext('Add provider') : gettext('Provider'));
        me.callParent();
    },

    formItems: function () {
        var me = this;
        var name = me.index === null ? null
            : (((me.settings.providers || [])[me.index] || {}).name || '');
        return [
            { xtype: 'textfield', name: 'name', fieldLabel: gettext('Name'), allowBlank: false,
              readOnly: me.index !== null, emptyText: 'pve' },
            { xtype: 'textfield', name: 'nodes', fieldLabel: gettext('Nodes'),
              emptyText: gettext('all online nodes') },
            { xtype: 'textfield', name: 'runner.template', fieldLabel: gettext('Template'),
              emptyText: gettext('VMID, a name (a copy per node), or pve1=9000, pve2=9001') },
            { xtype: 'textfield', name: 'runner.pool', fieldLabel: gettext('Pool') },
            { xtype: 'checkbox', name: 'runner.full_clone', fieldLabel: gettext('Full clone'), inputValue: true,
              uncheckedValue: false },
            { xtype: 'textfield', name: 'runner.storage', fieldLabel: gettext('Storage (full clones)') },
            { xtype: 'numberfield', name: 'max_runners', fieldLabel: gettext('Max. runners'), minValue: 0,
              allowDecimals: false, emptyText: gettext('no limit') },
            { xtype: 'numberfield', name: 'weight', fieldLabel: gettext('Weight'), minValue: 0.001,
              emptyText: '1' },
            { xtype: 'checkbox', name: 'disabled', fieldLabel: gettext('Disabled'), inputValue: true,
              uncheckedValue: false },
            { xtype: 'fieldset', title: gettext('Another cluster (leave empty: this one)'), collapsible: true,
              collapsed: !((me.settings.providers || [])[me.index] || {}).url,
              defaults: { anchor: '100%', labelWidth: 140, msgTarget: 'side' },
              items: [
                  { xtype: 'textfield', name: 'url', fieldLabel: 'URL', emptyText: 'https://pve-b:8006' },
                  { xtype: 'textfield', name: 'token_id', fieldLabel: gettext('API token ID'),
                    emptyText: 'keel@pve!runners' },
                  me.secretField('token_secret', gettext('API token secret'),
                      'providers.' + (name || '') + '.token_secret'),
              ] },
        ];
    },

    load: function (settings) {
        var p = this.index === null ? { type: 'proxmox' } : (settings.providers || [])[this.index] || {};
        var runner = p.runner || {};
        return {
            name: p.name, nodes: PVE.keel.RunnersUtil.list(p.nodes),
            'runner.template': PVE.keel.RunnersUtil.templateText(runner.template),
            'runner.pool': runner.pool, 'runner.full_clone': !!runner.full_clone, 'runner.storage': runner.storage,
            max_runners: p.max_runners, weight: p.weight, disabled: !!p.disabled, url: p.url, token_id: p.token_id,
        };
    },

    errorField: function (rest) {
        var name = rest.replace(/^\./, '');
        if (name === 'token_secret_path') {
            return 'token_secret';
        }
        return name.indexOf('runner.template.') === 0 ? 'runner.template' : name;
    },

    apply: function (settings, values) {
        var U = PVE.keel.RunnersUtil;
        var list = settings.providers = settings.providers || [];
        var p = this.index === null ? { type: 'proxmox' } : list[this.index];
        var runner = p.runner = p.runner || {};
        p.name = values.name;
        p.type = p.type || 'proxmox';
        U.put(p, 'nodes', U.splitList(values.nodes));
        U.put(runner, 'template', U.templateValue(values['runner.template']));
        U.put(runner, 'pool', values['runner.pool']);
        U.put(runner, 'full_clone', values['runner.full_clone'] ? true : null);
        U.put(runner, 'storage', values['runner.storage']);
        if (!Ext.Object.getSize(runner)) {
            delete p.runner;
        }
        U.put(p, 'max_runners', values.max_runners === '' ? null : parseInt(values.max_runners, 10));
        U.put(p, 'weight', values.weight === '' ? null : parseFloat(values.weight));
        U.put(p, 'disabled', values.disabled ? true : null);
        U.put(p, 'url', values.url);
        U.put(p, 'token_id', values.token_id);
        if (this.index === null) {
            list.push(p);
        }
        var secrets = {};
        if (values.token_secret) {
            secrets['providers.' + values.name + '.token_secret'] = values.token_secret;
        }
        return secrets;
    },
});

Ext.define('PVE.keel.ScaleSetEdit', {
    alias: 'widget.pveKeelScaleSetEdit',
    extend: 'PVE.keel.RunnerEdit',
    index: null,

    initComponent: function () {
        var me = this;
        var count = ((me.settings || {}).scale_sets || []).length;
        me.slot = me.index === null ? count : me.index;
        me.prefix = 'runners.scale_sets[' + me.slot + ']';
        me.title = gettext('Runners') + ': ' + (me.index === null ? gettext('Add scale set') : gettext('Scale set'));
        me.callParent();
    },

    current: function () {
        return this.index === null ? {} : ((this.settings.scale_sets || [])[this.index] || {});
    },

    // The scale set's providers, as {name, runner}, in its order.
    entries: function () {
        return (this.current().providers || []).map(function (e) {
            return typeof e === 'string' ? { name: e } : e;
        });
    },

    formItems: function () {
        var me = this;
        var schedule = me.current().schedule;
        var items = [
            { xtype: 'textfield', name: 'name', fieldLabel: gettext('Name (runs-on label)'), allowBlank: false,
              readOnly: me.index !== null, emptyText: 'keel-c2-m4' },
            { xtype: 'numberfield', name: 'max_runners', fieldLabel: gettext('Max. runners'), minValue: 1,
              allowDecimals: false, allowBlank: false },
            { xtype: 'numberfield', name: 'min_runners', fieldLabel: gettext('Min. runners (idle)'), minValue: 0,
              allowDecimals: false, emptyText: '0' },
            { xtype: 'numberfield', name: 'priority', fieldLabel: gettext('Priority'), allowDecimals: false,
              emptyText: '0' },
            { xtype: 'combobox', name: 'placement', fieldLabel: gettext('Placement'), editable: false,
              store: [['spread', gettext('spread')], ['pack', gettext('pack')]], value: 'spread' },
            { xtype: 'textfield', name: 'labels', fieldLabel: gettext('Extra labels') },
            { xtype: 'textfield', name: 'runner_group', fieldLabel: gettext('Runner group'),
              emptyText: 'Default' },
            { xtype: 'textfield', name: 'max_idle_age', fieldLabel: gettext('Max. idle age'), emptyText: '-' },
            { xtype: 'textfield', name: 'max_age', fieldLabel: gettext('Max. age'), emptyText: '-' },
            { xtype: 'checkbox', name: 'paused', fieldLabel: gettext('Paused'), inputValue: true,
              uncheckedValue: false },
        ];
        var providers = (me.settings.providers || []).map(function (p) { return p.name; });
        var used = {};
        me.entries().forEach(function (e) { used[e.name] = e; });
        var rows = [];
        providers.concat(Object.keys(used).filter(function (n) { return providers.indexOf(n) < 0; }))
            .forEach(function (name) {
                var e = used[name];
                var runner = (e && e.runner) || {};
                rows.push({
                    xtype: 'fieldcontainer', layout: 'hbox', fieldLabel: Ext.htmlEncode(name),
                    defaults: { msgTarget: 'side' },
                    items: [
                        { xtype: 'checkbox', name: 'use.' + name, boxLabel: gettext('use'),
                          value: !!e || (me.index === null && providers.length === 1),
                          inputValue: true, uncheckedValue: false, width: 60 },
                        { xtype: 'numberfield', name: 'cores.' + name, emptyText: gettext('cores'),
                          value: runner.cores, minValue: 1, allowDecimals: false, width: 140,
                          fieldLabel: gettext('Cores'), labelWidth: 45 },
                        { xtype: 'textfield', name: 'memory.' + name, emptyText: '4GiB', value: runner.memory,
                          width: 180, fieldLabel: gettext('Memory'), labelWidth: 60, margin: '0 0 0 10' },
                    ],
                });
            });
        items.push({ xtype: 'fieldset', title: gettext('Providers (runner size on each)'), itemId: 'providers',
            defaults: { labelWidth: 100 },
            items: rows.length ? rows : [{ xtype: 'component', cls: 'pmx-hint',
                html: gettext('Add a provider first.') }] });
        items.push(me.scheduleFieldset(schedule || {}));
        return items;
    },

    // The schedule: a time zone and its windows in a grid edited in place (the first window
    // that holds the time wins; max. runners 0 takes the scale set off schedule).
    scheduleFieldset: function (schedule) {
        var rows = (schedule.windows || []).map(function (w) {
            return { days: PVE.keel.RunnersUtil.list(w.days), from: w.from, to: w.to,
                min_runners: w.min_runners, max_runners: w.max_runners };
        });
        var text = function (value) { return Ext.htmlEncode(value === undefined || value === null ? '' : value); };
        return {
            xtype: 'fieldset', title: gettext('Schedule (the first window that holds the time wins)'),
            itemId: 'schedule', defaults: { anchor: '100%', labelWidth: 100, msgTarget: 'side' },
            items: [{
                xtype: 'textfield', name: 'schedule.timezone', fieldLabel: gettext('Time zone'),
                emptyText: 'UTC', value: schedule.timezone,
            }, {
                xtype: 'grid', itemId: 'windows', height: 140, margin: '0 0 10 0', border: true,
                store: { fields: ['days', 'from', 'to', 'min_runners', 'max_runners'], data: rows },
                plugins: { ptype: 'cellediting', clicksToEdit: 1 },
                emptyText: gettext('No windows: min. runners all week'),
                viewConfig: { deferEmptyText: false, markDirty: false },
                tbar: [{
                    text: gettext('Add window'), iconCls: 'fa fa-plus',
                    handler: function (button) {
                        button.up('grid').getStore().add({ days: 'mon-fri', from: '08:00', to: '18:00' });
                    },
                }, {
                    text: gettext('Remove window'), iconCls: 'fa fa-trash-o',
                    handler: function (button) {
                        var grid = button.up('grid');
                        grid.getStore().remove(grid.getSelection());
                    },
                }],
                columns: [
                    { text: gettext('Days'), dataIndex: 'days', flex: 1, editor: 'textfield', renderer: text },
                    { text: gettext('From'), dataIndex: 'from', width: 70, editor: 'textfield', renderer: text },
                    { text: gettext('To'), dataIndex: 'to', width: 70, editor: 'textfield', renderer: text },
                    { text: gettext('Min. runners'), dataIndex: 'min_runners', width: 100, renderer: text,
                      editor: { xtype: 'numberfield', minValue: 0, allowDecimals: false } },
                    { text: gettext('Max. runners'), dataIndex: 'max_runners', width: 100, renderer: text,
                      editor: { xtype: 'numberfield', minValue: 0, allowDecimals: false } },
                ],
            }],
        };
    },

    load: function (settings) {
        var s = this.current();
        var U = PVE.keel.RunnersUtil;
        return {
            name: s.name, max_runners: s.max_runners, min_runners: s.min_runners, priority: s.priority,
            placement: s.placement || 'spread', labels: U.list(s.labels), runner_group: s.runner_group,
            max_idle_age: s.max_idle_age, max_age: s.max_age, paused: !!s.paused,
        };
    },

    errorField: function (rest) {
        var me = this;
        var match = /^\.providers\[(\d+)\](?:\.runner\.(cores|memory)|\.name)?/.exec(rest);
        if (match) {
            var entry = me.submittedEntries ? me.submittedEntries[parseInt(match[1], 10)] : null;
            return entry ? (match[2] || 'use') + '.' + entry.name : null;
        }
        return rest.replace(/^\./, '');
    },

    apply: function (settings, values) {
        var U = PVE.keel.RunnersUtil;
        var list = settings.scale_sets = settings.scale_sets || [];
        var s = this.index === null ? {} : list[this.index];
        s.name = values.name;
        var int = function (v) { return v === '' || v === null || v === undefined ? null : parseInt(v, 10); };
        U.put(s, 'max_runners', int(values.max_runners));
        U.put(s, 'min_runners', int(values.min_runners));
        U.put(s, 'priority', int(values.priority));
        U.put(s, 'placement', values.placement === 'spread' && !s.placement ? null : values.placement);
        U.put(s, 'labels', U.splitList(values.labels));
        U.put(s, 'runner_group', values.runner_group);
        U.put(s, 'max_idle_age', values.max_idle_age);
        U.put(s, 'max_age', values.max_age);
        U.put(s, 'paused', values.paused ? true : null);
        var before = {};
        this.entries().forEach(function (e) { before[e.name] = e; });
        var entries = [];
        Object.keys(values).forEach(function (key) {
            if (key.indexOf('use.') === 0 && values[key]) {
                var name = key.substring(4);
                var entry = Ext.apply({}, before[name] || {}, { name: name });
                var runner = Ext.apply({}, entry.runner || {});
                U.put(runner, 'cores', int(values['cores.' + name]));
                U.put(runner, 'memory', values['memory.' + name]);
                U.put(entry, 'runner', Ext.Object.getSize(runner) ? runner : null);
                entries.push(entry);
            }
        });
        s.providers = entries;
        this.submittedEntries = entries;
        var windows = [];
        this.down('#windows').getStore().each(function (record) {
            var w = {};
            U.put(w, 'days', U.splitList(record.get('days')));
            U.put(w, 'from', record.get('from'));
            U.put(w, 'to', record.get('to'));
            U.put(w, 'min_runners', int(record.get('min_runners')));
            U.put(w, 'max_runners', int(record.get('max_runners')));
            if (Ext.Object.getSize(w)) {
                windows.push(w);
            }
        });
        var schedule = Ext.apply({}, s.schedule || {});
        U.put(schedule, 'timezone', values['schedule.timezone']);
        schedule.windows = windows;
        U.put(s, 'schedule', windows.length ? schedule : null);
        if (this.index === null) {
            list.push(s);
        }
        return {};
    },
});

// The results of "Test connection", one row per check.
Ext.define('PVE.keel.RunnerTest', {
    alias: 'widget.pveKeelRunnerTest',
    extend: 'Ext.window.Window',
    title: gettext('Runners') + ': ' + gettext('Test connection'),
    modal: true,
    width: 760,
    height: 380,
    layout: 'fit',

    initComponent: function () {
        var me = this;
        me.items = [{
            xtype: 'grid',
            itemId: 'results',
            store: { fields: ['check', 'target', 'ok', 'message'], data: [] },
            emptyText: gettext('Testing...'),
            columns: [{
                text: gettext('Check'), dataIndex: 'check', width: 230,
                renderer: function (value, meta, record) {
                    var ok = record.get('ok');
                    var state = ok === true ? 'good' : ok === false ? 'critical' : 'off';
                    return PVE.keel.Render.health(state, value);
                },
            }, {
                text: gettext('Result'), dataIndex: 'message', flex: 1, cellWrap: true,
                renderer: function (value) { return Ext.htmlEncode(value); },
            }],
        }];
        me.bbar = [{ xtype: 'component', itemId: 'summary', padding: '0 5' }];
        me.callParent();
        me.on('afterrender', me.run, me);
    },

    run: function () {
        var me = this;
        PVE.keel.Api.request({
            url: '/api/runners/test',
            method: 'POST',
            jsonData: {},
            waitMsgTarget: me.down('#results'),
            success: function (data) {
                if (me.destroyed) {
                    return;
                }
                me.down('#results').getStore().loadData(data.results);
                var failed = data.results.filter(function (r) { return r.ok === false; })
                    .map(function (r) { return r.check; });
                me.down('#summary').update(failed.length
                    ? PVE.keel.Render.health('critical', gettext('Failed') + ': ' + failed.join(', '))
                    : PVE.keel.Render.health('good', gettext('GitHub and every provider answered')));
            },
            failure: function (error) {
                if (!me.destroyed) {
                    me.down('#summary').update(PVE.keel.Render.healthIcon('critical') + ' ' +
                        PVE.keel.Api.errorHtml(error));
                }
            },
        });
    },
});

Ext.define('PVE.keel.Runners', {
    extend: 'Ext.panel.Panel',
    alias: 'widget.pveKeelRunners',
    layout: { type: 'vbox', align: 'stretch' },
    scrollable: 'y',
    bodyPadding: '0 0 10 0',
    cls: 'keel-runners',

    settings: null,
    secretsState: [],

    initComponent: function () {
        var me = this;
        var U = PVE.keel.RunnersUtil;
        var R = PVE.keel.Render;
        var modify = U.canModify();
        var stateColumn = function (extra) {
            return Ext.apply({
                text: gettext('State'), dataIndex: 'state', width: 190,
                renderer: function (value, meta, record) {
                    var details = record.get('details') || [];
                    if (details.length) {
                        meta.tdAttr = 'data-qtip="' + Ext.htmlEncode(Ext.htmlEncode(details.join('\n'))) + '"';
                    }
                    return R.health(U.stateHealth[value] || 'off', value);
                },
            }, extra);
        };
        me.dockedItems = [{
            xtype: 'toolbar', dock: 'top', itemId: 'tbar',
            items: [{
                text: 'GitHub', iconCls: 'fa fa-github', itemId: 'github', disabled: !modify,
                handler: function () { me.edit('PVE.keel.GitHubEdit', {}); },
            }, {
                text: gettext('Test connection'), iconCls: 'fa fa-plug', itemId: 'test', disabled: !modify,
                handler: function () { Ext.create('PVE.keel.RunnerTest').show(); },
            }, '->', { xtype: 'component', itemId: 'where', cls: 'pmx-hint' }],
        }, { xtype: 'pveKeelNotice', dock: 'top', itemId: 'notice' }];

        var grid = function (config) {
            return Ext.apply({
                xtype: 'grid', margin: '10 10 0 10', border: true, disableSelection: false,
                viewConfig: { markDirty: false, loadMask: false, deferEmptyText: false },
                minHeight: 90,
            }, config);
        };
        var editButtons = function (kind, gridId) {
            return [{
                text: gettext('Add'), iconCls: 'fa fa-plus', itemId: kind + 'Add', disabled: !modify,
                handler: function () { me.editItem(kind, null); },
            }, {
                text: gettext('Edit'), iconCls: 'fa fa-pencil', itemId: kind + 'Edit', disabled: true,
                keelNeedsSelection: modify,
                handler: function () { me.editItem(kind, me.selected(gridId)); },
            }, {
                text: gettext('Remove'), iconCls: 'fa fa-trash-o', itemId: kind + 'Remove', disabled: true,
                keelNeedsSelection: modify,
                handler: function () { me.removeItem(kind, me.selected(gridId)); },
            }];
        };
        // Pause, drain, resume a scale set now (kept until resumed; Sys.Modify on /).
        var controlButtons = [{ xtype: 'tbseparator' }].concat([
            ['pause', gettext('Pause'), 'fa-pause',
             gettext('Pause {0}? No new runners: idle ones go, busy ones finish; GitHub is told it has no room.')],
            ['drain', gettext('Drain'), 'fa-hourglass-end',
             gettext('Drain {0}? Runners for the jobs it has, then none; GitHub is given no more room.')],
            ['resume', gettext('Resume'), 'fa-play', null],
        ].map(function (c) {
            return {
                text: c[1], iconCls: 'fa ' + c[2], itemId: 'scaleSet' + c[0], disabled: true,
                keelNeedsSelection: modify,
                handler: function () { me.control(me.selected('scaleSets'), c[0], c[3]); },
            };
        }));
        var selectionListener = function (kind) {
            return {
                selectionchange: function (model, selected) {
                    var ids = [kind + 'Edit', kind + 'Remove'];
                    if (kind === 'scaleSet') {
                        ids = ids.concat(['scaleSetpause', 'scaleSetdrain', 'scaleSetresume']);
                    }
                    ids.forEach(function (id) {
                        var button = me.down('#' + id);
                        button.setDisabled(!button.keelNeedsSelection || !selected.length);
                    });
                },
                itemdblclick: function (view, record) {
                    if (modify) {
                        me.editItem(kind, record.getId());
                    }
                },
            };
        };

        me.items = [grid({
            title: gettext('Scale sets'), itemId: 'scaleSets', iconCls: 'fa fa-th-large',
            store: { fields: ['name', 'state', 'details', 'desired', 'alive', 'idle', 'busy', 'max', 'waiting',
                'priority'], data: [] },
            emptyText: gettext('No scale sets'),
            tbar: editButtons('scaleSet', 'scaleSets').concat(controlButtons),
            listeners: selectionListener('scaleSet'),
            columns: [
                { text: gettext('Name'), dataIndex: 'name', flex: 1, renderer: Ext.htmlEncode },
                stateColumn(),
                { text: gettext('Desired'), dataIndex: 'desired', width: 95, align: 'right' },
                { text: gettext('Current'), dataIndex: 'alive', width: 95, align: 'right' },
                { text: gettext('Idle'), dataIndex: 'idle', width: 70, align: 'right' },
                { text: gettext('Busy'), dataIndex: 'busy', width: 70, align: 'right' },
                { text: gettext('Max.'), dataIndex: 'max', width: 70, align: 'right' },
                { text: gettext('Waiting'), dataIndex: 'waiting', width: 90, align: 'right' },
                { text: gettext('Priority'), dataIndex: 'priority', width: 80, align: 'right' },
                { text: gettext('Details'), dataIndex: 'details', flex: 2, cellWrap: true,
                  renderer: function (value) { return Ext.htmlEncode((value || []).join('; ')); } },
            ],
        }), grid({
            title: gettext('Providers'), itemId: 'providers', iconCls: 'fa fa-server',
            store: { fields: ['name', 'state', 'runners', 'max_runners', 'where', 'details'], data: [] },
            emptyText: gettext('No providers'),
            tbar: editButtons('provider', 'providers'),
            listeners: selectionListener('provider'),
            columns: [
                { text: gettext('Name'), dataIndex: 'name', flex: 1, renderer: Ext.htmlEncode },
                stateColumn({ width: 150 }),
                { text: gettext('Runners'), dataIndex: 'runners', width: 100, align: 'right',
                  renderer: function (value, meta, record) {
                      var max = record.get('max_runners');
                      return Ext.htmlEncode(value) + (max === null || max === undefined ? '' : ' / ' + max);
                  } },
                { text: gettext('Cluster'), dataIndex: 'where', flex: 1, renderer: Ext.htmlEncode },
                { text: gettext('Details'), dataIndex: 'details', flex: 2, cellWrap: true,
                  renderer: function (value) { return Ext.htmlEncode((value || []).join('; ')); } },
            ],
        }), grid({
            title: gettext('Waiting jobs'), itemId: 'queue', iconCls: 'fa fa-hourglass-half',
            store: { fields: ['job_id', 'scale_set', 'since', 'age_s', 'repo', 'workflow', 'name'], data: [],
                sorters: ['since'] },
            emptyText: gettext('No job is waiting for a runner'),
            maxHeight: 300, scrollable: 'y',
            columns: [
                { text: gettext('Scale set'), dataIndex: 'scale_set', width: 160, renderer: Ext.htmlEncode },
                { text: gettext('Waiting'), dataIndex: 'age_s', width: 100, renderer: R.duration },
                { text: gettext('Repository'), dataIndex: 'repo', flex: 1, renderer: Ext.htmlEncode },
                { text: gettext('Workflow'), dataIndex: 'workflow', flex: 1, renderer: Ext.htmlEncode },
                { text: gettext('Job'), dataIndex: 'name', flex: 1,
                  renderer: function (value, meta, record) {
                      return Ext.htmlEncode(value || '') + ' <span class="pmx-hint">' +
                          Ext.htmlEncode(record.get('job_id')) + '</span>';
                  } },
            ],
        }), grid({
            title: gettext('Runners'), itemId: 'runners', iconCls: 'fa fa-desktop',
            store: { fields: ['name', 'scale_set', 'vmid', 'node', 'state', 'phase', 'age_s', 'job', 'reason',
                'job_url', 'job_repo'],
                data: [], sorters: ['scale_set', 'name'] },
            emptyText: gettext('No runner VMs: they are cloned when jobs are queued'),
            columns: [
                { text: gettext('Name'), dataIndex: 'name', flex: 1, renderer: Ext.htmlEncode },
                { text: 'VMID', dataIndex: 'vmid', width: 150,
                  renderer: function (value) { return value ? R.guest(value, '', 'qemu') : '-'; } },
                { text: gettext('Node'), dataIndex: 'node', width: 120,
                  renderer: function (value) { return value ? R.node(value) : '-'; } },
                { text: gettext('State'), dataIndex: 'state', width: 130,
                  renderer: function (value, meta, record) {
                      var phase = record.get('phase');
                      return R.health(U.runnerHealth[value] || 'off', value) +
                          (phase && phase !== value && phase !== 'ready'
                              ? ' <span class="pmx-hint">(' + Ext.htmlEncode(phase) + ')</span>' : '');
                  } },
                { text: gettext('Age'), dataIndex: 'age_s', width: 90, renderer: R.duration },
                { text: gettext('Job'), dataIndex: 'job', flex: 1,
                  renderer: function (value, meta, record) {
                      if (!value) {
                          return '<span class="pmx-hint">' + Ext.htmlEncode(record.get('reason') || '-') + '</span>';
                      }
                      var url = record.get('job_url');
                      var text = '<i class="fa fa-fw fa-cog"></i> ' + Ext.htmlEncode(value) +
                          (record.get('job_repo') ? ' <span class="pmx-hint">(' + Ext.htmlEncode(record.get('job_repo')) +
                              ')</span>' : '');
                      return /^https:\/\//.test(url || '') ? '<a href="' + Ext.htmlEncode(url) + '" target="_blank" ' +
                          'rel="noopener noreferrer">' + text + '</a>' : text;
                  } },
            ],
        }), {
            xtype: 'panel', title: gettext('Job wait times (queued to started)'), itemId: 'waitsPanel',
            iconCls: 'fa fa-bar-chart', margin: '10 10 0 10', border: true, bodyPadding: 10,
            items: [{ xtype: 'component', itemId: 'waits',
                html: '<span class="pmx-hint">' + gettext('Loading...') + '</span>' }],
        }, {
            xtype: 'panel', itemId: 'activity', iconCls: 'fa fa-line-chart', margin: '10 10 10 10', border: true,
            title: gettext('Queue and busy runners over time') + ' <span class="pmx-hint">(' +
                gettext('per scale set, the most at once in each step') + ')</span>',
            height: 260, layout: { type: 'hbox', align: 'stretch' },
            tools: [PVE.keel.Chart.spanButtons('span', function () { return me.activityPoller; }, 'span',
                ['1h', '1d'], function () { me.activityNames = null; })],
            items: [{ xtype: 'component', itemId: 'activityEmpty', flex: 1, padding: 10, cls: 'pmx-hint',
                html: gettext('Loading...') }],
        }];
        me.callParent();
        // Only what the panel reads (not the recent jobs), 304 when unchanged (docs/ui.md).
        me.poller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/runners', interval: 5000,
            fields: ['enabled', 'active', 'error', 'remote', 'node', 'leader_node', 'time', 'blocked_until', 'github',
                'github_state', 'notices', 'queue', 'queued', 'scale_sets', 'providers', 'runners', 'config_error'],
            onData: me.onStatus, onError: me.onError, scope: me,
        });
        me.waitPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/runners/waits', params: { limit: 60 }, interval: 30000,
            onData: me.onWaits, onError: function () {}, scope: me,
        });
        me.activityPoller = Ext.create('PVE.keel.Poller', {
            panel: me, url: '/api/runners/activity', params: { span: '1h' }, interval: 60000,
            onData: me.onActivity, onError: function () {}, scope: me,
        });
        me.on('afterrender', function () {
            me.loadSettings();
            me.poller.start();
        });
    },

    selected: function (gridId) {
        var selection = this.down('#' + gridId).getSelection();
        return selection.length ? selection[0].getId() : null;
    },

    loadSettings: function (then) {
        var me = this;
        PVE.keel.Api.request({
            url: '/api/runners/settings',
            success: function (data) {
                if (me.destroyed) {
                    return;
                }
                me.settings = data.settings || {};
                me.secretsState = data.secrets || [];
                me.stamp = data.stamp;
                if (then) {
                    then();
                }
            },
            failure: function (error) {
                if (!me.destroyed) {
                    me.down('#notice').showError(error);
                }
            },
        });
    },

    edit: function (cls, config) {
        var me = this;
        me.loadSettings(function () {      // always edit what the file holds now
            Ext.create(cls, Ext.apply({
                settings: me.settings, secretsState: me.secretsState, stamp: me.stamp,
                onDone: function () { me.loadSettings(); },
            }, config)).show();
        });
    },

    indexOf: function (kind, name) {
        var list = (this.settings || {})[kind === 'provider' ? 'providers' : 'scale_sets'] || [];
        for (var i = 0; i < list.length; i++) {
            if (list[i] && list[i].name === name) {
                return i;
            }
        }
        return -1;
    },

    editItem: function (kind, name) {
        var me = this;
        var cls = kind === 'provider' ? 'PVE.keel.ProviderEdit' : 'PVE.keel.ScaleSetEdit';
        if (name === null) {
            me.edit(cls, { index: null });
            return;
        }
        me.loadSettings(function () {
            var index = me.indexOf(kind, name);
            if (index < 0) {
                Ext.Msg.alert(gettext('Error'), Ext.String.format(gettext('{0} is not in the config file'),
                    Ext.htmlEncode(name)));
                return;
            }
            Ext.create(cls, {
                settings: me.settings, secretsState: me.secretsState, stamp: me.stamp, index: index,
                onDone: function () { me.loadSettings(); },
            }).show();
        });
    },

    // POST /api/runners/scale-sets/<name>/<action>, after a confirmation for pause and drain.
    control: function (name, action, question) {
        var me = this;
        var go = function () {
            PVE.keel.Api.request({
                url: '/api/runners/scale-sets/' + encodeURIComponent(name) + '/' + action, method: 'POST',
                jsonData: {}, waitMsgTarget: me,
                success: function () { me.poller.tick(); },        // the new state at once
                failure: function (error) { PVE.keel.Api.alert(error); },
            });
        };
        if (!question) {
            go();
            return;
        }
        Ext.Msg.confirm(gettext('Confirm'), Ext.String.format(question, '<b>' + Ext.htmlEncode(name) + '</b>'),
            function (answer) {
                if (answer === 'yes') {
                    go();
                }
            });
    },

    removeItem: function (kind, name) {
        var me = this;
        var what = kind === 'provider' ? gettext('provider') : gettext('scale set');
        Ext.Msg.confirm(gettext('Confirm'), Ext.String.format(
            gettext('Remove {0} {1}? Its idle runners are removed; busy ones finish their job first.'),
            what, '<b>' + Ext.htmlEncode(name) + '</b>'), function (answer) {
            if (answer !== 'yes') {
                return;
            }
            me.loadSettings(function () {
                var settings = Ext.clone(me.settings);
                var key = kind === 'provider' ? 'providers' : 'scale_sets';
                settings[key] = (settings[key] || []).filter(function (x) { return x.name !== name; });
                PVE.keel.Api.request({
                    url: '/api/runners/settings', method: 'PUT',
                    jsonData: { settings: settings, stamp: me.stamp },
                    waitMsgTarget: me,
                    success: function () { me.loadSettings(); },
                    failure: function (error) { PVE.keel.Api.alert(error); },
                });
            });
        });
    },

    onError: function (error) {
        this.down('#notice').showError(error);
    },

    onStatus: function (data) {
        var me = this;
        me.waitPoller.start();           // with the first answer: the charts come at once
        me.activityPoller.start();
        var U = PVE.keel.RunnersUtil;
        var notice = me.down('#notice');
        var where = me.down('#where');
        if (!data.enabled) {
            notice.showWarning(Ext.htmlEncode(gettext('No runners are configured: set GitHub, add a provider ' +
                'and a scale set.')) + (data.error ? ' ' + Ext.htmlEncode(data.error) : ''));
        } else if (!data.active && data.error) {
            notice.showError({ status: 500, message: gettext('The runners cannot start') + ': ' + data.error });
        } else if (data.remote) {
            notice.showWarning(Ext.String.format(gettext('The runners run on the leader, {0}: shown as it ' +
                'reported them {1}. Settings changed here apply there.'),
                Ext.htmlEncode(data.node || data.leader_node || ''), PVE.keel.Render.ago(data.time)));
        } else if (!data.active) {
            notice.showWarning(Ext.String.format(gettext('The runners run on the leader, {0}: open the web UI of ' +
                'that node to see them.'), Ext.htmlEncode(data.leader_node || gettext('no node'))));
        } else if (data.github_state && data.github_state.state === 'DEGRADED') {
            notice.showWarning(Ext.String.format(gettext('GitHub is not answering since {0}: no runner is ' +
                'judged by its silence until it does.'), PVE.keel.Render.timestamp(data.github_state.since)));
        } else if (data.blocked_until) {
            notice.showWarning(Ext.String.format(gettext('GitHub asked Keel to wait until {0}: no call to it, ' +
                'and no runner judged, until then.'), PVE.keel.Render.timestamp(data.blocked_until)));
        } else if ((data.notices || []).length) {
            notice.showWarning(data.notices.map(Ext.htmlEncode).join('<br>'));
        } else {
            notice.clear();
        }
        if (data.config_error) {            // as on Rebalancing: the last good config runs
            notice.showWarning(Ext.htmlEncode(Ext.String.format(
                gettext('The config file was refused; the last good one runs: {0}'), data.config_error)));
        }
        where.update(data.github ? '<i class="fa fa-fw fa-github"></i> ' + Ext.htmlEncode(data.github) : '');
        U.merge(me.down('#scaleSets').getStore(), (data.scale_sets || []).map(function (s) {
            return { name: s.name, state: s.state, details: s.details, desired: s.desired, alive: s.alive,
                idle: s.idle, busy: s.busy, max: s.max, waiting: s.waiting || 0, priority: s.priority };
        }), function (s) { return s.name; });
        var queue = me.down('#queue');
        queue.setTitle(gettext('Waiting jobs') + (data.queued ? ' (' + data.queued + ')' : ''));
        U.merge(queue.getStore(), (data.queue || []).map(function (j) {
            return { job_id: String(j.job_id), scale_set: j.scale_set, since: j.since, age_s: j.age_s,
                repo: j.repo, workflow: j.workflow, name: j.name };
        }), function (j) { return j.job_id; });
        var providerSettings = {};
        ((me.settings || {}).providers || []).forEach(function (p) { providerSettings[p.name] = p; });
        U.merge(me.down('#providers').getStore(), (data.providers || []).map(function (p) {
            var details = (p.held_by || []).map(function (h) {
                return Ext.String.format(gettext('held by {0} (priority {1}) until {2}'), h.scale_set, h.priority,
                    PVE.keel.Render.timestamp(h.until));
            });
            if (p.last_refusal) {
                details.push(Ext.String.format(gettext('last refused {0}: {1}'), p.last_refusal.scale_set,
                    p.last_refusal.message));
            }
            var conf = providerSettings[p.name] || {};
            return { name: p.name, state: p.state, runners: p.runners, max_runners: p.max_runners,
                where: conf.url || gettext('this cluster'), details: details };
        }), function (p) { return p.name; });
        U.merge(me.down('#runners').getStore(), (data.runners || []).map(function (r) {
            return { name: r.name, scale_set: r.scale_set, vmid: r.vmid, node: r.node, state: r.state,
                phase: r.phase, age_s: r.age_s, job: r.job, reason: r.reason, job_url: r.job_url || null,
                job_repo: r.job_repo || null };
        }), function (r) { return r.name; });
    },

    onWaits: function (data) {
        var me = this;
        var key = Ext.encode(data);
        if (key === me.lastWaits) {
            return;                          // nothing new: the chart stays as drawn
        }
        me.lastWaits = key;
        me.down('#waits').update(me.chartHtml(data));
    },

    // Two charts, the jobs waiting and the runners busy, a line per scale set in the colour
    // of the wait chart's bars; made again only when the scale sets change.
    onActivity: function (data) {
        var me = this;
        var U = PVE.keel.RunnersUtil;
        var panel = me.down('#activity');
        var sets = data.scale_sets || {};
        var names = Object.keys(sets).sort();
        var key = names.join('\n');
        if (me.activityNames !== key) {
            me.activityNames = key;
            panel.removeAll();
            if (!names.length) {
                panel.add({ xtype: 'component', itemId: 'activityEmpty', flex: 1, padding: 10, cls: 'pmx-hint',
                    html: gettext('No job in this span.') });
                return;
            }
            var count = function (v) { return String(v); };
            var make = function (prefix, itemId, title) {
                var fields = [{ name: 'time', type: 'date', dateFormat: 'timestamp' }];
                var series = names.map(function (name, i) {
                    fields.push(prefix + i);
                    var line = PVE.keel.Chart.line(prefix + i, name, false, count);
                    line.colors = [U.palette[i % U.palette.length]];           // the line and its legend
                    line.style = Ext.apply({}, { strokeStyle: line.colors[0] }, line.style);
                    line.step = true;
                    return line;
                });
                return PVE.keel.Chart.make(me, itemId, title, fields, series, { integers: true });
            };
            panel.add(make('queued_', 'queuedChart', gettext('Jobs waiting for a runner')));
            panel.add(make('busy_', 'busyChart', gettext('Runners running a job')));
        }
        if (!names.length) {
            return;
        }
        var rows = { queued_: [], busy_: [] };
        sets[names[0]].forEach(function (point, k) {
            var q = { time: point[0] }, b = { time: point[0] };
            names.forEach(function (name, i) {
                var p = sets[name][k] || [point[0], null, null];
                q['queued_' + i] = p[1];
                b['busy_' + i] = p[2];
            });
            rows.queued_.push(q);
            rows.busy_.push(b);
        });
        var top = function (list) {      // whole steps on the axis: at least 0..2
            return Math.max(2, Math.max.apply(null, list.map(function (r) {
                return Math.max.apply(null, Object.keys(r).filter(function (f) { return f !== 'time'; })
                    .map(function (f) { return r[f] || 0; }));
            })));
        };
        [['queuedChart', rows.queued_], ['busyChart', rows.busy_]].forEach(function (c) {
            var chart = me.down('#' + c[0]);
            var axis = chart.getAxes()[0];
            var max = top(c[1]);
            max = max > 5 ? Math.ceil(max / 5) * 5 : max;       // whole numbers at every tick
            axis.setMaximum(max);
            axis.setMajorTickSteps(Math.min(max, 5));
            chart.getStore().loadData(c[1]);
        });
    },

    // A bar per job (oldest left), its height the wait; a colour per scale set; p50/p95 below.
    chartHtml: function (data) {
        var U = PVE.keel.RunnersUtil;
        var R = PVE.keel.Render;
        var jobs = data.jobs || [];
        if (!jobs.length) {
            return '<span class="pmx-hint">' + gettext('No job has started on a runner yet.') + '</span>';
        }
        var names = Object.keys(data.scale_sets || {});
        var colour = {};
        names.forEach(function (name, i) { colour[name] = U.palette[i % U.palette.length]; });
        var top = Math.max.apply(null, jobs.map(function (j) { return j.wait_s; }).concat([1]));
        var height = 120;
        // a time axis: each bar where its job was queued, the span's times below
        var t0 = jobs[0].queued_at, t1 = jobs[jobs.length - 1].queued_at;
        var span = Math.max(60, t1 - t0);               // at least a minute wide
        var format = span < 600 ? 'H:i:s' : span < 86400 ? 'H:i' : 'm-d H:i';
        var at = function (t) { return (2 + (t - t0) / span * 96).toFixed(2); };
        var bars = jobs.map(function (j) {
            var h = Math.max(2, Math.round(j.wait_s / top * height));
            var tip = Ext.String.format('{0} {1}: {2} ({3}, {4})', gettext('Job'), j.job_id, R.duration(j.wait_s),
                j.scale_set, Ext.Date.format(new Date(j.queued_at * 1000), 'H:i:s'));
            return '<div class="keel-wait-bar" data-qtip="' + Ext.htmlEncode(Ext.htmlEncode(tip)) + '" style="' +
                'position:absolute;bottom:0;left:' + at(j.queued_at) + '%;width:8px;height:' + h + 'px;' +
                'background-color:' + (colour[j.scale_set] || '#7f8c99') + ';"></div>';
        }).join('');
        var ticks = [0, 0.25, 0.5, 0.75, 1].map(function (f) {
            return '<span class="keel-wait-tick" style="position:absolute;left:' + at(t0 + f * span) + '%;' +
                'transform:translateX(' + (f === 0 ? '0' : f === 1 ? '-100%' : '-50%') + ');">' +
                Ext.Date.format(new Date((t0 + f * span) * 1000), format) + '</span>';
        }).join('');
        var legend = names.map(function (name) {
            var s = data.scale_sets[name];
            return '<span style="white-space:nowrap;margin-right:16px;">' +
                '<span style="display:inline-block;width:10px;height:10px;margin-right:4px;background-color:' +
                colour[name] + ';"></span>' + Ext.htmlEncode(name) + ': ' +
                Ext.String.format(gettext('{0} jobs, p50 {1}, p95 {2}, max {3}'), s.jobs, R.duration(s.p50_s),
                    R.duration(s.p95_s), R.duration(s.max_s)) + '</span>';
        }).join(' ');
        return '<div class="keel-waits" style="display:flex;align-items:flex-end;">' +
            '<div class="pmx-hint" style="height:' + height + 'px;display:flex;flex-direction:column;' +
            'justify-content:space-between;text-align:right;margin-right:6px;min-width:40px;">' +
            '<span>' + R.duration(top) + '</span><span>0s</span></div>' +
            '<div style="flex:1;"><div style="position:relative;height:' + height + 'px;overflow:hidden;' +
            'border-bottom:1px solid #888;border-left:1px solid #888;">' + bars + '</div>' +
            '<div class="pmx-hint keel-wait-axis" style="position:relative;height:16px;margin-top:2px;">' + ticks +
            '</div></div></div>' +
            '<div style="margin-top:8px;">' + legend + '</div>';
    },
});
