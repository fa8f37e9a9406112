/*
 * PVE.keel.Render: the renderers both Keel panels share (load bars, health icons,
 * durations, sizes, guests, tasks).  Every value from the helper is HTML-encoded.
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
Ext.define('PVE.keel.Render', {
    singleton: true,

    // '<i class="fa fa-fw good fa-check"></i>' and friends (PVE's health classes, both themes).
    healthIcon: function (state) {
        var icon = { good: 'good fa-check-circle', warning: 'warning fa-exclamation-circle',
            critical: 'critical fa-times-circle', busy: 'fa-refresh fa-spin', off: 'faded fa-circle-o' }[state]
            || 'faded fa-question-circle';
        return '<i class="fa fa-fw ' + icon + '"></i>';
    },

    health: function (state, text) {
        return PVE.keel.Render.healthIcon(state) + ' ' + Ext.htmlEncode(text === undefined ? '' : text);
    },

    percent: function (frac, digits) {
        if (frac === null || frac === undefined || isNaN(frac)) {
            return '-';
        }
        return (frac * 100).toFixed(digits === undefined ? 0 : digits) + '%';
    },

    // "41% -> 35%" for a before and after, one figure when they agree.
    change: function (before, after) {
        var R = PVE.keel.Render;
        if (after === undefined || after === null || R.percent(before) === R.percent(after)) {
            return R.percent(before);
        }
        return R.percent(before) + ' <i class="fa fa-long-arrow-right"></i> ' + R.percent(after);
    },

    size: function (bytes) {
        if (bytes === null || bytes === undefined) {
            return '-';
        }
        var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'], value = bytes, i = 0;
        while (value >= 1024 && i < units.length - 1) {
            value /= 1024;
            i++;
        }
        return (i === 0 ? value : value.toFixed(2)) + ' ' + units[i];     // PVE's format_size: 2 decimals
    },

    // PVE's usage renderer: "45.00% (7.20 GiB of 16.00 GiB)"; CPU: "45.00% of 8 CPU(s)".
    usage: function (frac, used, total) {
        var R = PVE.keel.Render;
        if (frac === null || frac === undefined || isNaN(frac)) {
            return '-';
        }
        return (frac * 100).toFixed(2) + '% (' + R.size(used) + ' ' + gettext('of') + ' ' + R.size(total) + ')';
    },

    cpuUsage: function (frac, cpus) {
        if (frac === null || frac === undefined || isNaN(frac)) {
            return '-';
        }
        return Ext.String.format(gettext('{0}% of {1}'), (frac * 100).toFixed(2), cpus) + ' ' + gettext('CPU(s)');
    },

    // A small line of `values` (0..1 scale given by `max`) with a dashed line at `mark`, as
    // inline SVG in the text colour (both themes); `dots`: indexes to mark (applied jobs).
    sparkline: function (values, max, mark, dots, width, height) {
        width = width || 120;
        height = height || 18;
        if (!values.length) {
            return '';
        }
        max = Math.max(max || 0, mark || 0, Math.max.apply(null, values)) || 1;
        var x = function (i) { return values.length === 1 ? width : (i * width / (values.length - 1)); };
        var y = function (v) { return (height - 1) - (v / max) * (height - 2); };
        var points = values.map(function (v, i) { return x(i).toFixed(1) + ',' + y(v).toFixed(1); }).join(' ');
        var svg = '<svg class="keel-sparkline" width="' + width + '" height="' + height + '" viewBox="0 0 ' +
            width + ' ' + height + '" style="vertical-align: middle; overflow: visible">';
        if (mark) {
            svg += '<line x1="0" x2="' + width + '" y1="' + y(mark).toFixed(1) + '" y2="' + y(mark).toFixed(1) +
                '" stroke="currentColor" stroke-opacity="0.5" stroke-dasharray="3,2"/>';
        }
        svg += '<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="' + points + '"/>';
        (dots || []).forEach(function (i) {
            svg += '<circle cx="' + x(i).toFixed(1) + '" cy="' + y(values[i]).toFixed(1) + '" r="2.5" ' +
                'fill="currentColor"/>';
        });
        return svg + '</svg>';
    },

    duration: function (seconds) {
        if (seconds === null || seconds === undefined) {
            return '-';
        }
        var s = Math.round(seconds);
        if (s < 60) {
            return s + 's';
        }
        if (s < 3600) {
            return Math.floor(s / 60) + 'm ' + (s % 60 ? (s % 60) + 's' : '');
        }
        if (s < 86400) {
            return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
        }
        return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
    },

    // A Unix time as local date and time.
    timestamp: function (t) {
        if (!t) {
            return '-';
        }
        return Ext.Date.format(new Date(t * 1000), 'Y-m-d H:i:s');
    },

    // "3m ago" for a recent Unix time.
    ago: function (t, now) {
        if (!t) {
            return '-';
        }
        var seconds = Math.max(0, (now || Date.now() / 1000) - t);
        return Ext.String.format(gettext('{0} ago'), PVE.keel.Render.duration(seconds));
    },

    guest: function (vmid, name, type) {
        var icon = type === 'lxc' || type === 'ct' ? 'fa-cube' : 'fa-desktop';
        return '<i class="fa fa-fw ' + icon + '"></i> ' + Ext.htmlEncode(vmid) +
            (name ? ' (' + Ext.htmlEncode(name) + ')' : '');
    },

    node: function (name) {
        return '<i class="fa fa-fw fa-building"></i> ' + Ext.htmlEncode(name);
    },

    // A panel's long title wraps rather than being cut off (its header grows).
    wrapTitle: function (panel) {
        var header = panel.getHeader && panel.getHeader();
        var title = header && header.getTitle && header.getTitle();
        var text = title && title.getEl() && title.getEl().down('.x-title-text');
        if (text) {
            text.setStyle({ whiteSpace: 'normal', overflow: 'visible' });
            title.getEl().setStyle({ overflow: 'visible' });
        }
    },

    // A Help button as PVE puts one in its panels (right of the toolbar), opening Keel's own
    // documentation as keel-web serves it (/docs/<page>).
    helpButton: function (page) {
        return {
            xtype: 'button', text: gettext('Help'), iconCls: 'fa fa-question-circle', itemId: 'help',
            tooltip: gettext('Keel\'s documentation for this panel'),
            handler: function () {
                window.open(PVE.keel.Api.baseUrl() + '/docs/' + page, '_blank', 'noopener');
            },
        };
    },

    // A UPID as a link that opens PVE's task viewer (PVE.keel.Render.openTask).
    task: function (upid) {
        if (!upid) {
            return '';
        }
        return '<a href="#" class="keel-task" data-upid="' + Ext.htmlEncode(upid) + '">' +
            '<i class="fa fa-fw fa-list-alt"></i> ' + gettext('Task') + '</a>';
    },

    openTask: function (upid) {
        if (Ext.ClassManager.get('Proxmox.window.TaskViewer')) {
            Ext.create('Proxmox.window.TaskViewer', { upid: upid }).show();
        }
    },

    // Opens the task viewer for clicks on task links inside `component`'s element.
    wireTaskLinks: function (component) {
        component.on('afterrender', function () {
            component.getEl().on('click', function (event, target) {
                event.preventDefault();
                PVE.keel.Render.openTask(target.getAttribute('data-upid'));
            }, null, { delegate: 'a.keel-task' });
        });
    },

    // A store whose records are keyed by `idProperty` (store.getById(key)), for mergeStore.
    store: function (fields, idProperty, extra) {
        var model = Ext.define(null, { extend: 'Ext.data.Model', fields: fields, idProperty: idProperty });
        return Ext.create('Ext.data.Store', Ext.apply({ model: model }, extra));
    },

    // Updates `store` in place from `rows` (keyed by `idField`): changed records are set,
    // new ones added, gone ones removed; nothing is re-created, so a refresh does not flicker.
    mergeStore: function (store, rows, idField) {
        var seen = {};
        var added = [];
        rows.forEach(function (row) {
            var id = row[idField];
            seen[id] = true;
            var rec = store.getById(id);
            if (!rec) {
                added.push(row);
                return;
            }
            var changes = {};
            var changed = false;
            Ext.Object.each(row, function (key, value) {
                if (!Ext.Object.equals({ v: rec.get(key) }, { v: value })) {
                    changes[key] = value;
                    changed = true;
                }
            });
            if (changed) {
                rec.set(changes, { dirty: false });
            }
        });
        var gone = [];
        store.each(function (rec) {
            if (!seen[rec.getId()]) {
                gone.push(rec);
            }
        });
        if (gone.length) {
            store.remove(gone);
        }
        if (added.length) {
            store.add(added);
        }
    },

    // A grid column with a progress bar for a 0..1 field (the theme's own progress bar).
    // extra.text(record) gives the bar's text, extra.health(record) 'warning' or 'critical'
    // for PVE's own coloured bars (.x-progress.warning / .critical, both themes).
    loadColumn: function (text, dataIndex, extra) {
        extra = extra || {};
        var textOf = extra.barText, healthOf = extra.health;
        delete extra.barText;
        delete extra.health;
        return Ext.apply({
            text: text,
            dataIndex: dataIndex,
            xtype: 'widgetcolumn',
            width: 150,
            widget: {
                xtype: 'progressbarwidget',
                textTpl: ['{percent:number("0")}%'],
            },
            onWidgetAttach: function (column, widget, record) {
                var value = record.get(dataIndex);
                widget.setHidden(value === null || value === undefined);
                if (textOf) {
                    widget.setText(textOf(record));
                }
                var health = healthOf ? healthOf(record) : null;
                ['warning', 'critical'].forEach(function (cls) {
                    if (cls === health) {
                        widget.addCls(cls);
                    } else {
                        widget.removeCls(cls);
                    }
                });
            },
        }, extra);
    },
});

// Charts as PVE's RRD panels draw them (ExtJS cartesian charts): both tabs use these.
Ext.define('PVE.keel.Chart', {
    singleton: true,

    // Chart colours as PVE's own charts take them: the widget toolkit's CSS variables
    // (--pwt-text-color, --pwt-chart-grid-stroke; its dark theme sets them), else the
    // owner's text colour.  No colour is set here.
    themeColor: function (owner, variable) {
        var value = window.getComputedStyle(document.documentElement).getPropertyValue(variable || '--pwt-text-color');
        if (value && value.trim()) {
            // as rgb(): the charts' colour parser knows no hsl()
            var probe = document.createElement('span');
            probe.style.color = value.trim();
            document.body.appendChild(probe);
            var rgb = window.getComputedStyle(probe).color;
            document.body.removeChild(probe);
            return rgb;
        }
        var el = owner && owner.getEl ? owner.getEl() : null;
        return el ? window.getComputedStyle(el.dom).color : '#000';
    },

    // extra: maximum (of the left axis), percent (its labels as %, else 2 decimals, or
    // whole numbers with integers), chart (more of the chart's config).
    make: function (owner, itemId, title, fields, series, extra) {
        var me = this, color = me.themeColor(owner);
        extra = extra || {};
        var stroke = window.getComputedStyle(document.documentElement).getPropertyValue('--pwt-chart-grid-stroke');
        var grid = stroke && stroke.trim() ? { strokeStyle: me.themeColor(owner, '--pwt-chart-grid-stroke') } : true;
        var label = extra.percent ? function (axis, v) { return Math.round(v * 100) + '%'; }
            : extra.integers ? function (axis, v) { return Number(v) % 1 ? '' : String(Number(v)); }
            : function (axis, v) { return Number(v).toFixed(2); };
        return Ext.apply({
            xtype: 'cartesian',
            itemId: itemId,
            flex: 1,
            margin: '0 5 0 0',
            store: Ext.create('Ext.data.Store', { fields: fields, data: [] }),
            background: 'rgba(0, 0, 0, 0)',           // the panel's own background, both themes
            insetPadding: { top: 24, left: 5, right: 10, bottom: 5 },
            legend: { docked: 'bottom', style: { background: 'transparent' } },   // the panel's, both themes
            interactions: ['crosszoom'],
            sprites: [{ type: 'text', text: title, x: 10, y: 14, fontSize: 12, fillStyle: color }],
            axes: [{
                type: 'numeric', position: 'left', grid: grid, minimum: 0, maximum: extra.maximum,
                label: { fillStyle: color }, style: { strokeStyle: color }, renderer: label,
            }, {
                type: 'time', position: 'bottom', grid: grid, fields: ['time'],
                label: { fillStyle: color }, style: { strokeStyle: color },
                renderer: function (axis, v) {            // seconds when the span is short, dates past a day
                    var range = axis.getRange ? axis.getRange() : null;
                    var span = range ? range[1] - range[0] : 0;
                    return Ext.Date.format(new Date(v), span < 15 * 60 * 1000 ? 'H:i:s'
                        : span > 36 * 3600 * 1000 ? 'm-d H:i' : 'H:i');
                },
            }],
            series: series,
        }, extra.chart);
    },

    // The Hour/Day switch of a chart panel: the poller asks again for the span pressed
    // (params[param] = its value), without its ETag, and reset() makes the charts anew (a
    // loaded chart keeps its time axis).
    spanButtons: function (itemId, poller, param, values, reset) {
        return {
            xtype: 'segmentedbutton', itemId: itemId, allowMultiple: false,
            items: [{ text: gettext('Hour'), value: values[0], pressed: true }, { text: gettext('Day'), value: values[1] }],
            listeners: { toggle: function (button, item, pressed) {
                if (pressed) {
                    var p = poller();
                    p.params = {};
                    p.params[param] = item.value;
                    p.etag = null;
                    reset();
                    p.tick();
                }
            } },
        };
    },

    // A line of one field; dashed for a reference line (kept out of the legend).  format(v)
    // for the tooltip's value: a percentage unless given.
    line: function (field, title, dashed, format) {
        format = format || function (v) { return Math.round(v * 100) + '%'; };
        return {
            type: 'line', xField: 'time', yField: field, title: title, showMarkers: false, showInLegend: !dashed,
            style: dashed ? { lineWidth: 1, lineDash: [4, 3] } : { lineWidth: 1.5 },
            tooltip: { trackMouse: true, renderer: function (tooltip, record) {
                var v = record.get(field);
                tooltip.setHtml(Ext.htmlEncode(title) + ': ' + (v === null || v === undefined ? '-' : format(v)) +
                    ' (' + Ext.Date.format(record.get('time'), 'H:i') + ')');
            } },
        };
    },
});
