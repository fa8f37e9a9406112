/*
 * PVE.keel.Api: calls keel-web (https://<this UI's host>:8443) with the user's own PVE
 * ticket, and PVE.keel.Notice: what to do when it cannot be reached.
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */
Ext.define('PVE.keel.Api', {
    singleton: true,

    port: 8443,

    // https://<host of the page>:8443; window.KeelBaseUrl overrides it (the harness, a
    // reverse proxy in front of the UI).
    baseUrl: function () {
        if (window.KeelBaseUrl) {
            return String(window.KeelBaseUrl).replace(/\/+$/, '');
        }
        var host = window.location.hostname;
        if (host.indexOf(':') >= 0 && host.charAt(0) !== '[') {
            host = '[' + host + ']';
        }
        return 'https://' + host + ':' + this.port;
    },

    // Read at every request: the workspace renews the ticket every 15 minutes.
    ticket: function () {
        var name = (window.Proxmox && Proxmox.Setup && Proxmox.Setup.auth_cookie_name) || 'PVEAuthCookie';
        return Ext.util.Cookies.get(name);
    },

    /*
     * request({url: '/api/plan', method: 'GET', params: {...} (query), jsonData: {...} (body),
     *          success(data, response), failure(error), callback(), scope, waitMsgTarget})
     *
     * error = {status, message, errors: {config.path: message}, unreachable: bool}
     * status 0 (unreachable) means keel-web is down or its certificate is not trusted.
     */
    request: function (options) {
        var me = this;
        var method = options.method || 'GET';
        var headers = { Accept: 'application/json' };
        if (options.etag) {
            headers['If-None-Match'] = options.etag;       // 304 when nothing changed
        }
        var ticket = me.ticket();
        if (ticket) {
            headers.Authorization = 'PVEAuthCookie=' + ticket;
        }
        if (method !== 'GET' && window.Proxmox && Proxmox.CSRFPreventionToken) {
            headers.CSRFPreventionToken = Proxmox.CSRFPreventionToken;
        }
        var url = me.baseUrl() + options.url;
        if (options.params) {
            url = Ext.urlAppend(url, Ext.Object.toQueryString(options.params));
        }
        if (options.waitMsgTarget) {
            options.waitMsgTarget.mask(gettext('Please wait...'));
        }
        Ext.Ajax.request({
            url: url,
            method: method,
            headers: headers,
            jsonData: method === 'GET' ? undefined : options.jsonData || {},
            cors: true,
            withCredentials: false,
            useDefaultXhrHeader: false,
            disableCaching: false,
            timeout: options.timeout || 60000,
            callback: function (opts, success, response) {
                if (options.waitMsgTarget && !options.waitMsgTarget.destroyed) {
                    options.waitMsgTarget.unmask();
                }
                var answer = null;
                try {
                    answer = response && response.responseText ? Ext.decode(response.responseText) : null;
                } catch (err) {
                    answer = null;
                }
                var status = response ? response.status : 0;
                if (status === 304) {
                    if (options.notModified) {
                        options.notModified.call(options.scope, response);
                    }
                } else if (success && answer && status >= 200 && status < 300) {
                    if (options.success) {
                        options.success.call(options.scope, answer.data, response);
                    }
                } else if (options.failure) {
                    options.failure.call(options.scope, me.error(status, answer, response), response);
                }
                if (options.callback) {
                    options.callback.call(options.scope);
                }
            },
        });
    },

    error: function (status, answer, response) {
        var unreachable = !status || status <= 0;
        var message;
        if (unreachable) {
            message = gettext('Keel\'s helper is unreachable');
        } else if (answer && answer.message) {
            message = answer.message;
        } else {
            message = (response && response.statusText) || gettext('Error') + ' ' + status;
        }
        return { status: status || 0, message: message, errors: (answer && answer.errors) || {},
            unreachable: unreachable };
    },

    // The same error as one line of HTML, for Ext.Msg.alert and the notice.
    errorHtml: function (error) {
        if (error.unreachable) {
            return PVE.keel.Notice.unreachableHtml();
        }
        return Ext.htmlEncode(error.message) + (error.status > 0 ? ' (' + error.status + ')' : '');
    },

    alert: function (error, title) {
        Ext.Msg.alert(title || gettext('Error'), this.errorHtml(error));
    },
});

/*
 * PVE.keel.Poller: one request at a time, every `interval` ms, while `panel` is visible
 * and the browser tab is not hidden (document.hidden); stopped when the panel is destroyed.
 *   Ext.create('PVE.keel.Poller', {panel: me, url: '/api/status', onData: fn(data), onError: fn(error),
 *                                  fields: ['cluster', 'job']})
 * `fields`: only those keys of the answer (keel-web's ?fields=).  Every answer's ETag is
 * sent back as If-None-Match: an unchanged answer is a bodiless 304 and onData is not called.
 */
Ext.define('PVE.keel.Poller', {
    interval: 3000,

    constructor: function (config) {
        var me = this;
        Ext.apply(me, config);
        me.running = false;
        me.etag = null;
        me.panel.on('destroy', me.stop, me);
        // back in view: refresh at once rather than at the next round
        me.onVisibility = function () {
            if (!document.hidden && me.running && me.skipped) {
                me.tick();
            }
        };
        document.addEventListener('visibilitychange', me.onVisibility);
    },

    start: function () {
        var me = this;
        if (!me.running) {
            me.running = true;
            me.tick();
        }
    },

    stop: function () {
        var me = this;
        me.running = false;
        if (me.panel.destroyed) {
            document.removeEventListener('visibilitychange', me.onVisibility);
        }
        if (me.timer) {
            clearTimeout(me.timer);
            me.timer = null;
        }
    },

    // Now, then every `interval` from the end of this request.
    tick: function () {
        var me = this;
        if (me.timer) {
            clearTimeout(me.timer);
            me.timer = null;
        }
        if (!me.running || me.panel.destroyed) {
            return;
        }
        var next = function (soon) {
            if (me.running && !me.panel.destroyed) {
                me.timer = setTimeout(function () { me.tick(); }, soon ? Math.min(me.interval, 1000) : me.interval);
            }
        };
        if (document.hidden || (me.panel.isVisible && !me.panel.isVisible(true))) {
            me.skipped = true;           // no request; looked at again within a second
            next(true);
            return;
        }
        me.skipped = false;
        var params = Ext.apply({}, typeof me.params === 'function' ? me.params() : me.params);
        if (me.fields) {
            params.fields = me.fields.join(',');
        }
        var url = me.url;
        PVE.keel.Api.request({
            url: url,
            params: Ext.Object.isEmpty(params) ? undefined : params,
            etag: me.etag && me.etagUrl === url ? me.etag : undefined,
            success: function (data, response) {
                if (me.panel.destroyed) {
                    return;
                }
                me.etag = response && response.getResponseHeader ? response.getResponseHeader('ETag') : null;
                me.etagUrl = url;
                try {
                    me.onData.call(me.scope || me.panel, data);
                } catch (err) {        // a fault of the panel's own: said, logged, polling goes on
                    if (window.console) {
                        console.error('keel: could not show ' + me.url, err);
                    }
                    if (me.onError) {
                        me.onError.call(me.scope || me.panel, { status: -1, unreachable: false,
                            message: Ext.String.format(gettext('Keel\'s panel could not show {0}: {1}'),
                                me.url, String(err)), errors: {} });
                    }
                }
            },
            failure: function (error) {
                if (!me.panel.destroyed && me.onError) {
                    me.onError.call(me.scope || me.panel, error);
                }
            },
            callback: function () { next(false); },
        });
    },
});

/*
 * PVE.keel.Notice (xtype pveKeelNotice): a bar for the top of a Keel panel, hidden while
 * all is well.  showError(error) says what went wrong and how to fix it; clear() hides it.
 */
Ext.define('PVE.keel.Notice', {
    extend: 'Ext.toolbar.Toolbar',
    alias: 'widget.pveKeelNotice',

    statics: {
        unreachableHtml: function () {
            var base = Ext.htmlEncode(PVE.keel.Api.baseUrl());
            return Ext.String.format(
                gettext('Keel\'s helper at {0} is unreachable or its certificate is not trusted yet: ' +
                    'open {1} once and accept the certificate, then reload this page; or check ' +
                    '{2} on this node.'),
                base, '<a href="' + base + '/" target="_blank" rel="noopener">' + base + '/</a>',
                '<code>systemctl status keel-web</code>');
        },
    },

    hidden: true,
    cls: 'keel-notice',
    items: [{ xtype: 'component', itemId: 'text', flex: 1, padding: '2 4' }],

    setHtml: function (html) {
        this.down('#text').update(html);
    },

    showError: function (error) {
        var me = this;
        var icon = error.unreachable || error.status >= 500 ? 'critical fa-times-circle'
            : 'warning fa-exclamation-triangle';
        me.keelError = error;
        me.setHtml('<i class="fa fa-fw ' + icon + '"></i> ' + PVE.keel.Api.errorHtml(error));
        me.show();
    },

    // A warning that is no error (Proxmox's own auto-rebalance is on, ...).
    showWarning: function (html) {
        this.keelError = null;
        this.setHtml('<i class="fa fa-fw warning fa-exclamation-triangle"></i> ' + html);
        this.show();
    },

    clear: function () {
        this.keelError = null;
        if (!this.hidden) {
            this.hide();
        }
    },
});
