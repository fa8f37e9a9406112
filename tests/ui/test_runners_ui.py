# SPDX-License-Identifier: AGPL-3.0-or-later
"""Datacenter -> HA -> Runners in the harness (Debian's Chromium) against the simulator's
fake GitHub + keel-engine hosting the runners + keel-web: the view follows a job (a
runner VM appears, runs it, goes away), scale-set states in words, a bad setting's error
beside its field, a secret never shown back nor in any answer, test connection (success
and a named failure), the wait chart, light and dark screenshots, no console errors."""

from __future__ import annotations

import json

import pytest
import requests

from runners_helpers import TOKEN, runners_stack
from service_helpers import wait_for
from ui.conftest import WWW, UiStack, _prerequisites, screenshot, select_tab

AUTH = {"Authorization": f"PVEAPIToken={TOKEN}"}


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    _prerequisites()
    with runners_stack(tmp_path_factory.mktemp("ui-runners"), web_args=("--harness", str(WWW))) as stack:
        yield stack


@pytest.fixture(scope="module")
def ui_stack(runners):
    """The core's ``open_ui`` on the runners' stack (the demo cluster has no fake GitHub)."""
    return UiStack(runners.sim, runners.url, runners.client, runners.config)


@pytest.fixture
def answers():
    """The text of every answer keel-web gave the page."""
    return []


def open_runners(open_ui, answers, theme="light"):
    page = open_ui(theme=theme)

    def keep(response):
        if "/api/" in response.url:
            try:
                answers.append(response.text())
            except Exception:         # a redirect or an aborted request has no body
                pass
    page.on("response", keep)
    select_tab(page, "keel-runners")
    page.wait_for_function("() => { const p = Ext.ComponentQuery.query('pveKeelRunners')[0];"
                           " return p && p.down('#scaleSets').getStore().getCount() === 2 && p.settings; }")
    return page


def grid_rows(page, item_id):
    return page.evaluate("id => Ext.ComponentQuery.query('pveKeelRunners')[0].down('#' + id).getStore()"
                         ".getRange().map(r => r.getData())", item_id)


def state_of(page, name):
    return {r["name"]: r["state"] for r in grid_rows(page, "scaleSets")}.get(name)


def edit_window(page, xtype, call):
    """Opens an edit window with ``call`` on the panel and waits for its form."""
    page.evaluate(f"() => {{ const p = Ext.ComponentQuery.query('pveKeelRunners')[0]; {call}; }}")
    page.wait_for_function(f"() => Ext.ComponentQuery.query('{xtype}').length === 1 &&"
                           f" Ext.ComponentQuery.query('{xtype}')[0].rendered")


def set_fields(page, xtype, values):
    page.evaluate("([x, v]) => { const f = Ext.ComponentQuery.query(x)[0].down('#form').getForm();"
                  " Object.keys(v).forEach(k => f.findField(k).setValue(v[k])); }", [xtype, values])


def field_error(page, xtype, name):
    return page.evaluate("([x, n]) => { const w = Ext.ComponentQuery.query(x)[0];"
                         " return w ? w.down('#form').getForm().findField(n).getActiveError() : null; }",
                         [xtype, name])


def press_ok(page, xtype):
    page.evaluate("x => Ext.ComponentQuery.query(x)[0].down('#ok').el.dom.click()", xtype)


def closed(page, xtype):
    return page.evaluate(f"() => Ext.ComponentQuery.query('{xtype}').length === 0")


def test_the_view_follows_a_job_from_the_fake_github(open_ui, runners, answers):
    page = open_runners(open_ui, answers)
    wait_for(lambda: state_of(page, "keel-c2-m4") == "LISTENING", timeout=30)
    assert page.is_visible("text=Scale sets") and page.is_visible("text=Job wait times (queued to started)")
    [job] = runners.gh("POST", "jobs", {"labels": ["keel-c2-m4"], "duration": 8})["ids"]
    row = wait_for(lambda: [r for r in grid_rows(page, "runners") if str(r["job"]) == str(job)], timeout=60)[0]
    assert row["vmid"] and row["node"] and row["state"] == "busy" and row["name"].startswith("keel-c2-m4-")
    page.wait_for_selector(f"text={job}")
    wait_for(lambda: {r["name"]: r for r in grid_rows(page, "scaleSets")}["keel-c2-m4"]["busy"] == 1, timeout=10)
    screenshot(page, "runners-light")
    # the job ends, the VM is deleted, the row goes away; its wait is in the chart
    wait_for(lambda: not [r for r in grid_rows(page, "runners") if r["name"] == row["name"]], timeout=90)
    page.wait_for_selector(".keel-wait-bar", timeout=30000)
    assert page.is_visible("text=keel-c2-m4: 1 jobs")
    # the queue-depth and busy-runner charts (polled every minute): a day's, then the hour's again
    assert page.is_visible("text=Queue and busy runners over time")
    panel = "Ext.ComponentQuery.query('pveKeelRunners')[0]"
    activity = page.evaluate(f"{panel}.down('#activity').getId()")
    for span in ("Day", "Hour"):
        page.click(f"#{activity} >> text={span}")
        seconds = 86400 if span == "Day" else 3600
        page.wait_for_function(f"() => {{ const c = {panel}.down('#busyChart'), s = c && c.getStore();"
                               f" return s && s.getCount() && (s.last().get('time') - s.first().get('time'))"
                               f" === {seconds} * 1000 && s.getRange().some(r => r.get('busy_0') >= 1); }}",
                               timeout=30000)
        titles = page.evaluate(f"Array.prototype.map.call({panel}.down('#busyChart').getSeries(), s => s.getTitle())")
        assert titles == ["keel-c2-m4"]
        assert page.evaluate(f"{panel}.down('#queuedChart').getStore().getCount()") == 61
        assert page.evaluate(f"{panel}.activityPoller.params.span") == ("1d" if span == "Day" else "1h")
    # the time axis follows the span (the chart redraws after its store changed)
    page.wait_for_function(f"() => {{ const r = {panel}.down('#busyChart').getAxes()[1].getRange();"
                           f" return r && Math.abs(r[1] - r[0] - 3600 * 1000) < 1000; }}", timeout=10000)
    page.evaluate(f"{panel}.down('#activity').getEl().dom.scrollIntoView()")
    screenshot(page, "runners-activity-light")


def test_scale_set_states_in_words_and_a_bad_setting_beside_its_field(open_ui, runners, answers):
    page = open_runners(open_ui, answers)
    wait_for(lambda: state_of(page, "keel-c8-m16") == "LISTENING", timeout=30)
    page.wait_for_selector("text=LISTENING")
    # a bad memory size: the server's error is shown beside that provider's memory field
    edit_window(page, "pveKeelScaleSetEdit", "p.editItem('scaleSet', 'keel-c8-m16')")
    set_fields(page, "pveKeelScaleSetEdit", {"memory.pve": "lots", "paused": True})
    press_ok(page, "pveKeelScaleSetEdit")
    error = wait_for(lambda: field_error(page, "pveKeelScaleSetEdit", "memory.pve"), timeout=20)
    assert "lots" in error or "size" in error.lower(), error
    screenshot(page, "runners-bad-setting")
    # corrected, and paused: the state says so
    set_fields(page, "pveKeelScaleSetEdit", {"memory.pve": "16GiB"})
    press_ok(page, "pveKeelScaleSetEdit")
    wait_for(lambda: closed(page, "pveKeelScaleSetEdit"), timeout=20)
    wait_for(lambda: state_of(page, "keel-c8-m16") == "PAUSED", timeout=60)
    page.wait_for_selector("text=PAUSED")
    # a bad GitHub URL: beside the URL field; nothing written
    edit_window(page, "pveKeelGitHubEdit", "p.edit('PVE.keel.GitHubEdit', {})")
    set_fields(page, "pveKeelGitHubEdit", {"url": "http://github.com/my-org"})
    press_ok(page, "pveKeelGitHubEdit")
    error = wait_for(lambda: field_error(page, "pveKeelGitHubEdit", "url"), timeout=20)
    assert "https://" in error, error
    page.evaluate("() => Ext.ComponentQuery.query('pveKeelGitHubEdit')[0].close()")
    # unpaused again through the window
    edit_window(page, "pveKeelScaleSetEdit", "p.editItem('scaleSet', 'keel-c8-m16')")
    set_fields(page, "pveKeelScaleSetEdit", {"paused": False})
    press_ok(page, "pveKeelScaleSetEdit")
    wait_for(lambda: closed(page, "pveKeelScaleSetEdit"), timeout=20)
    wait_for(lambda: state_of(page, "keel-c8-m16") == "LISTENING", timeout=60)


def test_a_secret_is_set_but_never_shown_back(open_ui, runners, answers):
    secret = "ui-webhook-" + "Q7x" * 6
    page = open_runners(open_ui, answers)
    edit_window(page, "pveKeelGitHubEdit", "p.edit('PVE.keel.GitHubEdit', {})")
    set_fields(page, "pveKeelGitHubEdit", {"webhook_secret": "short"})
    press_ok(page, "pveKeelGitHubEdit")
    error = wait_for(lambda: field_error(page, "pveKeelGitHubEdit", "webhook_secret"), timeout=20)
    assert "16 to 256" in error
    set_fields(page, "pveKeelGitHubEdit", {"webhook_secret": secret})
    press_ok(page, "pveKeelGitHubEdit")
    wait_for(lambda: closed(page, "pveKeelGitHubEdit"), timeout=20)
    assert (runners.secrets / "github-webhook-secret").read_text() == secret
    # opened again: the field is empty and says "set"; the key's field too
    edit_window(page, "pveKeelGitHubEdit", "p.edit('PVE.keel.GitHubEdit', {})")
    shown = page.evaluate("() => { const f = Ext.ComponentQuery.query('pveKeelGitHubEdit')[0].down('#form')"
                          ".getForm(); return ['webhook_secret', 'app_private_key'].map(n => "
                          "[f.findField(n).getValue(), f.findField(n).emptyText]); }")
    assert shown[0][0] == "" and shown[0][1].startswith("set") and shown[1][1].startswith("set"), shown
    screenshot(page, "runners-github-edit")
    page.evaluate("() => Ext.ComponentQuery.query('pveKeelGitHubEdit')[0].close()")
    assert secret not in page.content()
    assert answers and not [a for a in answers if secret in a or "PRIVATE KEY-----" in a]
    for path in ("/api/runners", "/api/runners/settings", "/api/config", "/api/status", "/api/runners/jobs"):
        text = requests.get(runners.url + path, headers=AUTH, verify=runners.sim.cert, timeout=30).text
        assert secret not in text, path


def test_test_connection_reports_success_and_names_a_failure(open_ui, runners, answers):
    page = open_runners(open_ui, answers)
    page.click("text=Test connection")
    page.wait_for_selector("text=GitHub and every provider answered", timeout=30000)
    checks = page.evaluate("() => Ext.ComponentQuery.query('pveKeelRunnerTest')[0].down('#results')"
                           ".getStore().getRange().map(r => [r.get('check'), r.get('ok')])")
    assert ["GitHub credentials", True] in checks and ["provider pve: template 9000", True] in checks
    screenshot(page, "runners-test-ok")
    page.evaluate("() => Ext.ComponentQuery.query('pveKeelRunnerTest')[0].close()")
    # a template that does not exist: named
    settings = requests.get(runners.url + "/api/runners/settings", headers=AUTH, verify=runners.sim.cert,
                            timeout=30).json()["data"]["settings"]
    broken = json.loads(json.dumps(settings))
    broken["scale_sets"][0]["providers"][0]["runner"]["template"] = 9100
    put = requests.put(runners.url + "/api/runners/settings", headers=AUTH, verify=runners.sim.cert, timeout=30,
                       data=json.dumps({"settings": broken}))
    assert put.status_code == 200, put.text
    try:
        page.click("text=Test connection")
        page.wait_for_selector("text=Failed: provider pve: template 9100", timeout=30000)
        page.wait_for_selector("text=VM 9100 does not exist")
        screenshot(page, "runners-test-failed")
        page.evaluate("() => Ext.ComponentQuery.query('pveKeelRunnerTest')[0].close()")
    finally:
        requests.put(runners.url + "/api/runners/settings", headers=AUTH, verify=runners.sim.cert, timeout=30,
                     data=json.dumps({"settings": settings}))


def test_dark_theme_and_an_auditor_sees_but_cannot_change(open_ui, runners, answers):
    page = open_runners(open_ui, answers, theme="dark")
    wait_for(lambda: state_of(page, "keel-c2-m4") == "LISTENING", timeout=60)
    page.wait_for_function("() => Ext.ComponentQuery.query('pveKeelRunners')[0].lastWaits")   # the chart drawn
    screenshot(page, "runners-dark")
    page = open_ui(user="auditor@pve")
    select_tab(page, "keel-runners")
    page.wait_for_function("() => { const p = Ext.ComponentQuery.query('pveKeelRunners')[0];"
                           " return p && p.down('#scaleSets').getStore().getCount() === 2; }")
    page.evaluate("() => { const g = Ext.ComponentQuery.query('pveKeelRunners')[0].down('#scaleSets');"
                  " g.getSelectionModel().select(0); }")
    disabled = page.evaluate("() => ['#github', '#test', '#scaleSetAdd', '#providerAdd', '#scaleSetpause',"
                             " '#scaleSetdrain', '#scaleSetresume'].map(id =>"
                             " Ext.ComponentQuery.query('pveKeelRunners')[0].down(id).isDisabled())")
    assert disabled == [True] * 7


def test_a_size_that_never_fits_is_shown_backing_off_in_words(open_ui, runners, answers):
    get = requests.get(runners.url + "/api/runners/settings", headers=AUTH, verify=runners.sim.cert, timeout=30)
    settings = get.json()["data"]["settings"]
    huge = json.loads(json.dumps(settings))
    huge["scale_sets"].append({"name": "keel-c8-m128", "max_runners": 1,
                               "providers": [{"name": "pve", "runner": {"cores": 8, "memory": "128GiB"}}]})
    put = requests.put(runners.url + "/api/runners/settings", headers=AUTH, verify=runners.sim.cert, timeout=30,
                       data=json.dumps({"settings": huge}))
    assert put.status_code == 200, put.text
    try:
        page = open_ui()
        select_tab(page, "keel-runners")
        page.wait_for_function("() => { const p = Ext.ComponentQuery.query('pveKeelRunners')[0];"
                               " return p && p.down('#scaleSets').getStore().getById('keel-c8-m128'); }",
                               timeout=60000)
        wait_for(lambda: state_of(page, "keel-c8-m128") == "LISTENING", timeout=60)
        runners.gh("POST", "jobs", {"labels": ["keel-c8-m128"], "duration": 5})
        wait_for(lambda: state_of(page, "keel-c8-m128") == "BACKING OFF", timeout=60)
        details = {r["name"]: r["details"] for r in grid_rows(page, "scaleSets")}["keel-c8-m128"]
        assert any("backing off pve until" in d and "no node could ever hold" in d for d in details), details
        page.wait_for_selector("text=BACKING OFF")
        screenshot(page, "runners-backing-off")
    finally:
        requests.put(runners.url + "/api/runners/settings", headers=AUTH, verify=runners.sim.cert, timeout=30,
                     data=json.dumps({"settings": settings}))


def windows_of(page, rows):
    page.evaluate("rows => { const s = Ext.ComponentQuery.query('pveKeelScaleSetEdit')[0].down('#windows')"
                  ".getStore(); s.removeAll(); s.add(rows); }", rows)


def test_a_schedule_window_takes_a_scale_set_off_schedule(open_ui, runners, answers):
    page = open_runners(open_ui, answers)
    wait_for(lambda: state_of(page, "keel-c8-m16") == "LISTENING", timeout=60)
    edit_window(page, "pveKeelScaleSetEdit", "p.editItem('scaleSet', 'keel-c8-m16')")
    windows_of(page, [{"days": "mon-sun", "from": "25:00", "to": "24:00", "max_runners": 0}])
    set_fields(page, "pveKeelScaleSetEdit", {"schedule.timezone": "Mars/Olympus"})
    press_ok(page, "pveKeelScaleSetEdit")
    error = wait_for(lambda: field_error(page, "pveKeelScaleSetEdit", "schedule.timezone"), timeout=20)
    assert "Mars/Olympus" in error, error
    listed = page.evaluate("() => Ext.ComponentQuery.query('pveKeelScaleSetEdit')[0].down('#errors').el.dom"
                           ".textContent")
    assert "runners.scale_sets[1].schedule.windows[0].from" in listed, listed
    windows_of(page, [{"days": "mon-sun", "from": "00:00", "to": "24:00", "max_runners": 0}])
    set_fields(page, "pveKeelScaleSetEdit", {"schedule.timezone": "Europe/Vilnius"})
    screenshot(page, "runners-schedule-edit")
    press_ok(page, "pveKeelScaleSetEdit")
    wait_for(lambda: closed(page, "pveKeelScaleSetEdit"), timeout=20)
    text = runners.config.read_text()
    assert "timezone: Europe/Vilnius" in text and "max_runners: 0" in text
    wait_for(lambda: state_of(page, "keel-c8-m16") == "OFF SCHEDULE", timeout=60)
    page.wait_for_selector("text=OFF SCHEDULE")
    screenshot(page, "runners-off-schedule")
    # the window removed: listening again, and no schedule left in the file
    edit_window(page, "pveKeelScaleSetEdit", "p.editItem('scaleSet', 'keel-c8-m16')")
    windows_of(page, [])
    press_ok(page, "pveKeelScaleSetEdit")
    wait_for(lambda: closed(page, "pveKeelScaleSetEdit"), timeout=20)
    wait_for(lambda: state_of(page, "keel-c8-m16") == "LISTENING", timeout=60)
    assert "schedule" not in runners.config.read_text()


def test_the_queue_shows_a_waiting_job_and_a_scale_set_is_paused_and_resumed(open_ui, runners, answers):
    page = open_runners(open_ui, answers)
    wait_for(lambda: state_of(page, "keel-c2-m4") == "LISTENING", timeout=60)
    runners.gh("POST", "faults", {"slow_boot": {"count": 1, "delay": 20}})       # its runner comes late
    [job] = runners.gh("POST", "jobs", {"labels": ["keel-c2-m4"], "duration": 3, "name": "lint"})["ids"]
    [row] = wait_for(lambda: [r for r in grid_rows(page, "queue") if r["job_id"] == str(job)], timeout=30)
    assert (row["scale_set"], row["repo"], row["workflow"]) == ("keel-c2-m4", "my-org/app", ".github/workflows/ci.yml")
    assert row["name"] == "lint"
    page.wait_for_selector("text=Waiting jobs (1)")
    screenshot(page, "runners-queue")
    wait_for(lambda: {r["name"]: r for r in grid_rows(page, "scaleSets")}["keel-c2-m4"]["waiting"] == 1, timeout=10)
    # pause with the button (confirmed), then resume
    page.evaluate("() => { const g = Ext.ComponentQuery.query('pveKeelRunners')[0].down('#scaleSets');"
                  " g.getSelectionModel().select(g.getStore().getById('keel-c8-m16')); }")
    page.evaluate("() => Ext.ComponentQuery.query('pveKeelRunners')[0].down('#scaleSetpause').el.dom.click()")
    page.wait_for_selector("text=No new runners")
    page.click("text=Yes")
    wait_for(lambda: state_of(page, "keel-c8-m16") == "PAUSED", timeout=30)
    details = {r["name"]: r["details"] for r in grid_rows(page, "scaleSets")}["keel-c8-m16"]
    assert any(d.startswith("paused by web:root@pam") for d in details), details
    page.evaluate("() => Ext.ComponentQuery.query('pveKeelRunners')[0].down('#scaleSetresume').el.dom.click()")
    wait_for(lambda: state_of(page, "keel-c8-m16") == "LISTENING", timeout=30)
    wait_for(lambda: not grid_rows(page, "queue"), timeout=60)               # the job got its runner


def test_a_template_per_node_is_typed_in_the_providers_window(open_ui, runners, answers):
    page = open_runners(open_ui, answers)
    edit_window(page, "pveKeelProviderEdit", "p.editItem('provider', 'pve')")
    set_fields(page, "pveKeelProviderEdit", {"runner.template": "pve1=9000, pve2=9001"})
    press_ok(page, "pveKeelProviderEdit")
    wait_for(lambda: closed(page, "pveKeelProviderEdit"), timeout=20)
    assert yaml_runner(runners)["template"] == {"pve1": 9000, "pve2": 9001}
    edit_window(page, "pveKeelProviderEdit", "p.editItem('provider', 'pve')")
    shown = page.evaluate("() => Ext.ComponentQuery.query('pveKeelProviderEdit')[0].down('#form').getForm()"
                          ".findField('runner.template').getValue()")
    assert shown == "pve1=9000, pve2=9001"
    set_fields(page, "pveKeelProviderEdit", {"runner.template": "pve1=x"})
    press_ok(page, "pveKeelProviderEdit")      # checked in each scale set's block: listed above the form
    listed = wait_for(lambda: page.evaluate("() => { const b = Ext.ComponentQuery.query('pveKeelProviderEdit')[0]"
                                            ".down('#errors'); return b.isVisible() && b.el.dom.textContent; }"),
                      timeout=20)
    assert "runner.template.pve1" in listed and "expected a VMID" in listed, listed
    set_fields(page, "pveKeelProviderEdit", {"runner.template": "9000"})
    press_ok(page, "pveKeelProviderEdit")
    wait_for(lambda: closed(page, "pveKeelProviderEdit"), timeout=20)
    assert yaml_runner(runners)["template"] == 9000


def yaml_runner(runners):
    import yaml
    return yaml.safe_load(runners.config.read_text())["runners"]["providers"][0]["runner"]
