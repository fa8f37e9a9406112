"""Datacenter -> HA -> Rebalancing and Runners: on PVE 8's and 9's layouts, only with
Sys.Audit, deep links, and a plugin fault that never breaks the Datacenter panel."""

from __future__ import annotations

import pytest

from ui.conftest import make_user, menu_items, screenshot, select_tab, wait_for_datacenter

HA_8 = [("ha-groups", "ha"), ("ha-fencing", "ha"), ("keel-rebalancing", "ha"), ("keel-runners", "ha")]
HA_9 = [("ha-rules", "ha"), ("ha-fencing", "ha"), ("keel-rebalancing", "ha"), ("keel-runners", "ha")]


@pytest.mark.parametrize("layout,ha", [("8", HA_8), ("9", HA_9)])
def test_the_tabs_appear_under_ha_on_both_layouts(open_ui, layout, ha):
    page = open_ui(layout=layout)
    items = menu_items(page)
    assert [i for i in items if i[1] == "ha"] == ha
    assert ("ha", None) in items
    select_tab(page, "keel-rebalancing")
    page.wait_for_selector(".keel-rebalancing-summary")
    screenshot(page, f"menu-pve{layout}")


def test_no_tabs_without_sys_audit(open_ui, ui_stack):
    make_user(ui_stack.sim, "nobody@pve")
    page = open_ui(user="nobody@pve")
    ids = [item for item, _ in menu_items(page)]
    assert "keel-rebalancing" not in ids and "keel-runners" not in ids
    assert "ha" not in ids and "search" in ids         # PVE shows no HA group either


def test_an_auditor_sees_them(open_ui):
    page = open_ui(user="auditor@pve", layout="8")
    assert ("keel-rebalancing", "ha") in menu_items(page)


def test_a_deep_link_opens_the_tab(open_ui):
    page = open_ui(hash="#v1:0:=keel-rebalancing")
    page.wait_for_function("Ext.ComponentQuery.query('#dcConfig')[0].down('#cards')"
                           ".getLayout().getActiveItem().itemId === 'keel-rebalancing'")
    assert page.evaluate("window.location.hash") == "#v1:0:=keel-rebalancing"
    select_tab(page, "keel-runners")
    assert page.evaluate("window.location.hash") == "#v1:0:=keel-runners"


def test_keel_web_down_shows_the_notice_and_the_panel_works(open_ui, ui_errors):
    from service_helpers import free_port
    ui_errors.allow(r"ERR_CONNECTION_REFUSED")
    page = open_ui(api=f"https://127.0.0.1:{free_port()}")
    select_tab(page, "keel-rebalancing")
    page.wait_for_selector(".keel-notice >> text=systemctl status keel-web")
    text = page.inner_text(".keel-notice")
    assert "certificate is not trusted" in text and "/api" not in text
    screenshot(page, "rebalancing-unreachable")
    select_tab(page, "ha-fencing")                      # the rest of Datacenter still works
    select_tab(page, "keel-rebalancing")


def test_a_fault_in_the_menu_code_leaves_the_datacenter_panel_whole(open_ui, ui_errors, ui_stack, browser):
    ui_errors.allow(r"keel: could not add the Rebalancing and Runners items")
    page = open_ui()
    page.goto(page.url.split("#")[0].replace("?layout=9", "?layout=9&fault=menu"))
    wait_for_datacenter(page)
    items = menu_items(page)
    assert ("ha-rules", "ha") in items and ("ha-fencing", "ha") in items
    assert not [i for i in items if i[0].startswith("keel-")]
    assert any("could not add" in e for e in ui_errors.seen)
