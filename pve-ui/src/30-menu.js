/*
 * Datacenter -> HA -> Rebalancing and Runners: one override of PVE.panel.Config that
 * splices two items into the Datacenter panel's HA group before its tree is built (PVE 8's
 * ha-groups and PVE 9's ha-rules layouts alike), only for users with Sys.Audit.  Deep
 * links work as PVE's own: #v1:0:=keel-rebalancing.  Any fault here is logged and the
 * Datacenter panel renders without Keel's items.
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
Ext.define('PVE.keel.Menu', {
    singleton: true,

    // Fresh objects every time: PVE.panel.Config's insertNodes() shifts `groups`.
    items: function () {
        var runners = Ext.ClassManager.getNameByAlias('widget.pveKeelRunners')
            ? 'pveKeelRunners' : 'pveKeelPlaceholder';
        return [{
            xtype: 'pveKeelRebalancing',
            title: gettext('Rebalancing'),
            groups: ['ha'],
            iconCls: 'fa fa-balance-scale',
            itemId: 'keel-rebalancing',
        }, {
            xtype: runners,
            title: gettext('Runners'),
            groups: ['ha'],
            iconCls: 'fa fa-github',
            itemId: 'keel-runners',
        }];
    },

    // `items` with Keel's two after the last item of the HA group; unchanged when there is
    // no HA group (no Sys.Audit) or they are there already.
    splice: function (items) {
        var caps = Ext.state.Manager.get('GuiCap');
        if (!Array.isArray(items) || !caps || !caps.dc || !caps.dc['Sys.Audit']) {
            return items;
        }
        if (items.some(function (item) { return item && item.itemId === 'keel-rebalancing'; })) {
            return items;
        }
        var last = -1;
        items.forEach(function (item, index) {
            if (item && (item.itemId === 'ha' || (Array.isArray(item.groups) && item.groups[0] === 'ha'))) {
                last = index;
            }
        });
        if (last >= 0) {
            Array.prototype.splice.apply(items, [last + 1, 0].concat(PVE.keel.Menu.items()));
        }
        return items;
    },
});

// Until the Runners panel is there (a plain stand-in, never an error).
Ext.define('PVE.keel.Placeholder', {
    extend: 'Ext.panel.Panel',
    alias: 'widget.pveKeelPlaceholder',
    bodyPadding: 10,
    html: '<p class="pmx-hint">' + gettext('Not available in this version of Keel.') + '</p>',
});

if (Ext.ClassManager.get('PVE.panel.Config') && Ext.ClassManager.get('PVE.dc.Config')) {
    Ext.define('PVE.keel.DcConfigOverride', {
        override: 'PVE.panel.Config',

        initComponent: function () {
            try {
                if (this instanceof PVE.dc.Config) {
                    PVE.keel.Menu.splice(this.items);
                }
            } catch (err) {
                if (window.console) {
                    console.error('keel: could not add the Rebalancing and Runners items', err);
                }
            }
            this.callParent(arguments);
        },
    });
}
