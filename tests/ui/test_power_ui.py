"""Power saving on the Rebalancing tab, in the harness against the real services on the
power cluster (``keel sim``, its clock 60 times real time): a quiet cluster consolidates,
and the tab shows the node sleeping since when, the energy estimate and the sleep's reason."""

from __future__ import annotations

import contextlib
import os

import pytest

from conftest import start_sim
from integration.test_power_sleep import fake_ha_manager, POWER, TOKEN
from service_helpers import services, wait_for, write_config
from ui.conftest import WWW, UiStack, _prerequisites, screenshot, select_tab

PANEL = "Ext.ComponentQuery.query('pveKeelRebalancing')[0]"
POWER_PANEL = f"{PANEL}.down('#power')"


@contextlib.contextmanager
def power_stack(tmp, mode):
    """The power cluster (keel sim, its clock x60, the guests quiet, every node waking when
    asked), the fake ha-manager on PATH, keel-engine with power saving in ``mode`` on pve5 to
    pve8 and keel-web serving the harness: the UI tests' stack (test_power_actions_ui too)."""
    _prerequisites()
    sim = start_sim(POWER, tmp / "sim", 60)
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = fake_ha_manager(sim, tmp / "bin")      # as in test_power_sleep
    try:
        for n in ("pve5", "pve6", "pve7", "pve8"):
            sim.control("POST", f"nodes/{n}", {"next_wake": "normal"})
        for g in sim.client(TOKEN).get("/cluster/resources", type="vm"):
            sim.control("POST", f"guests/{g['vmid']}", {"cpu": 0.02, "profile": None})
        config = write_config(tmp / "node", sim, api_token=TOKEN, balancing={
            "interval": "2s", "window": "3s", "guests": ["vm", "ct"],
            "power": {"mode": mode, "nodes": ["pve5", "pve6", "pve7", "pve8"], "hold": "2s",
                      "wake_test_max_age": "off", "wake_timeout": "20s",
                      "watts_per_node": {"default": 150, "pve5": 90}}})
        with services(config, ("--harness", str(WWW))) as (client, url, _, _):
            yield UiStack(sim, url, client, config)
    finally:
        os.environ["PATH"] = path
        sim.stop()


@pytest.fixture(scope="module")
def ui_stack(tmp_path_factory):
    with power_stack(tmp_path_factory.mktemp("power-ui"), "automatic") as stack:
        yield stack


@pytest.mark.parametrize("layout,theme", [("9", "light"), ("8", "dark")])
def test_the_tab_shows_each_nodes_power_state_and_the_energy_saved(open_ui, ui_stack, layout, theme):
    client = ui_stack.client
    wait_for(lambda: any(n["state"] == "sleeping" for n in client.call("GET", "/api/power")["nodes"]), timeout=120)
    page = open_ui(layout=layout, theme=theme, password="keel-power")
    select_tab(page, "keel-rebalancing")
    page.wait_for_function(f"{POWER_PANEL} && {POWER_PANEL}.isVisible() && "
                           f"{POWER_PANEL}.nodeStore.getRange().some(r => r.get('state') === 'sleeping')")
    asleep = page.evaluate(f"{POWER_PANEL}.nodeStore.getRange().filter(r => r.get('state') === 'sleeping')"
                           f".map(r => r.get('node'))")
    assert asleep and set(asleep) <= {"pve5", "pve6", "pve7", "pve8"}
    text = page.inner_text(".keel-power")
    assert "sleeping since" in text and "awake" in text
    assert "node-hours asleep" in text and "kWh saved" in text and "automatic" in text
    assert "load stayed low" in text                       # the sleep's reason, in the events
    # the Nodes grid says a node Keel put to sleep is asleep, not a red "offline"
    page.wait_for_function(f"{PANEL}.nodeStore.getById({asleep[0]!r}) && "
                           f"{PANEL}.nodeStore.getById({asleep[0]!r}).get('state') === 'asleep'")
    grid = page.evaluate(f"{PANEL}.down('#nodes').getId()")
    assert f"{asleep[0]} (asleep)" in page.inner_text(f"#{grid}")
    page.locator(".keel-power").scroll_into_view_if_needed()
    screenshot(page, f"rebalancing-power-pve{layout}-{theme}")
