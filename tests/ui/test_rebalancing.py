"""Datacenter -> HA -> Rebalancing in the harness against the real services: the load,
the plan with reasons and after-state, a bad setting shown beside its field, Apply
migrating in the simulator while the view follows, maintenance emptying a node.
The tests of this module share one stack and run in order (the cluster changes)."""

from __future__ import annotations

import pytest

from service_helpers import wait_for
from ui.conftest import screenshot, select_tab

PANEL = "Ext.ComponentQuery.query('pveKeelRebalancing')[0]"


def open_rebalancing(open_ui, **kwargs):
    page = open_ui(**kwargs)
    select_tab(page, "keel-rebalancing")
    page.wait_for_function(f"{PANEL} && {PANEL}.status && {PANEL}.nodeStore.getCount() === 5")
    return page


def plan_loaded(page):
    page.wait_for_function(f"{PANEL}.plan !== undefined && {PANEL}.plan !== null")


def css(page, query):
    """A CSS selector for the component ExtJS finds with ``query`` (itemIds are no DOM ids)."""
    return "#" + page.evaluate("q => Ext.ComponentQuery.query(q)[0].id", query)


def guests_on(sim, node):
    api = sim.proxmox()
    return sorted(g["vmid"] for g in api.cluster.resources.get(type="vm") if g["node"] == node)


@pytest.mark.parametrize("layout,theme", [("9", "light"), ("8", "dark")])
def test_the_tab_shows_load_imbalance_leader_and_the_plan(open_ui, layout, theme):
    page = open_rebalancing(open_ui, layout=layout, theme=theme)
    plan_loaded(page)
    summary = page.inner_text(".keel-rebalancing-summary")
    assert "threshold 0.10" in summary and "pve1" in summary and "this node" in summary
    assert "Last round" in summary
    nodes = page.evaluate(f"{PANEL}.nodeStore.getRange().map(r => [r.get('node'), r.get('cpu'), r.get('guests')])")
    assert [n[0] for n in nodes] == ["pve1", "pve2", "pve3", "pve4", "pve5"]
    assert all(0 <= n[1] <= 1 for n in nodes)
    moves = page.evaluate(f"{PANEL}.planStore.getRange().map(r => r.data)")
    assert moves and all(m["reason"] and m["detail"] and m["from"] != m["to"] for m in moves)
    plan_title = page.evaluate(f"{PANEL}.down('#plan').getTitle()")
    assert "PLANNED" in plan_title and "fullest node" in plan_title
    after = page.evaluate(f"{PANEL}.nodeStore.getById('pve1').get('after_guests')")
    assert after is not None and after < nodes[0][2]
    assert "Left alone" in page.inner_text(".keel-rebalancing")
    # three refreshes later the same rows are still there: updated in place, not re-created
    ids = page.evaluate(f"{PANEL}.nodeStore.getRange().map(r => r.internalId)")
    page.wait_for_timeout(7000)
    assert page.evaluate(f"{PANEL}.nodeStore.getRange().map(r => r.internalId)") == ids
    screenshot(page, f"rebalancing-pve{layout}-{theme}")


def test_a_bad_setting_shows_its_error_beside_the_field(open_ui, ui_stack):
    page = open_rebalancing(open_ui)
    page.click("text=Settings")
    window = "Ext.ComponentQuery.query('#keelBalancingEdit')[0]"
    page.wait_for_function(f"{window} && {window}.section !== null")
    page.evaluate(f"""() => {{ const f = {window}.down('form').getForm();
        f.findField('threshold').setValue('lots'); f.findField('limits.moves').setValue(-1); }}""")
    page.evaluate(f"() => {{ {window}.down('tabpanel').setActiveTab(0); }}")
    page.click(css(page, "#keelBalancingEdit") + " >> text=OK")
    page.wait_for_function(f"{window}.down('form').getForm().findField('threshold').getActiveErrors().length")
    errors = page.evaluate(f"""() => {{ const f = {window}.down('form').getForm();
        return ['threshold', 'limits.moves'].map(n => f.findField(n).getActiveErrors().join(' ')); }}""")
    assert "expected a fraction" in errors[0] and "lots" in errors[0]
    assert "at least 0" in errors[1]
    # beside the field: its message under that very field, on the tab shown
    under = page.locator(f"{css(page, '#keelBalancingEdit field[name=threshold]')} .x-form-error-wrap-under")
    assert under.is_visible() and "expected a fraction" in under.inner_text()
    screenshot(page, "rebalancing-settings-error")
    assert "lots" not in ui_stack.config.read_text()            # nothing written
    page.evaluate(f"""() => {{ const f = {window}.down('form').getForm();
        f.findField('threshold').setValue('8%'); f.findField('limits.moves').setValue(null); }}""")
    page.click(css(page, "#keelBalancingEdit") + " >> text=OK")
    page.wait_for_function(f"!{window}")
    wait_for(lambda: ui_stack.client.call("GET", "/api/status")["config"]["threshold"] == 0.08)
    assert "threshold: 8%" in ui_stack.config.read_text()


def test_rules_and_schedule_are_written_as_the_config_says_and_read_back(open_ui, ui_stack):
    import yaml
    original = ui_stack.config.read_text()
    try:
        page = open_rebalancing(open_ui)
        window = "Ext.ComponentQuery.query('#keelBalancingEdit')[0]"
        page.click("text=Settings")
        page.wait_for_function(f"{window} && {window}.section !== null")
        form = {"pin": "110: pve1, pve2", "anti_affinity": "db!: 110, 111", "affinity": "web: 102, 120",
                "ignore.tags": "keel-ignore, frozen", "schedule.timezone": "Europe/Berlin",
                "schedule.windows": "mon-fri 22:00-06:00\nsat,sun 00:00-24:00", "guests": "vm, ct"}
        page.evaluate(f"""v => {{ const f = {window}.down('form').getForm();
            Object.keys(v).forEach(k => f.findField(k).setValue(v[k])); }}""", form)
        page.click(css(page, "#keelBalancingEdit") + " >> text=OK")
        page.wait_for_function(f"!{window}")
        section = yaml.safe_load(ui_stack.config.read_text())["balancing"]
        assert section["pin"] == {"110": ["pve1", "pve2"]}
        assert section["anti_affinity"] == [{"name": "db", "strict": False, "guests": ["110", "111"]}]
        assert section["affinity"] == [{"name": "web", "guests": ["102", "120"]}]
        assert section["ignore"] == {"tags": ["keel-ignore", "frozen"]} and section["guests"] == ["vm", "ct"]
        assert section["schedule"] == {"timezone": "Europe/Berlin", "windows": [
            {"days": "mon-fri", "from": "22:00", "to": "06:00"}, {"days": "sat,sun", "from": "00:00", "to": "24:00"}]}
        assert section["interval"] == "3s"                 # a key the form does not show is kept
        page.click("text=Settings")
        page.wait_for_function(f"{window} && {window}.section !== null && {window}.down('form').getForm()"
                               ".findField('pin').getValue() !== ''")
        shown = page.evaluate(f"""k => {{ const f = {window}.down('form').getForm();
            const out = {{}}; k.forEach(n => out[n] = f.findField(n).getValue()); return out; }}""", list(form))
        assert shown == form
    finally:
        ui_stack.client.call("PUT", "/api/config", {"text": original})


def test_apply_migrates_in_the_simulator_while_the_view_follows(open_ui, ui_stack):
    page = open_rebalancing(open_ui)
    plan_loaded(page)
    page.wait_for_function(f"!{PANEL}.down('#applyButton').disabled")
    planned = page.evaluate(f"{PANEL}.planStore.getRange().map(r => [r.get('vmid'), r.get('to')])")
    page.click("text=Apply")
    page.click(".x-message-box >> text=Yes")
    page.wait_for_function(f"{PANEL}.jobId !== null")
    page.wait_for_function(f"{PANEL}.planStore.getRange().some(r => r.get('state') === 'running')")
    screenshot(page, "rebalancing-applying")
    page.wait_for_function(f"{PANEL}.jobId === null", timeout=120_000)
    job_text = page.evaluate(f"{PANEL}.down('#jobPanel').el.dom.textContent")
    assert "done" in job_text
    # the job's moves carry their PVE tasks, and the history shows them
    page.wait_for_function(f"{PANEL}.historyStore.getRange().some(r => r.get('status') === 'ok')")
    done = page.evaluate(f"{PANEL}.historyStore.getRange().filter(r => r.get('status') === 'ok').map(r => r.data)")
    # (HA guests are migrated by PVE's HA manager: no task of Keel's own, so no link)
    engine = ui_stack.client.call("GET", "/api/history?limit=50")["moves"]
    with_task = [m for m in engine if m["status"] == "ok" and m["upid"]]
    assert done and with_task
    page.wait_for_function("n => document.querySelectorAll('.keel-rebalancing a.keel-task').length >= n",
                           arg=len(with_task))
    api = ui_stack.sim.proxmox()
    where = {g["vmid"]: g["node"] for g in api.cluster.resources.get(type="vm")}
    moved = [vmid for vmid, _ in planned if any(m["vmid"] == vmid for m in done)]
    assert moved and all(where[m["vmid"]] == m["target"] for m in done if m["vmid"] in moved[:3])
    # the nodes follow: the view shows the cluster as the simulator has it now
    counts = {}
    for node in where.values():
        counts[node] = counts.get(node, 0) + 1
    page.wait_for_function(f"""c => {PANEL}.nodeStore.getRange().every(r => r.get('guests') === (c[r.get('node')] || 0))""",
                           arg=counts)
    # a task link opens the task viewer
    page.click(".keel-rebalancing a.keel-task >> nth=0")
    viewer = page.wait_for_selector(".x-window >> text=qmigrate")
    assert viewer.is_visible()
    screenshot(page, "rebalancing-task")


def test_maintenance_empties_a_node(open_ui, ui_stack):
    ui_stack.client.call("PUT", "/api/config", {"balancing": {"interval": "3s", "guests": ["vm", "ct"]}})
    assert guests_on(ui_stack.sim, "pve3")
    page = open_rebalancing(open_ui)
    page.click("text=Maintenance")
    window = "Ext.ComponentQuery.query('#keelMaintenance')[0]"
    page.wait_for_function(f"!!{window}")
    page.evaluate(f"() => {{ {window}.down('#node').setValue('pve3'); }}")
    assert "not in maintenance" in page.inner_text(css(page, "#keelMaintenance"))
    page.click(css(page, "#keelMaintenance") + " >> text=Enter maintenance")
    # the confirmation previews what moves where and what stays, with why, before anything moves
    preview = "Ext.ComponentQuery.query('#keelMaintenancePreview')[0]"
    page.wait_for_function(f"!!{preview}")
    moves = page.evaluate(f"{preview}.down('#moves').getStore().getRange().map(r => r.data)")
    stays = page.evaluate(f"{preview}.down('#stays').getStore().getRange().map(r => r.data)")
    assert all(m["to"] != "pve3" and m["detail"] for m in moves) and all(s["reason"] and s["detail"] for s in stays)
    on_node = set(guests_on(ui_stack.sim, "pve3"))
    assert {m["vmid"] for m in moves if m["from"] == "pve3"} | {s["vmid"] for s in stays} == on_node
    assert "pve3" not in ui_stack.client.call("GET", "/api/status")["maintenance"]     # nothing done yet
    screenshot(page, "rebalancing-maintenance-preview")
    page.click(css(page, "#keelMaintenancePreview #confirm"))
    page.wait_for_function(f"{window}.down('#state').el.dom.textContent.includes('in maintenance since')")
    page.wait_for_function(f"{window}.down('#state').el.dom.textContent.includes('Empty: no guest')", timeout=120_000)
    screenshot(page, "rebalancing-maintenance")
    assert guests_on(ui_stack.sim, "pve3") == []
    assert page.evaluate(f"{PANEL}.nodeStore.getById('pve3').get('state')") == "maintenance"
    page.click(css(page, "#keelMaintenance") + " >> text=Leave maintenance")
    page.wait_for_function(f"{window}.down('#state').el.dom.textContent.includes('not in maintenance')")
    assert "pve3" not in ui_stack.client.call("GET", "/api/status")["maintenance"]


def test_proxmox_own_auto_rebalance_is_noticed(open_ui, ui_stack, ui_errors):
    api = ui_stack.sim.proxmox()
    api.cluster.options.put(crs="ha=dynamic,ha-auto-rebalance=1")
    try:
        page = open_rebalancing(open_ui, theme="dark")
        notice = page.wait_for_selector(".keel-notice >> text=auto-rebalance is on")
        assert "Keel leaves HA guests to it" in notice.inner_text()
        screenshot(page, "rebalancing-pve-auto-rebalance-dark")
    finally:
        api.cluster.options.put(crs="ha=static")
