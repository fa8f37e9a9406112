"""Power saving's buttons and settings on the Rebalancing tab (issue 19), in the harness
against the real services on the power cluster in ``recommend`` mode (test_power_ui's stack:
nothing sleeps unless asked): a node put to sleep from Sleep (its plan confirmed, the job
followed, the shutdown sent to PVE) and woken from Wake; a wake test from its button; a user
without Sys.PowerMgmt finds them off and is refused by the API; the settings' Power saving tab writes
``balancing.power`` and shows a bad window at its field.  Screenshots at 1280x800, light and
dark (DOCS_SCREENSHOTS=1 also writes them to docs/images/).
The tests of this module share one stack and run in order (the cluster changes)."""

from __future__ import annotations

import os

import pytest
import yaml

from conftest import ROOT
from service_helpers import wait_for
from ui.conftest import screenshot, select_tab
from ui.test_power_ui import PANEL, POWER_PANEL, power_stack

DOCS = ROOT / "docs" / "images"
NODES = f"{POWER_PANEL}.down('#powerNodes')"
WINDOW = "Ext.ComponentQuery.query('#keelBalancingEdit')[0]"
PASSWORD = "keel-power"


@pytest.fixture(scope="module")
def ui_stack(tmp_path_factory):
    with power_stack(tmp_path_factory.mktemp("power-actions-ui"), "recommend") as stack:
        yield stack


def shot(page, name):
    path = screenshot(page, name)
    if os.environ.get("DOCS_SCREENSHOTS"):
        DOCS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOCS / f"{name}.png"))
    return path


def css(page, query):
    return "#" + page.evaluate("q => Ext.ComponentQuery.query(q)[0].id", query)


def open_power(open_ui, **kwargs):
    page = open_ui(password=PASSWORD, **kwargs)
    page.set_viewport_size({"width": 1280, "height": 800})
    select_tab(page, "keel-rebalancing")
    page.wait_for_function(f"{POWER_PANEL} && {POWER_PANEL}.isVisible() && {POWER_PANEL}.nodeStore.getCount() === 8")
    return page


def select_node(page, node):
    row = page.evaluate(f"n => {NODES}.getView().getNode({POWER_PANEL}.nodeStore.getById(n)).id", node)
    page.click(f"#{row} .x-grid-cell >> nth=0")
    page.wait_for_function(f"n => {POWER_PANEL}.selected() && {POWER_PANEL}.selected().get('node') === n", arg=node)


def open_settings(page):
    page.click(css(page, "pveKeelRebalancing #settingsButton"))


def state(page, node):
    return page.evaluate(f"n => {POWER_PANEL}.nodeStore.getById(n).get('state')", node)


def disabled(page, button):
    return page.evaluate(f"b => {POWER_PANEL}.down(b).disabled", button)


def test_a_node_is_put_to_sleep_from_the_button_and_woken_again(open_ui, ui_stack, ui_errors):
    ui_errors.allow(r"status of 409 .*/api/power/nodes/pve1/sleep")          # the refusal provoked below
    client, sim = ui_stack.client, ui_stack.sim
    plan = wait_for(lambda: client.call("GET", "/api/power/plan"), timeout=60)
    assert plan["verdict"] == "SLEEP", plan["reason"]
    node = plan["sleep"][0]
    # ?node=: that node alone, as its sleep plans it; a node that may not sleep says why
    alone = client.call("GET", f"/api/power/plan?node={node}")
    assert alone["sleep"] == [node] and all(s["node"] in (node, None) for s in alone["steps"])
    assert [s["action"] for s in alone["steps"]][-1] == "shutdown"
    api_node = client.call("GET", "/api/power/plan?node=pve1")
    assert api_node["verdict"] != "SLEEP" and any(r["node"] == "pve1" for r in api_node["refusals"])

    page = open_power(open_ui)
    assert disabled(page, "#sleepButton") and disabled(page, "#wakeButton")      # nothing selected
    select_node(page, "pve1")                  # not one of the nodes that may sleep
    assert disabled(page, "#sleepButton") and disabled(page, "#wakeButton")
    assert "not one of the nodes that may sleep" in page.inner_text(".keel-power")
    select_node(page, node)
    assert not disabled(page, "#sleepButton") and disabled(page, "#wakeButton")
    seq = len(sim.requests_log())
    page.click(f"{css(page, 'pveKeelPower #sleepButton')}")
    # the confirmation says what will happen, from the node's own plan, before anything is done
    confirm = "Ext.ComponentQuery.query('#keelPowerSleepConfirm')[0]"
    page.wait_for_function(f"!!{confirm}")
    head = page.inner_text(css(page, "#keelPowerSleepConfirm"))
    assert f"Put {node} to sleep?" in head and "migrates" in head and "HA maintenance" in head
    assert "shuts it down" in head
    steps = page.evaluate(f"{confirm}.down('#steps').getStore().getRange().map(r => r.get('action'))")
    assert steps == [s["action"] for s in alone["steps"]]
    assert client.call("GET", "/api/power")["nodes"] and state(page, node) == "awake"       # nothing done yet
    shot(page, "rebalancing-power-sleep-confirm")
    page.click(css(page, "#keelPowerSleepConfirm #confirm"))
    # followed as the tab follows Apply: the job panel, then its end; the node reads asleep
    page.wait_for_function(f"{PANEL}.jobId !== null")
    assert disabled(page, "#sleepButton")                          # while the job runs
    page.wait_for_function(f"{PANEL}.jobId === null", timeout=150_000)
    job_text = page.evaluate(f"{PANEL}.down('#jobText').el.dom.textContent")
    assert "Sleep: done" in job_text and "migrations done" in job_text, job_text
    page.evaluate(f"() => {{ {PANEL}.getScrollable().scrollTo(0, 0); }}")
    screenshot(page, "rebalancing-power-sleep-done")
    page.wait_for_function(f"n => {POWER_PANEL}.nodeStore.getById(n).get('state') === 'sleeping'", arg=node,
                           timeout=30_000)
    shutdowns = [r for r in sim.requests_log(seq) if r["method"] == "POST" and r["path"] == f"/nodes/{node}/status"]
    assert shutdowns and shutdowns[-1]["params"].get("command") == "shutdown", shutdowns
    assert sim.control("GET", "state")["power"][node]["state"] == "off"
    assert "sleeping since" in page.inner_text(".keel-power")
    select_node(page, node)
    assert disabled(page, "#sleepButton") and not disabled(page, "#wakeButton")
    page.evaluate(f"() => {{ {POWER_PANEL}.el.dom.scrollIntoView(); }}")
    shot(page, "rebalancing-power-asleep-light")
    dark = open_power(open_ui, theme="dark", layout="8")
    dark.wait_for_function(f"n => {POWER_PANEL}.nodeStore.getById(n).get('state') === 'sleeping'", arg=node)
    dark.evaluate(f"() => {{ {POWER_PANEL}.el.dom.scrollIntoView(); }}")
    shot(dark, "rebalancing-power-asleep-dark")
    dark.close()

    seq = len(sim.requests_log())
    page.click(f"{css(page, 'pveKeelPower #wakeButton')}")
    page.wait_for_function(f"{PANEL}.jobId !== null")
    page.wait_for_function(f"{PANEL}.jobId === null", timeout=150_000)
    assert "Wake: done" in page.evaluate(f"{PANEL}.down('#jobText').el.dom.textContent")
    page.wait_for_function(f"n => {POWER_PANEL}.nodeStore.getById(n).get('state') === 'awake'", arg=node,
                           timeout=30_000)
    assert [r for r in sim.requests_log(seq) if r["method"] == "POST" and r["path"].endswith("/wakeonlan")]
    assert sim.control("GET", "state")["power"][node]["state"] != "off"
    events = [e for e in client.call("GET", "/api/power")["events"] if e["node"] == node]
    assert events[-1]["reason"] == "asked by web:root@pam", events[-1]

    # a node the plan keeps awake: its gates in an error dialog, and nothing sent
    select_node(page, "pve1")
    page.evaluate(f"() => {{ {POWER_PANEL}.confirmSleep(); }}")
    box = page.wait_for_selector(".x-message-box >> text=pve1 stays awake")
    text = page.inner_text(".x-message-box")
    assert all(r["gate"] in text for r in api_node["refusals"] if r["node"] == "pve1"), text
    assert not page.evaluate("!!Ext.ComponentQuery.query('#keelPowerSleepConfirm')[0]")
    screenshot(page, "rebalancing-power-refused")
    page.click(".x-message-box >> text=OK")
    # a refusal of keel-engine's (409, the gates' reasons) is shown as it said it
    page.evaluate(f"() => {{ {POWER_PANEL}.act('pve1', 'sleep'); }}")
    page.wait_for_selector(".x-message-box >> text=(409)")
    said = page.inner_text(".x-message-box")
    assert "pve1 stays awake" in said and "409" in said, said
    assert box is not None and state(page, "pve1") == "awake"


def test_a_wake_test_from_the_button_sleeps_the_node_and_wakes_it_at_once(open_ui, ui_stack):
    client, sim = ui_stack.client, ui_stack.sim
    untested = [n["node"] for n in client.call("GET", "/api/power")["nodes"]
                if n["may_sleep"] and n["state"] == "awake" and not n.get("wake_test")]
    node = untested[0]
    page = open_power(open_ui)
    assert "never" in page.inner_text(css(page, "pveKeelPower #powerNodes"))
    select_node(page, node)
    assert not disabled(page, "#testButton")
    seq = len(sim.requests_log())
    page.click(css(page, "pveKeelPower #testButton"))
    confirm = "Ext.ComponentQuery.query('#keelPowerSleepConfirm')[0]"
    page.wait_for_function(f"!!{confirm}")
    head = page.inner_text(css(page, "#keelPowerSleepConfirm"))
    assert f"Wake test of {node}" in head and f"Test that {node} wakes?" in head and "at once wakes it" in head
    page.click(css(page, "#keelPowerSleepConfirm #confirm"))
    page.wait_for_function(f"{PANEL}.jobId !== null")
    page.wait_for_function(f"{PANEL}.jobId === null", timeout=180_000)
    assert "Wake test: done" in page.evaluate(f"{PANEL}.down('#jobText').el.dom.textContent")
    page.wait_for_function(f"n => {POWER_PANEL}.nodeStore.getById(n).get('state') === 'awake' && "
                           f"{POWER_PANEL}.nodeStore.getById(n).get('wake_test')", arg=node, timeout=30_000)
    log = [r for r in sim.requests_log(seq) if r["method"] == "POST"]
    assert any(r["path"] == f"/nodes/{node}/status" and r["params"].get("command") == "shutdown" for r in log)
    assert any(r["path"].endswith("/wakeonlan") for r in log)


def test_without_sys_powermgmt_the_buttons_are_off_and_the_api_refuses(open_ui, ui_stack, ui_errors):
    ui_errors.allow(r"status of 403 .*/api/power/nodes/pve\d/sleep")        # the refusal the test provokes
    root = ui_stack.sim.proxmox(user="root@pam", password=PASSWORD)
    if "watcher@pve" not in {u["userid"] for u in root.access.users.get()}:
        root.access.users.post(userid="watcher@pve", password=PASSWORD)
        root.access.acl.put(path="/", roles="PVEAuditor", users="watcher@pve", propagate=1)
    page = open_power(open_ui, user="watcher@pve")
    assert page.evaluate("!(Ext.state.Manager.get('GuiCap').nodes || {})['Sys.PowerMgmt']")
    node = next(n for n in ("pve5", "pve6", "pve7", "pve8") if state(page, n) == "awake")
    select_node(page, node)
    assert disabled(page, "#sleepButton") and disabled(page, "#wakeButton") and disabled(page, "#testButton")
    assert "need Sys.PowerMgmt" in page.inner_text(".keel-power")
    # keel-web and keel-engine refuse anyway: the same request the button makes, with this user's ticket
    answer = page.evaluate("""n => new Promise(done => PVE.keel.Api.request({
        url: '/api/power/nodes/' + n + '/sleep', method: 'POST', jsonData: {},
        success: () => done({status: 202}), failure: e => done(e)}))""", node)
    assert answer["status"] == 403 and "Sys.PowerMgmt" in answer["message"], answer
    assert state(page, node) == "awake"


def test_the_power_settings_are_written_and_a_bad_window_shows_at_its_field(open_ui, ui_stack):
    config = ui_stack.config
    original = config.read_text()
    try:
        page = open_power(open_ui)
        open_settings(page)
        page.wait_for_function(f"{WINDOW} && {WINDOW}.section !== null")
        # saved unchanged: nothing is written, the file stays byte for byte
        before = config.stat().st_mtime_ns
        page.click(css(page, "#keelBalancingEdit #ok"))
        page.wait_for_function(f"!{WINDOW}")
        assert config.read_text() == original and config.stat().st_mtime_ns == before
        # a key the form does not show is kept (one a later version adds, say)
        open_settings(page)
        page.wait_for_function(f"{WINDOW} && {WINDOW}.section !== null")
        kept = page.evaluate(f"""() => {{ const w = {WINDOW};
            w.section.power.later_key = '7d'; const v = w.values(); delete w.section.power.later_key;
            return v.power; }}""")
        assert kept["later_key"] == "7d" and kept["watts_per_node"] == {"default": 150, "pve5": 90}
        assert kept["wake_test_max_age"] == "off"
        page.evaluate(f"() => {{ {WINDOW}.down('#tabs').setActiveTab({WINDOW}.down('#power')); }}")
        shown = page.evaluate(f"""() => {{ const f = {WINDOW}.down('form').getForm(); const out = {{}};
            ['power.mode', 'power.nodes', 'power.hold', 'power.watts_per_node', 'power.wake_timeout',
             'power.wake_test_max_age']
                .forEach(n => out[n] = f.findField(n).getValue()); return out; }}""")
        assert shown == {"power.mode": "recommend", "power.nodes": ["pve5", "pve6", "pve7", "pve8"],
                         "power.hold": "2s", "power.watts_per_node": 150, "power.wake_timeout": "20s",
                         "power.wake_test_max_age": "off"}
        choices = page.evaluate(f"{WINDOW}.down('field[name=\\'power.nodes\\']').getStore().collect('field1')")
        assert choices == [f"pve{i}" for i in range(1, 9)]              # the cluster's nodes
        hint = page.inner_text(css(page, "#keelBalancingEdit field[name='power.watts_per_node']"))
        assert "pve5 90 W" in hint
        # a bad window: its error under its field, on the Power saving tab, nothing written
        page.evaluate(f"""() => {{ const f = {WINDOW}.down('form').getForm();
            f.findField('power.never_sleep').setValue('mon-fry 07:00-19:00');
            f.findField('power.headroom.cpu').setValue(70);
            f.findField('power.nodes').setValue(['pve6', 'pve7']);
            f.findField('power.wake_all').setValue('mon-fri 07:30\\nsat 09:00'); }}""")
        page.evaluate(f"() => {{ {WINDOW}.down('#tabs').setActiveTab(0); }}")
        page.click(css(page, "#keelBalancingEdit #ok"))
        page.wait_for_function(f"{WINDOW}.down('form').getForm().findField('power.never_sleep')"
                               ".getActiveErrors().length")
        error = page.evaluate(f"{WINDOW}.down('form').getForm().findField('power.never_sleep')"
                              ".getActiveErrors().join(' ')")
        assert "line 1" in error and "mon-fry" in error, error
        assert page.evaluate(f"{WINDOW}.down('#tabs').getActiveTab().itemId") == "power"
        field = css(page, "#keelBalancingEdit field[name='power.never_sleep']")
        under = page.locator(f"{field} .x-form-error-wrap-under")
        assert under.is_visible() and "line 1: unknown day 'mon-fry'" in under.inner_text(), under.inner_text()
        assert config.read_text() == original
        shot(page, "rebalancing-power-settings-light")
        # corrected: written, and read back from the config API
        page.evaluate(f"""() => {{ {WINDOW}.down('form').getForm().findField('power.never_sleep')
            .setValue('mon-fri 07:00-19:00'); }}""")
        page.click(css(page, "#keelBalancingEdit #ok"))
        page.wait_for_function(f"!{WINDOW}")
        answer = ui_stack.client.call("GET", "/api/config")
        power = answer["sections"]["balancing"]["power"]
        assert power["never_sleep"] == ["mon-fri 07:00-19:00"]
        assert power["wake_all"] == ["mon-fri 07:30", "sat 09:00"]
        assert power["headroom"] == {"cpu": "70%"} and power["nodes"] == ["pve6", "pve7"]
        assert power["watts_per_node"] == {"default": 150, "pve5": 90} and power["hold"] == "2s"
        wait_for(lambda: ui_stack.client.call("GET", "/api/config")["balancing"]["power"]["cpu_line"] == 0.7)
        assert yaml.safe_load(config.read_text())["balancing"]["interval"] == "2s"      # the rest kept
        # the dark theme, the form as written
        dark = open_power(open_ui, theme="dark", layout="8")
        open_settings(dark)
        dark.wait_for_function(f"{WINDOW} && {WINDOW}.section !== null")
        dark.evaluate(f"() => {{ {WINDOW}.down('#tabs').setActiveTab({WINDOW}.down('#power')); }}")
        shot(dark, "rebalancing-power-settings-dark")
    finally:
        ui_stack.client.call("PUT", "/api/config", {"text": original})
