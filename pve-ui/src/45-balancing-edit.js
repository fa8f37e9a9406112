/*
 * The Rebalancing settings window (PVE.keel.BalancingEdit): the `balancing:` section of
 * keel.yaml in a form.  Every field is named by its path in the section (limits.moves);
 * an empty field leaves the key out, so Keel's default applies (shown greyed).  The
 * section is checked by POST /api/config/validate and each error is shown beside its
 * field; PUT /api/config writes it, keeping the rest of the file as it is.  A field left as
 * it was shown keeps the file's own value as written (75% stays 75%), and a section saved
 * unchanged is not written at all.  The Power saving tab edits balancing.power.
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
Ext.define('PVE.keel.BalancingEdit', {
    extend: 'Ext.window.Window',
    alias: 'widget.pveKeelBalancingEdit',
    title: gettext('Edit') + ': ' + gettext('Rebalancing'),
    iconCls: 'fa fa-balance-scale',
    itemId: 'keelBalancingEdit',
    modal: true,
    width: 720,
    layout: 'fit',

    // Fields whose value is a list, written one item per line or separated by commas.
    listFields: ['guests', 'ignore.guests', 'ignore.nodes', 'ignore.tags', 'ignore.pools'],
    // Fields written as text in the file but numbers when they look like one.
    numberish: ['threshold', 'margin', 'cooldown', 'power.hold', 'power.wake_timeout', 'power.wake_test_max_age'],
    // Fields of one item a line (docs/power.md's syntax), written as a list.
    lineFields: ['power.never_sleep', 'power.wake_all'],
    // Percentages (power's headroom lines): 75 in the field is "75%" in the file.
    percentFields: ['power.headroom.cpu', 'power.headroom.memory'],

    // nodes: the cluster's nodes (the Rebalancing panel's), for the nodes that may sleep
    nodes: [],

    initComponent: function () {
        var me = this;
        // Grey text in a field is only ever the default in force; an example is said under
        // the field, as a hint, so that it never reads as a value (issue 16, finding 7).
        var hint = function (example) {
            return example ? '<div class="pmx-hint keel-example">' + Ext.htmlEncode(gettext('Example') + ': ' +
                example) + '</div>' : '';
        };
        // what a field means, under it (and an example after it, if any)
        var note = function (meaning, example) {
            return '<div class="pmx-hint keel-note">' + Ext.htmlEncode(meaning + (example ? ' (' +
                gettext('Example') + ': ' + example + ')' : '')) + '</div>';
        };
        var text = function (name, label, help, example) {
            return { xtype: 'textfield', name: name, fieldLabel: label, emptyText: help || '',
                afterSubTpl: hint(example) };
        };
        var number = function (name, label, extra) {
            return Ext.apply({ xtype: 'numberfield', name: name, fieldLabel: label }, extra);
        };
        var combo = function (name, label, values) {
            return { xtype: 'combobox', name: name, fieldLabel: label, editable: false, queryMode: 'local',
                store: values, emptyText: gettext('Default') };
        };
        var area = function (name, label, help, example) {
            return { xtype: 'textarea', name: name, fieldLabel: label, emptyText: help, height: 70,
                afterSubTpl: hint(example) };
        };
        // one height for every tab, as PVE's tabbed windows, never taller than the browser's
        // window: a long tab scrolls and OK stays in reach
        me.height = Math.max(400, Math.min(700, Ext.Element.getViewportHeight() - 40));
        me.items = [{
            xtype: 'form',
            border: false,
            layout: 'fit',
            items: [{
                xtype: 'tabpanel',
                itemId: 'tabs',
                border: false,
                listeners: { tabchange: function () { me.remarkErrors(); } },
                defaults: { bodyPadding: 10, scrollable: 'y',
                    defaults: { anchor: '100%', labelWidth: 170, msgTarget: 'under' }, layout: 'anchor' },
                items: [{
                    title: gettext('General'),
                    itemId: 'general',
                    items: [
                        { xtype: 'checkbox', name: 'enable', fieldLabel: gettext('Automatic balancing'),
                          boxLabel: gettext('the leader applies plans by itself'), uncheckedValue: false,
                          inputValue: true },
                        combo('method', gettext('Method'), ['keel', 'bruteforce', 'topsis']),
                        combo('mode', gettext('Load'), ['used', 'assigned', 'psi']),
                        { xtype: 'fieldcontainer', fieldLabel: gettext('Resources (weights)'),
                          layout: 'hbox', defaults: { flex: 1, hideLabel: false, labelWidth: 55, margin: '0 8 0 0',
                              msgTarget: 'under', minValue: 0 },
                          items: [
                              number('resources.cpu', gettext('CPU')),
                              number('resources.memory', gettext('Memory')),
                              number('resources.disk', gettext('Disk')),
                          ] },
                        text('guests', gettext('Guest types'), 'vm (' + gettext('default') + ')',
                            'vm, ct: ' + gettext('containers too (they restart when moved)')),
                        text('threshold', gettext('Threshold'), '', '0.1 ' + gettext('or') + ' 10%'),
                        number('hold', gettext('Hold (rounds)'), { allowDecimals: false, minValue: 0 }),
                        text('margin', gettext('Margin'), '', '0.1 ' + gettext('or') + ' 10%'),
                        text('cooldown', gettext('Cool-down'), '', '1h, 30m'),
                    ],
                }, {
                    title: gettext('Limits and schedule'),
                    itemId: 'limits',
                    items: [
                        number('limits.moves', gettext('Moves per plan'), { allowDecimals: false, minValue: 0 }),
                        number('limits.gib', gettext('GiB per plan'), { minValue: 0 }),
                        number('limits.concurrent', gettext('Migrations at once'), { allowDecimals: false, minValue: 1 }),
                        number('limits.per_node', gettext('Per node at once'), { allowDecimals: false, minValue: 1 }),
                        text('schedule.timezone', gettext('Time zone'), 'UTC (' + gettext('default') + ')',
                            'Europe/Vienna'),
                        area('schedule.windows', gettext('Allowed hours'), gettext('any time (default)'),
                            gettext('one window a line: mon-fri 22:00-06:00')),
                    ],
                }, {
                    title: gettext('Rules'),
                    itemId: 'rules',
                    items: [
                        text('ignore.guests', gettext('Ignore guests'), gettext('none (default)'),
                            gettext('VMIDs or names, comma separated: 101, build1')),
                        text('ignore.nodes', gettext('Ignore nodes'), gettext('none (default)'), 'pve3, pve4'),
                        text('ignore.tags', gettext('Ignore tags'), gettext('none (default)'), 'keel-ignore'),
                        text('ignore.pools', gettext('Ignore pools'), gettext('none (default)'), 'ci'),
                        area('pin', gettext('Pins'), gettext('none (default)'),
                            gettext('a guest and its nodes a line: 101: pve1, pve2')),
                        area('affinity', gettext('Keep together'), gettext('none (default)'),
                            gettext('a group a line: web: 101, 102 (! after the name: may be broken)')),
                        area('anti_affinity', gettext('Keep apart'), gettext('none (default)'),
                            gettext('a group a line: db: 110, 111 (! after the name: may be broken)')),
                    ],
                }, {
                    title: gettext('Power saving'),
                    itemId: 'power',
                    items: [
                        { xtype: 'combobox', name: 'power.mode', fieldLabel: gettext('Mode'), editable: false,
                          queryMode: 'local', emptyText: gettext('Default'),
                          store: [['off', gettext('off: never power a node off')],
                              ['recommend', gettext('recommend: plan and show, a person acts')],
                              ['automatic', gettext('automatic: the leader sleeps and wakes nodes')]] },
                        { xtype: 'combobox', name: 'power.nodes', fieldLabel: gettext('Nodes that may sleep'),
                          multiSelect: true, editable: false, queryMode: 'local', store: [],
                          emptyText: gettext('none (default): no node sleeps'),
                          afterSubTpl: note(gettext('no node sleeps unless it is chosen here')) },
                        number('power.min_awake', gettext('Nodes always awake'), { allowDecimals: false, minValue: 1 }),
                        { xtype: 'checkbox', name: 'power.allow_bare_majority', fieldLabel: gettext('Bare majority'),
                          boxLabel: gettext('the awake nodes may hold just a majority of corosync\'s votes'),
                          uncheckedValue: false, inputValue: true },
                        { xtype: 'fieldcontainer', fieldLabel: gettext('Headroom (%)'),
                          layout: 'hbox', defaults: { flex: 1, hideLabel: false, labelWidth: 65, margin: '0 8 0 0',
                              msgTarget: 'under', minValue: 1, maxValue: 100 },
                          items: [
                              number('power.headroom.cpu', gettext('CPU')),
                              number('power.headroom.memory', gettext('Memory')),
                          ] },
                        number('power.headroom.spare_nodes', gettext('Spare nodes (N+1)'),
                            { allowDecimals: false, minValue: 0 }),
                        Ext.apply(text('power.hold', gettext('Quiet for')), { afterSubTpl: note(gettext(
                            'how long the plan must say SLEEP before a node sleeps (automatic mode)'), '45m') }),
                        area('power.never_sleep', gettext('Never sleep'), gettext('none (default)'),
                            gettext('one window a line: mon-fri 07:00-19:00')),
                        area('power.wake_all', gettext('Wake all at'), gettext('none (default)'),
                            gettext('one moment a line: mon-fri 07:30 (a boot time before the nodes are needed)')),
                        text('power.timezone', gettext('Time zone'), '', 'Europe/Berlin'),
                        number('power.watts_per_node', gettext('Watts per node'), { minValue: 0,
                            afterSubTpl: note(gettext('what a node draws awake and saves asleep, for the energy ' +
                                'estimate')) }),
                        Ext.apply(text('power.wake_timeout', gettext('Wake timeout')), { afterSubTpl: note(gettext(
                            'how long a node may take to rejoin the cluster after Wake-on-LAN before it is reported'), '15m') }),
                        Ext.apply(text('power.wake_test_max_age', gettext('Wake test valid for')), {
                            afterSubTpl: note(gettext('a node sleeps only if a wake by Keel brought it back within ' +
                                'this time (Wake test); off: no test needed'), '30d') }),
                    ],
                }],
            }],
            dockedItems: [{
                xtype: 'component', dock: 'top', itemId: 'formError', hidden: true, padding: '8 10',
            }],
        }];
        // As Proxmox's edit windows: Help on the left, then OK and Reset (the window's X cancels).
        me.buttons = [PVE.keel.Render.helpButton('ui.md#the-rebalancing-tab'), '->', {
            text: gettext('OK'), itemId: 'ok', handler: function () { me.save(); },
        }, {
            text: gettext('Reset'), itemId: 'reset', handler: function () { me.fill(); },
        }];
        me.callParent();
        me.on('afterrender', function () { me.load(); });
    },

    load: function () {
        var me = this;
        PVE.keel.Api.request({
            url: '/api/config', waitMsgTarget: me,
            success: function (data) {
                me.section = (data.sections && data.sections.balancing) || {};
                me.effective = data.balancing || {};
                me.fill();
            },
            failure: function (error) {
                PVE.keel.Api.alert(error);
                me.close();
            },
        });
    },

    fields: function () {
        return this.down('form').getForm().getFields().getRange();
    },

    // The form from the section as written; defaults in force shown as empty text.
    fill: function () {
        var me = this, raw = me.section || {}, eff = me.effective || {};
        var defaults = {
            method: eff.method, mode: eff.mode, threshold: eff.threshold, hold: eff.hold, margin: eff.margin,
            cooldown: eff.cooldown_s !== undefined ? eff.cooldown_s + 's' : '',
            'resources.cpu': eff.weights && eff.weights.cpu, 'resources.memory': eff.weights && eff.weights.memory,
            'resources.disk': eff.weights && eff.weights.disk,
            'limits.moves': eff.limits && eff.limits.moves, 'limits.concurrent': eff.limits && eff.limits.concurrent,
            'limits.per_node': eff.limits && eff.limits.per_node,
            'limits.gib': eff.limits && eff.limits.bytes / 1073741824,
            enable: !!eff.enable,
        };
        var power = eff.power || {};
        Ext.apply(defaults, {
            'power.mode': power.mode, 'power.min_awake': power.min_awake,
            'power.allow_bare_majority': !!power.allow_bare_majority,
            'power.headroom.cpu': power.cpu_line !== undefined ? me.percent(power.cpu_line) : undefined,
            'power.headroom.memory': power.memory_line !== undefined ? me.percent(power.memory_line) : undefined,
            'power.headroom.spare_nodes': power.spare_nodes,
            'power.hold': power.hold_s !== undefined ? me.duration(power.hold_s) : undefined,
            'power.wake_timeout': power.wake_timeout_s !== undefined ? me.duration(power.wake_timeout_s) : undefined,
            'power.timezone': power.timezone,
            'power.wake_test_max_age': power.wake_test_max_age_s === null ? 'off'
                : power.wake_test_max_age_s !== undefined ? me.duration(power.wake_test_max_age_s) : undefined,
            'power.watts_per_node': power.watts ? power.watts['default'] : undefined,
        });
        // the nodes that may sleep: the cluster's, and any the file names besides
        var named = me.lookup(raw, 'power.nodes');
        var choices = Ext.Array.unique((me.nodes || []).concat(Array.isArray(named) ? named.map(String)
            : named ? [String(named)] : [])).sort();
        me.down('field[name="power.nodes"]').getStore().loadData(choices.map(function (n) { return [n]; }));
        me.showWattsPerNode(me.lookup(raw, 'power.watts_per_node'));
        me.fieldErrors = {};
        me.shown = {};
        me.fields().forEach(function (field) {
            var name = field.getName();
            field.clearInvalid();
            var value = me.toField(name, me.lookup(raw, name));
            if (field.isCheckbox) {
                field.setValue(value === null ? !!defaults[name] : !!value);
            } else {
                if (defaults[name] !== undefined && defaults[name] !== null && field.setEmptyText) {
                    field.setEmptyText(String(defaults[name]) + ' (' + gettext('default') + ')');
                }
                field.setValue(value === null ? null : value);
            }
            me.shown[name] = Ext.encode(field.getValue());     // as shown: left so, the file's value stays
        });
        me.showFormError(null);
    },

    // 0.75 -> 75 (the headroom lines, in %)
    percent: function (fraction) {
        return Math.round(Number(fraction) * 100 * 1000) / 1000;
    },

    // 1800 -> "30m", 600 -> "10m", 90 -> "90s" (the config's own duration syntax)
    duration: function (seconds) {
        var s = Number(seconds);
        if (s && s % 86400 === 0) {
            return s / 86400 + 'd';
        }
        if (s && s % 3600 === 0) {
            return s / 3600 + 'h';
        }
        return s && s % 60 === 0 ? s / 60 + 'm' : s + 's';
    },

    // watts_per_node as a mapping: the field is its `default`; the other nodes' figures are
    // kept as written, and said under the field.
    showWattsPerNode: function (raw) {
        var field = this.down('field[name="power.watts_per_node"]');
        var others = raw && typeof raw === 'object' ? Object.keys(raw).filter(function (k) { return k !== 'default'; })
            : [];
        var text = others.length ? Ext.String.format(gettext('the default; per node in the file (kept): {0}'),
            others.map(function (n) { return n + ' ' + raw[n] + ' W'; }).join(', '))
            : gettext('what a node draws awake and saves asleep, for the energy estimate');
        var hintEl = field.rendered && field.el.down('.keel-note');
        if (hintEl) {
            hintEl.setHtml(Ext.htmlEncode(text));
        } else {
            field.afterSubTpl = '<div class="pmx-hint keel-note">' + Ext.htmlEncode(text) + '</div>';
        }
    },

    lookup: function (data, path) {
        var value = data;
        path.split('.').forEach(function (key) {
            value = value !== null && value !== undefined && typeof value === 'object' ? value[key] : undefined;
        });
        return value === undefined ? null : value;
    },

    // A value from the file as the field shows it.
    toField: function (name, value) {
        if ((name === 'power.mode' || name === 'power.wake_test_max_age') && value === false) {
            return 'off';                     // a bare `off` in YAML reads as false
        }
        if (value === null) {
            return null;
        }
        if (this.lineFields.indexOf(name) >= 0) {
            return Array.isArray(value) ? value.join('\n') : String(value);
        }
        if (this.percentFields.indexOf(name) >= 0) {
            var m = /^\s*(-?[\d.]+)\s*%\s*$/.exec(String(value));
            if (m) {
                return Number(m[1]);
            }
            var n = typeof value === 'boolean' || String(value).trim() === '' ? NaN : Number(value);
            return isFinite(n) && n <= 1 ? this.percent(n) : value;     // a fraction (0.75) in %
        }
        if (name === 'power.nodes') {
            return Array.isArray(value) ? value.map(String) : [String(value)];
        }
        if (name === 'power.watts_per_node' && typeof value === 'object') {
            return value['default'] === undefined ? null : value['default'];
        }
        if (this.listFields.indexOf(name) >= 0) {
            return Array.isArray(value) ? value.join(', ') : String(value);
        }
        if (name === 'pin') {
            return Object.keys(value).map(function (guest) {
                var nodes = value[guest];
                return guest + ': ' + (Array.isArray(nodes) ? nodes.join(', ') : nodes);
            }).join('\n');
        }
        if (name === 'affinity' || name === 'anti_affinity') {
            return (Array.isArray(value) ? value : []).map(function (group, i) {
                return (group.name || name + '-' + (i + 1)) + (group.strict === false ? '!' : '') + ': ' +
                    (group.guests || []).join(', ');
            }).join('\n');
        }
        if (name === 'schedule.windows') {
            return (Array.isArray(value) ? value : []).map(function (w) {
                var days = Array.isArray(w.days) ? w.days.join(',') : w.days || 'mon-sun';
                return days + ' ' + (w.from || '00:00') + '-' + (w.to || '24:00');
            }).join('\n');
        }
        return value;
    },

    // A field's value as the file holds it; undefined leaves the key out.
    fromField: function (name, value) {
        var split = function (text) {
            return String(text).split(/[,\s]+/).filter(function (x) { return x !== ''; });
        };
        var lines = function (text) {
            return String(text).split('\n').map(function (l) { return l.trim(); })
                .filter(function (l) { return l !== ''; });
        };
        if (value === null || value === undefined || value === '' || (Array.isArray(value) && !value.length)) {
            return undefined;
        }
        if (this.listFields.indexOf(name) >= 0) {
            return split(value);
        }
        if (this.lineFields.indexOf(name) >= 0) {
            var items = lines(value);
            return items.length ? items : undefined;
        }
        if (this.percentFields.indexOf(name) >= 0) {
            return typeof value === 'number' ? value + '%' : value;
        }
        if (this.numberish.indexOf(name) >= 0) {
            var text = String(value).trim();
            return /^-?\d+(\.\d+)?$/.test(text) ? Number(text) : text;
        }
        if (name === 'pin') {
            var pins = {};
            lines(value).forEach(function (line) {
                var at = line.indexOf(':');
                pins[(at < 0 ? line : line.substr(0, at)).trim()] = at < 0 ? [] : split(line.substr(at + 1));
            });
            return pins;
        }
        if (name === 'affinity' || name === 'anti_affinity') {
            return lines(value).map(function (line) {
                var at = line.indexOf(':');
                var head = at < 0 ? '' : line.substr(0, at).trim();
                var group = { guests: split(at < 0 ? line : line.substr(at + 1)) };
                if (head.charAt(head.length - 1) === '!') {
                    group.strict = false;
                    head = head.substr(0, head.length - 1).trim();
                }
                if (head) {
                    group.name = head;
                }
                return group;
            });
        }
        if (name === 'schedule.windows') {
            return lines(value).map(function (line) {
                var m = /^(\S+)\s+(\S+)-(\S+)$/.exec(line);
                return m ? { days: m[1], from: m[2], to: m[3] } : { days: line };
            });
        }
        return value;
    },

    // The section as the form says: the file's own keys the form does not show are kept.
    section: null,
    values: function () {
        var me = this;
        var out = Ext.clone(me.section || {});
        me.fields().forEach(function (field) {
            var name = field.getName();
            if (me.shown && me.shown[name] === Ext.encode(field.getValue())) {
                return;                        // as it was shown: the file's own value stays as written
            }
            var value = field.isCheckbox ? field.getValue() : me.fromField(name, field.getValue());
            var path = name.split('.');
            var written = me.lookup(out, name);
            if (name === 'power.watts_per_node' && written !== null && typeof written === 'object') {
                path.push('default');          // a mapping per node: its default changes, the rest stays
            }
            var holder = out;
            for (var i = 0; i < path.length - 1; i++) {
                if (typeof holder[path[i]] !== 'object' || holder[path[i]] === null) {
                    holder[path[i]] = {};
                }
                holder = holder[path[i]];
            }
            var key = path[path.length - 1];
            if (value === undefined) {
                delete holder[key];
            } else {
                holder[key] = value;
            }
        });
        // a mapping the form emptied goes (one the file had empty stays)
        ['power.headroom', 'power.watts_per_node', 'resources', 'limits', 'ignore', 'schedule', 'power']
            .forEach(function (key) {
                var value = me.lookup(out, key), path = key.split('.');
                var holder = path.length > 1 ? me.lookup(out, path[0]) : out;
                if (value && typeof value === 'object' && !Array.isArray(value) && !Object.keys(value).length &&
                        me.lookup(me.section || {}, key) === null) {
                    delete holder[path[path.length - 1]];
                }
            });
        if (out.enable === false && !('enable' in (me.section || {}))) {
            delete out.enable;               // the default: leave the file as it was
        }
        return out;
    },

    // The same data, whatever the order of the keys.
    sameAs: function (a, b) {
        var canon = function (v) {
            if (Array.isArray(v)) {
                return v.map(canon);
            }
            if (v && typeof v === 'object') {
                var o = {};
                Object.keys(v).sort().forEach(function (k) { o[k] = canon(v[k]); });
                return o;
            }
            return v;
        };
        return Ext.encode(canon(a)) === Ext.encode(canon(b));
    },

    // balancing.limits.moves -> the field limits.moves; balancing.affinity[0].guests -> affinity.
    fieldFor: function (path) {
        var me = this;
        var rest = path.replace(/^balancing\./, '').replace(/\[\d+\]/g, '');
        var best = null;
        me.fields().forEach(function (field) {
            var name = field.getName();
            if ((rest === name || rest.indexOf(name + '.') === 0) && (!best || name.length > best.getName().length)) {
                best = field;
            }
        });
        if (!best && rest.indexOf('schedule.') === 0) {
            best = me.down('field[name="schedule.windows"]');
        }
        return best;
    },

    // ExtJS hides the message of a field that was marked while its tab was not shown: the
    // marks are made again on the tab shown, so that every error of every field is seen.
    remarkErrors: function () {
        var me = this, tab = me.down('#tabs').getActiveTab();
        Ext.Object.each(me.fieldErrors || {}, function (name, item) {
            if (item.field.up('panel[title]') === tab) {
                item.field.clearInvalid();
                item.field.markInvalid(item.list);
            }
        });
    },

    showFormError: function (html) {
        var box = this.down('#formError');
        if (html) {
            box.update('<i class="fa fa-fw critical fa-times-circle"></i> ' + html);
            box.show();
        } else {
            box.hide();
        }
    },

    // Every problem of every field, each on its own line under the field (several paths
    // land on one field: the schedule's windows, a group's guests), the rest above the form.
    showErrors: function (message, errors) {
        var me = this, unplaced = [], first = null, marked = [], byField = {};
        me.fields().forEach(function (field) { field.clearInvalid(); });
        Ext.Object.each(errors || {}, function (path, problem) {
            var field = me.fieldFor(path);
            if (field) {
                var name = field.getName();
                var where = path.replace(/^balancing\./, '');
                var label = where === name ? '' : where.substr(where.indexOf(name) === 0 ? name.length : 0)
                    .replace(/^\./, '').replace(/^\[(\d+)\]$/, function (all, i) {      // never_sleep[0]
                        return Ext.String.format(gettext('line {0}'), Number(i) + 1);
                    }) + ': ';
                (byField[name] = byField[name] || { field: field, list: [] }).list.push(
                    Ext.htmlEncode(label + problem));
                if (marked.indexOf(field) < 0) {
                    marked.push(field);
                }
            } else {
                unplaced.push(Ext.htmlEncode(path + ': ' + problem));
            }
        });
        me.fieldErrors = byField;
        Ext.Object.each(byField, function (name, item) {
            item.field.markInvalid(item.list);
        });
        me.fields().forEach(function (field) {       // the first in the form's order
            if (!first && marked.indexOf(field) >= 0) {
                first = field;
            }
        });
        if (first) {
            me.down('#tabs').setActiveTab(first.up('panel[title]'));
        }
        me.remarkErrors();
        me.showFormError(unplaced.length ? unplaced.join('<br>')
            : !first ? Ext.htmlEncode(message) : null);
    },

    save: function () {
        var me = this;
        var section = me.values();
        if (me.sameAs(section, me.section || {})) {
            me.close();                        // nothing changed: nothing is written
            return;
        }
        PVE.keel.Api.request({
            url: '/api/config/validate', method: 'POST', jsonData: { balancing: section }, waitMsgTarget: me,
            success: function (check) {
                if (!check.valid) {
                    me.showErrors(check.message, check.errors);
                    return;
                }
                PVE.keel.Api.request({
                    url: '/api/config', method: 'PUT', jsonData: { balancing: section }, waitMsgTarget: me,
                    success: function () {
                        me.fireEvent('saved', me, section);
                        me.close();
                    },
                    failure: function (error) { me.showErrors(error.message, error.errors); },
                });
            },
            failure: function (error) {
                if (error.errors && Object.keys(error.errors).length) {
                    me.showErrors(error.message, error.errors);
                } else {
                    PVE.keel.Api.alert(error);
                }
            },
        });
    },
});
