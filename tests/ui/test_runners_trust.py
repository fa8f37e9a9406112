"""The Runners tab's part of issue 16 in the harness (Debian's Chromium) on the runners'
stack: a runner group GitHub lacks reads MISCONFIGURED (not UNREACHABLE), a refused config
file is said, the Job column links to the job's repository, the wait chart has a time
axis, the panel polls only the fields it reads; screenshots at 1280x800 and 1920x1080,
light and dark (DOCS_SCREENSHOTS=1 also writes them to docs/images/)."""

from __future__ import annotations

import os

import pytest

from conftest import ROOT
from runners_helpers import SMALL_SET, runners_stack
from service_helpers import wait_for
from ui.conftest import WWW, UiStack, _prerequisites, screenshot, select_tab

WRONG_GROUP = {"name": "keel-wrong-group", "max_runners": 1, "runner_group": "no-such-group",
               "providers": [{"name": "pve", "runner": {"cores": 2, "memory": "4GiB"}}]}
PANEL = "Ext.ComponentQuery.query('pveKeelRunners')[0]"


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    _prerequisites()
    with runners_stack(tmp_path_factory.mktemp("ui-runners-trust"), scale_sets=[SMALL_SET, WRONG_GROUP],
                       web_args=("--harness", str(WWW))) as stack:
        yield stack


@pytest.fixture(scope="module")
def ui_stack(runners):
    return UiStack(runners.sim, runners.url, runners.client, runners.config)


def open_runners(open_ui, theme="light", size=(1280, 800), answers=None):
    page = open_ui(theme=theme)
    page.set_viewport_size({"width": size[0], "height": size[1]})
    if answers is not None:
        page.on("response", lambda r: "/api/runners?" in r.url and r.status == 200 and answers.append(r.json()))
    select_tab(page, "keel-runners")
    page.wait_for_function(f"{PANEL} && {PANEL}.down('#scaleSets').getStore().getCount() === 2")
    return page


def rows(page, item_id):
    return page.evaluate("id => Ext.ComponentQuery.query('pveKeelRunners')[0].down('#' + id).getStore()"
                         ".getRange().map(r => r.getData())", item_id)


def test_a_wrong_runner_group_reads_misconfigured_not_unreachable(open_ui, runners):
    page = open_runners(open_ui)
    row = wait_for(lambda: next((r for r in rows(page, "scaleSets") if r["name"] == "keel-wrong-group"
                                 and r["state"] != "STARTING"), None), timeout=30)
    assert row["state"] == "MISCONFIGURED" and "no-such-group" in " ".join(row["details"])
    good = wait_for(lambda: next((r for r in rows(page, "scaleSets") if r["name"] == "keel-c2-m4"
                                  and r["state"] == "LISTENING"), None), timeout=30)
    assert good
    page.wait_for_selector("text=MISCONFIGURED")
    assert page.locator(".critical.fa-times-circle").count() >= 1


def test_the_job_links_to_its_repository_and_the_waits_have_a_time_axis(open_ui, runners):
    answers: list = []
    page = open_runners(open_ui, answers=answers)
    wait_for(lambda: any(r["state"] == "LISTENING" for r in rows(page, "scaleSets")), timeout=30)
    [job] = runners.gh("POST", "jobs", {"labels": ["keel-c2-m4"], "duration": 8})["ids"]
    row = wait_for(lambda: [r for r in rows(page, "runners") if str(r["job"]) == str(job)], timeout=60)[0]
    assert row["job_repo"] and row["job_url"].startswith("https://") and row["job_url"].endswith(
        f"/{row['job_repo']}/actions")
    link = page.wait_for_selector(f"a[href='{row['job_url']}']")
    assert str(job) in link.inner_text() and link.get_attribute("rel") == "noopener noreferrer"
    page.wait_for_selector(".keel-wait-bar", timeout=90_000)
    ticks = page.locator(".keel-wait-axis .keel-wait-tick")
    assert ticks.count() == 5 and all(":" in t for t in ticks.all_inner_texts())
    # only the fields the panel reads: not the recent jobs (93 % of an answer before)
    assert answers and all("jobs" not in a["data"] and "scale_sets" in a["data"] for a in answers)


def test_a_refused_config_file_is_said(open_ui, runners):
    page = open_runners(open_ui)
    original = runners.config.read_text()
    try:
        runners.config.write_text(original + "\nbalancing: [not, a, mapping\n")
        page.wait_for_selector(".keel-notice >> text=The config file was refused", timeout=30_000)
        screenshot(page, "runners-config-refused")
    finally:
        runners.config.write_text(original)
    page.wait_for_selector(".keel-notice >> text=The config file was refused", state="hidden", timeout=30_000)


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080)])
def test_runners_screenshots(open_ui, runners, theme, size):
    page = open_runners(open_ui, theme=theme, size=size)
    wait_for(lambda: any(r["state"] == "LISTENING" for r in rows(page, "scaleSets")), timeout=30)
    page.wait_for_timeout(500)
    name = f"runners-{size[0]}-{theme}"
    screenshot(page, name)
    if os.environ.get("DOCS_SCREENSHOTS"):
        (ROOT / "docs" / "images").mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ROOT / "docs" / "images" / f"{name}.png"))
    # the charts at the foot of the tab: the queue and busy runners over time
    page.wait_for_function("() => Ext.ComponentQuery.query('pveKeelRunners')[0].down('#activity').items.getCount()")
    page.evaluate("Ext.ComponentQuery.query('pveKeelRunners')[0].down('#activity').getEl().dom.scrollIntoView()")
    page.wait_for_timeout(300)
    screenshot(page, f"{name}-activity")
