/*
 * Keel's web UI harness: thin stand-ins, written for Keel, for the few Proxmox VE and
 * widget toolkit classes the plugin touches, so that keel.js runs against a real
 * keel-web + keel-engine + `keel sim` without Proxmox VE.  None of Proxmox's code is here.
 *
 * Page options (query string): layout=8|9 (PVE 8's ha-groups or PVE 9's ha-rules in the
 * HA group), theme=light|dark.  Deep links: #v1:0:=keel-rebalancing, as PVE's.
 *
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
/* global Ext */
var gettext = function (text) { return text; };   // PVE 8 inlines only gettext

var Harness = {
    params: Ext.Object.fromQueryString(window.location.search || ''),
    login: null,
    layout: function () { return this.params.layout === '8' ? 8 : 9; },
    theme: function () { return this.params.theme === 'dark' ? 'dark' : 'light'; },

    reloadWith: function (changes) {
        var params = Ext.apply({}, changes, this.params);
        window.location.search = '?' + Ext.Object.toQueryString(params);
    },

    start: function () {
        var me = this;
        me.login = Ext.decode(window.sessionStorage.getItem('keel-harness-login') || 'null', true);
        if (!me.login || !Ext.util.Cookies.get('PVEAuthCookie')) {
            me.showLogin();
            return;
        }
        Ext.QuickTips.init();                 // as PVE's workspace does: tooltips (data-qtip) work
        Proxmox.UserName = me.login.username;
        Proxmox.CSRFPreventionToken = me.login.CSRFPreventionToken;
        Ext.state.Manager.set('GuiCap', me.login.cap);
        Ext.create('Harness.Workspace');
    },

    showLogin: function () {
        var me = this;
        var win = Ext.create('Ext.window.Window', {
            title: gettext('Proxmox VE Login') + ' (Keel harness)',
            modal: true, closable: false, width: 400, bodyPadding: 10, itemId: 'harnessLogin',
            layout: 'fit',
            items: [{
                xtype: 'form', border: false, defaults: { anchor: '100%', labelWidth: 90 },
                items: [
                    { xtype: 'textfield', name: 'username', fieldLabel: gettext('User name'),
                      value: me.params.user || 'root@pam', allowBlank: false },
                    { xtype: 'textfield', name: 'password', inputType: 'password',
                      fieldLabel: gettext('Password'), allowBlank: false },
                    { xtype: 'displayfield', itemId: 'hint', value: me.params.hint || '' },
                ],
            }],
            buttons: [{
                text: gettext('Login'), id: 'harness-login-button', formBind: true,
                handler: function () {
                    var values = win.down('form').getValues();
                    Ext.Ajax.request({
                        url: '/harness/login', method: 'POST', jsonData: values,
                        success: function (response) {
                            var data = Ext.decode(response.responseText).data;
                            Ext.util.Cookies.set('PVEAuthCookie', data.ticket, null, '/');
                            window.sessionStorage.setItem('keel-harness-login', Ext.encode(
                                { username: data.username, CSRFPreventionToken: data.CSRFPreventionToken,
                                  cap: data.cap }));
                            window.location.reload();
                        },
                        failure: function (response) {
                            var answer = Ext.decode(response.responseText, true) || {};
                            Ext.Msg.alert(gettext('Error'), Ext.htmlEncode(answer.message || response.statusText));
                        },
                    });
                },
            }],
        });
        win.show();
    },

    logout: function () {
        window.sessionStorage.removeItem('keel-harness-login');
        Ext.util.Cookies.clear('PVEAuthCookie', '/');
        window.location.hash = '';
        window.location.reload();
    },

    // PVE.StateProvider keeps the selected tab in the hash as '=<itemId>' tokens.
    hashTab: function () {
        var tokens = (window.location.hash || '').replace(/^#/, '').split(':');
        var tab = null;
        tokens.forEach(function (token) {
            if (token.charAt(0) === '=') { tab = decodeURIComponent(token.substr(1)); }
        });
        return tab;
    },
    setHashTab: function (itemId) {
        var hash = '#v1:0:=' + encodeURIComponent(itemId);
        if (window.location.hash !== hash) { window.history.replaceState(null, '', hash); }
    },
};

// keel-web serves this page, so the plugin calls its own origin (api=URL: another one).
window.KeelBaseUrl = Harness.params.api || window.location.origin;

var Proxmox = {
    Setup: { auth_cookie_name: 'PVEAuthCookie' },
    NodeName: 'pve1',
    UserName: '',
    CSRFPreventionToken: '',
};

// The widget toolkit adds the CSRF token to every Ext.Ajax request, cross-origin ones too.
Ext.Ajax.on('beforerequest', function (conn, options) {
    if (Proxmox.CSRFPreventionToken) {
        options.headers = Ext.apply(options.headers || {},
            { CSRFPreventionToken: Proxmox.CSRFPreventionToken });
    }
});

Ext.state.Manager.setProvider(Ext.create('Ext.state.Provider'));

Ext.define('Proxmox.Utils', {
    singleton: true,
    format_duration_long: function (seconds) {
        var s = Math.round(seconds), d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600),
            m = Math.floor((s % 3600) / 60), parts = [];
        if (d) { parts.push(d + 'd'); }
        if (h) { parts.push(h + 'h'); }
        if (m) { parts.push(m + 'm'); }
        parts.push((s % 60) + 's');
        return parts.join(' ');
    },
    render_timestamp: function (value) {
        return Ext.Date.format(new Date(value * 1000), 'Y-m-d H:i:s');
    },
    get_health_icon: function (state, circle) {
        var icon = { good: 'good fa-check', warning: 'warning fa-exclamation',
            critical: 'critical fa-times' }[state] || 'faded fa-question';
        return circle ? icon.replace(' fa-', ' fa-') + '-circle' : icon;
    },
    parse_task_upid: function (upid) {
        var parts = String(upid).split(':');
        return { node: parts[1], type: parts[5], id: parts[6], user: parts[7],
            starttime: parseInt(parts[4], 16) };
    },
});

// A stand-in for Proxmox.window.TaskViewer: what the task is, from its UPID.
Ext.define('Proxmox.window.TaskViewer', {
    extend: 'Ext.window.Window',
    title: gettext('Task viewer'),
    width: 600, bodyPadding: 10, modal: true,
    initComponent: function () {
        var me = this, task = Proxmox.Utils.parse_task_upid(me.upid);
        me.items = [{
            xtype: 'component', itemId: 'task',
            html: Ext.String.format('<p><b>{0}</b> {1} {2} ({3})</p><p>{4}: {5}</p><p class="pmx-hint">{6}</p>',
                Ext.htmlEncode(task.type), Ext.htmlEncode(task.id), gettext('on node'),
                Ext.htmlEncode(task.node), gettext('User'), Ext.htmlEncode(task.user),
                Ext.htmlEncode(me.upid)),
        }];
        me.callParent();
    },
});

// The live /cluster/resources store of PVE, empty here: the plugin asks keel-web.
Ext.define('PVE.data.ResourceStore', {
    extend: 'Ext.data.Store',
    singleton: true,
    fields: ['id', 'type', 'node', 'status'],
    getNodes: function () { return []; },
});

// PVE.panel.Config: a tree of items (grouped by `groups`) on the left, one card each.
Ext.define('PVE.panel.Config', {
    extend: 'Ext.panel.Panel',
    alias: 'widget.pvePanelConfig',
    layout: 'border',
    border: false,

    initComponent: function () {
        var me = this;
        var items = me.items || [];
        me.savedItems = {};
        var root = { expanded: true, children: [] };
        var nodes = {};
        items.forEach(function (item) {
            if (!item.itemId) { throw 'item without itemId'; }
            if (me.savedItems[item.itemId]) { throw 'duplicate itemId ' + item.itemId; }
            me.savedItems[item.itemId] = item;
            var node = { id: item.itemId, text: item.title, iconCls: item.iconCls,
                leaf: true, expanded: true };
            nodes[item.itemId] = node;
            var parent = root;
            while (item.groups && item.groups.length) {
                parent = nodes[item.groups.shift()] || parent;
            }
            if (parent !== root) { parent.leaf = false; parent.children = parent.children || []; }
            (parent.children = parent.children || []).push(node);
        });
        delete me.items;
        me.store = Ext.create('Ext.data.TreeStore', { root: root });
        me.items = [{
            xtype: 'treelist', region: 'west', width: 200, itemId: 'menu', store: me.store,
            ui: 'pve-nav', scrollable: 'y', split: false, cls: 'harness-menu',
            listeners: { selectionchange: function (list, rec) { if (rec) { me.activateCard(rec.getId()); } } },
        }, {
            xtype: 'container', region: 'center', layout: 'card', itemId: 'cards', border: false,
        }];
        me.callParent();
        var first = Harness.hashTab();
        me.on('afterrender', function () {
            var start = first && me.savedItems[first] ? first : items[0].itemId;
            me.down('#menu').setSelection(me.store.getNodeById(start));
        });
    },

    activateCard: function (itemId) {
        var me = this, cards = me.down('#cards');
        var card = cards.getComponent(itemId);
        if (!card) {
            var conf = Ext.apply({}, me.savedItems[itemId]);
            delete conf.groups;
            card = cards.add(Ext.apply(conf, { header: false, border: false }));
        }
        cards.setActiveItem(card);
        Harness.setHashTab(itemId);
    },
});

// Datacenter: its items as PVE 8 or 9 builds them (HA only with Sys.Audit).
Ext.define('PVE.dc.Config', {
    extend: 'PVE.panel.Config',
    alias: 'widget.PVE.dc.Config',
    title: gettext('Datacenter'),

    initComponent: function () {
        var me = this, caps = Ext.state.Manager.get('GuiCap') || { dc: {} };
        var plain = function (title, itemId, iconCls, extra) {
            return Ext.apply({ xtype: 'harnessPlain', title: title, itemId: itemId, iconCls: iconCls }, extra);
        };
        me.items = [plain(gettext('Search'), 'search', 'fa fa-search')];
        if (caps.dc['Sys.Audit']) {
            me.items.push(plain(gettext('Summary'), 'summary', 'fa fa-book'));
            me.items.push(plain(gettext('Options'), 'options', 'fa fa-gear'));
            me.items.push(plain(gettext('Storage'), 'storage', 'fa fa-database'));
            me.items.push(plain('HA', 'ha', 'fa fa-heartbeat'));
            if (Harness.layout() === 8) {
                me.items.push(plain(gettext('Groups'), 'ha-groups', 'fa fa-object-group', { groups: ['ha'] }));
            } else {
                me.items.push(plain(gettext('Affinity Rules'), 'ha-rules', 'fa fa-gears', { groups: ['ha'] }));
            }
            me.items.push(plain(gettext('Fencing'), 'ha-fencing', 'fa fa-bolt', { groups: ['ha'] }));
        }
        me.items.push(plain(gettext('Permissions'), 'permissions', 'fa fa-unlock'));
        me.items.push(plain(gettext('Support'), 'support', 'fa fa-comments-o'));
        me.callParent();
    },
});

Ext.define('Harness.Plain', {
    extend: 'Ext.panel.Panel',
    alias: 'widget.harnessPlain',
    bodyPadding: 10,
    initComponent: function () {
        this.html = Ext.String.format('<p class="pmx-hint">{0}: {1}</p>',
            Ext.htmlEncode(this.title), gettext('a stand-in of the harness'));
        this.callParent();
    },
});

Ext.define('Harness.Workspace', {
    extend: 'Ext.container.Viewport',
    layout: 'border',
    initComponent: function () {
        var layout = Harness.layout(), theme = Harness.theme();
        this.items = [{
            region: 'north', xtype: 'toolbar', itemId: 'harnessBar', cls: 'harness-bar',
            items: [
                { xtype: 'component', html: '<b>Keel</b> harness: Datacenter as on Proxmox VE ' + layout },
                '->',
                { xtype: 'segmentedbutton', itemId: 'layoutSwitch', items: [
                    { text: 'PVE 8', pressed: layout === 8, handler: function () { Harness.reloadWith({ layout: '8' }); } },
                    { text: 'PVE 9', pressed: layout === 9, handler: function () { Harness.reloadWith({ layout: '9' }); } },
                ] },
                { xtype: 'segmentedbutton', itemId: 'themeSwitch', items: [
                    { text: gettext('Light'), iconCls: 'fa fa-sun-o', pressed: theme === 'light',
                      handler: function () { Harness.reloadWith({ theme: 'light' }); } },
                    { text: gettext('Dark'), iconCls: 'fa fa-moon-o', pressed: theme === 'dark',
                      handler: function () { Harness.reloadWith({ theme: 'dark' }); } },
                ] },
                { xtype: 'component', html: Ext.htmlEncode(Proxmox.UserName) },
                { text: gettext('Logout'), iconCls: 'fa fa-sign-out', handler: function () { Harness.logout(); } },
            ],
        }, {
            region: 'center', xtype: 'PVE.dc.Config', itemId: 'dcConfig',
        }];
        this.callParent();
    },
});

if (Harness.theme() === 'dark') {
    document.documentElement.classList.add('harness-dark');
}
