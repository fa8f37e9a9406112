"""One imbalance figure (docs/balancing.md, "The imbalance"): for the same plan, ``keel plan``
(the CLI, straight at PVE), ``/api/plan`` (keel-engine, through keel-web) and the
Rebalancing tab show the same imbalance before and after, the same reason with the same
percentage, and that percentage is the cut of the figure shown; ``keel status`` and the
tab's summary show the same figure, with PVE's CRS figure beside it by name.  The
simulator's clock stands still, so every plan made here is the same plan."""

from __future__ import annotations

import io
import re
from typing import Any, Iterator

import pytest
import requests

from conftest import DEMO_PASSWORD, DEMO_SCENARIO, start_sim
from keel.cli import Env, main
from service_helpers import services, write_config
from ui.conftest import WWW, UiStack, _prerequisites, select_tab

PANEL = "Ext.ComponentQuery.query('pveKeelRebalancing')[0]"


@pytest.fixture(scope="module")
def ui_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiStack]:
    _prerequisites()
    tmp = tmp_path_factory.mktemp("ui-figure")
    sim = start_sim(DEMO_SCENARIO, tmp / "sim", 0.0)
    try:
        config = write_config(tmp / "node", sim, balancing={"interval": "3s"})
        with services(config, ("--harness", str(WWW))) as (client, url, _, _):
            yield UiStack(sim, url, client, config)
    finally:
        sim.stop()


def cli(argv: list[str], stack: UiStack, tmp_path: Any) -> str:
    out, err = io.StringIO(), io.StringIO()
    status = main([*argv, "--config", str(stack.config)],
                  Env(stdout=out, stderr=err, environ={"KEEL_STORE": str(tmp_path / "cli.db")}))
    assert status == 0, err.getvalue()
    return out.getvalue()


def test_cli_api_and_ui_agree_on_the_imbalance_of_the_same_plan(open_ui, ui_stack, tmp_path):
    page = open_ui()
    select_tab(page, "keel-rebalancing")
    page.wait_for_function(f"{PANEL} && {PANEL}.plan && {PANEL}.status && {PANEL}.status.last_round")
    shown: dict[str, Any] = page.evaluate(f"{PANEL}.plan")              # what /api/plan answered the UI
    title = page.evaluate(f"{PANEL}.down('#plan').getTitle()")
    summary = page.inner_text(".keel-rebalancing-summary")

    login = requests.post(ui_stack.url + "/harness/login", json={"username": "root@pam", "password": DEMO_PASSWORD},
                          verify=False, timeout=30).json()["data"]
    api = requests.get(ui_stack.url + "/api/plan", headers={"Authorization": f"PVEAuthCookie={login['ticket']}"},
                       verify=False, timeout=60).json()["data"]
    text = cli(["plan", "--direct"], ui_stack, tmp_path)

    before, after = api["before"]["imbalance"], api["after"]["imbalance"]
    b, a = f"{before['keel']:.2f}", f"{after['keel']:.2f}"
    assert api["verdict"] == shown["verdict"] == "PLANNED" and api["reason"] == shown["reason"]
    assert (shown["before"]["imbalance"]["keel"], shown["after"]["imbalance"]["keel"]) == (before["keel"], after["keel"])
    # the CLI made the same plan from PVE directly
    assert text.splitlines()[0] == f"PLANNED: {api['reason']}"
    assert f"Imbalance {b} → {a} (typical distance of a node from the cluster average)" in text
    assert f"PVE's CRS figure {before['pve']:.2f} → {after['pve']:.2f}" in text
    # the UI's title: the same reason and the same figures
    assert api["reason"] in title and f"imbalance {b} " in title and f" {a}, fullest node" in title
    # the percentage is the cut of the figure shown
    found = re.search(r"cuts the imbalance by (\d+)% \((\d\.\d\d) → (\d\.\d\d)\)", api["reason"])
    assert found, api["reason"]
    percent, start, end = int(found.group(1)), float(found.group(2)), float(found.group(3))
    assert end == float(a)
    assert abs(percent - 100 * (1 - end / start)) <= 1.5          # the reason's figures, rounded to 0.01

    # keel status and the tab's summary: the same figure, PVE's beside it by name
    status = cli(["status"], ui_stack, tmp_path).splitlines()[2]
    figure = re.match(r"Imbalance (\d\.\d\d) \(typical distance of a node from the cluster average\) · "
                      r"PVE's CRS figure (\d\.\d\d) · ", status)
    assert figure, status
    assert figure.group(1) == b
    row = next(line for line in summary.splitlines() if "threshold" in line)
    assert row.strip().startswith(f"{b} (threshold 0.10)") and f"PVE's CRS figure {figure.group(2)}" in row, summary


def test_bar_before_and_title_agree_on_the_demo_cluster(open_ui):
    """Issue 16, finding 1: the bars, the "after the plan" column, the summary and the plan's
    title are one set of figures (the plan's load model), labelled as what they are."""
    page = open_ui()
    page.set_viewport_size({"width": 1280, "height": 800})
    select_tab(page, "keel-rebalancing")
    page.wait_for_function(f"{PANEL} && {PANEL}.plan && {PANEL}.model && {PANEL}.nodeStore.getCount() === 5")
    data = page.evaluate(f"""() => {{ const p = {PANEL};
        return {{plan: p.plan, model: p.model, title: p.down('#plan').getTitle(),
                 summary: p.summaryStore.getById('imbalance').get('value'),
                 rows: p.nodeStore.getRange().map(r => r.data),
                 cpuText: p.down('#cpuColumn').text}}; }}""")
    plan, model = data["plan"], data["model"]
    before = plan["before"]["imbalance"]["keel"]
    # the title's "before", the summary's figure and the model the bars draw are one figure
    assert f"imbalance {before:.2f} " in data["title"]
    assert re.sub("<[^>]+>", "", data["summary"]).strip().startswith(f"{before:.2f} (threshold")
    assert abs(model["imbalance"]["keel"] - before) < 0.005
    # each bar is the plan's before, and the "after" column starts from it
    for row in data["rows"]:
        planned = plan["before"]["nodes"][row["node"]]
        assert abs(row["cpu"] - planned["cpu"]) < 0.005 and abs(row["mem"] - planned["memory"]) < 0.005
        if row["after_cpu"] is not None:
            assert row["plan_cpu"] == planned["cpu"]
    # labelled: averaged over N min (or now, before samples)
    assert "avg." in data["cpuText"] or "(now)" in data["cpuText"]
    # the bar's text is PVE's: "x% of N CPU(s)", "x% (a GiB of b GiB)"
    texts = page.evaluate(f"""() => Array.from(document.querySelectorAll(
        '#' + {PANEL}.down('#nodes').id + ' .x-progress-text')).map(e => e.textContent)""")
    assert any(re.search(r"\d+\.\d\d% of \d+ CPU\(s\)", t) for t in texts), texts
    assert any(re.search(r"\d+\.\d\d% \(\d+\.\d\d GiB of \d+\.\d\d GiB\)", t) for t in texts), texts


