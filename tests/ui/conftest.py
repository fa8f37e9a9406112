"""UI tests: the web UI harness (www/) in Debian's Chromium, driven by Playwright, against a
real ``keel sim`` + keel-engine + ``keel web --harness www``.

* ``ui_stack`` (one per module): the simulator on the demo cluster with its clock sped up,
  the engine leading, keel-web serving the harness; ``.url``, ``.sim``, ``.client``.
* ``browser`` (one per session): /usr/bin/chromium, headless, never a downloaded browser.
* ``open_ui`` (per test): ``open_ui(layout="9", user="root@pam", theme="light", api=None)``
  logs in on a fresh browser context and returns the page with the Datacenter panel shown.
  Any page error or console error fails the test, unless the test allows it by pattern
  (``ui_errors.allow(r"ERR_CONNECTION_REFUSED")``).
* ``screenshot(page, name)`` saves tests/artifacts/ui/<name>.png.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from conftest import DEMO_PASSWORD, DEMO_SCENARIO, ROOT, Sim, start_sim
from keel.engine.client import EngineClient
from service_helpers import services, write_config

CHROMIUM = Path("/usr/bin/chromium")
WWW = ROOT / "www"
ARTIFACTS = ROOT / "tests" / "artifacts" / "ui"
CLOCK_FACTOR = 30.0          # a 30-s migration takes a second
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _prerequisites() -> None:
    missing = []
    if not CHROMIUM.exists():
        missing.append("Debian's chromium (apt-get install chromium)")
    if not (WWW / "node_modules" / "extjs-gpl" / "build" / "ext-all.js").exists():
        missing.append("ExtJS (make extjs; make test does it)")
    if not Path("/usr/share/fonts-font-awesome/css/font-awesome.min.css").exists() and \
            not (WWW / "node_modules" / "font-awesome" / "css" / "font-awesome.min.css").exists():
        missing.append("Font Awesome (apt-get install fonts-font-awesome, or make extjs)")
    if missing:
        pytest.fail("the UI tests need " + ", ".join(missing), pytrace=False)
    subprocess.run(["make", "-s", "-C", str(ROOT), "ui"], check=True, stdout=subprocess.DEVNULL)


@dataclass
class UiStack:
    sim: Sim
    url: str
    client: EngineClient
    config: Path


@pytest.fixture(scope="module")
def ui_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiStack]:
    _prerequisites()
    tmp = tmp_path_factory.mktemp("ui")
    sim = start_sim(DEMO_SCENARIO, tmp / "sim", CLOCK_FACTOR)
    try:
        config = write_config(tmp / "node", sim, balancing={"interval": "3s"})
        with services(config, ("--harness", str(WWW))) as (client, url, _, _):
            yield UiStack(sim, url, client, config)
    finally:
        sim.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright
    _prerequisites()
    with sync_playwright() as playwright:
        # Playwright gives every launch a fresh temporary profile (--user-data-dir).
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
                                              headless=True)
        yield chromium
        chromium.close()


@dataclass
class UiErrors:
    """Page errors and console errors seen during a test; each one fails it."""

    seen: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def allow(self, pattern: str) -> None:
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        return [e for e in self.seen if not any(p.search(e) for p in self.allowed)]


@pytest.fixture
def ui_errors() -> UiErrors:
    return UiErrors()


@pytest.fixture
def open_ui(browser: Any, ui_stack: UiStack, ui_errors: UiErrors) -> Iterator[Callable[..., Any]]:
    contexts: list[Any] = []

    def open_page(layout: str = "9", user: str = "root@pam", theme: str = "light", api: str | None = None,
                  hash: str = "", password: str = DEMO_PASSWORD) -> Any:
        context = browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": 1000})
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda err: ui_errors.seen.append(f"page error: {err}"))
        page.on("console", lambda msg: msg.type == "error" and ui_errors.seen.append(
            f"console error: {msg.text} {msg.location}"))
        query = f"?layout={layout}&theme={theme}" + (f"&api={api}" if api else "")
        page.goto(f"{ui_stack.url}/harness/{query}")
        page.wait_for_function("window.Ext && Ext.isReady && Ext.ComponentQuery.query('#harnessLogin').length")
        page.evaluate("""([user, password]) => {
            const form = Ext.ComponentQuery.query('#harnessLogin form')[0].getForm();
            form.setValues({username: user, password: password}); }""", [user, password])
        with page.expect_navigation():
            page.click("#harness-login-button")       # reloads the page, logged in
        wait_for_datacenter(page)
        if hash:
            page.goto(page.url.split("#")[0] + hash)
            page.reload()
            wait_for_datacenter(page)
        return page

    yield open_page
    for context in contexts:
        context.close()
    unexpected = ui_errors.unexpected()
    assert not unexpected, "errors in the page:\n" + "\n".join(unexpected)


def wait_for_datacenter(page: Any) -> None:
    page.wait_for_function("window.Ext && Ext.isReady && Ext.ComponentQuery.query('#dcConfig').length > 0 "
                           "&& Ext.ComponentQuery.query('#dcConfig')[0].rendered")


def menu_items(page: Any) -> list[tuple[str, str | None]]:
    """The Datacenter menu as (itemId, parent itemId) in tree order."""
    return [tuple(x) for x in page.evaluate("""() => {
        const out = [];
        Ext.ComponentQuery.query('#dcConfig')[0].store.getRoot().cascadeBy(n => {
            if (!n.isRoot()) { out.push([n.getId(), n.parentNode.isRoot() ? null : n.parentNode.getId()]); }
        });
        return out; }""")]


def select_tab(page: Any, item_id: str) -> None:
    page.evaluate("id => { const dc = Ext.ComponentQuery.query('#dcConfig')[0];"
                  " dc.down('#menu').setSelection(dc.store.getNodeById(id)); }", item_id)
    page.wait_for_function("id => { const c = Ext.ComponentQuery.query('#dcConfig')[0].down('#cards');"
                           " return c.getLayout().getActiveItem().itemId === id; }", arg=item_id)


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def make_user(sim: Sim, userid: str, password: str = DEMO_PASSWORD) -> None:
    """A PVE user with no privileges at all (not even Sys.Audit)."""
    api = sim.proxmox(user="root@pam", password=DEMO_PASSWORD)
    existing = {u["userid"] for u in api.access.users.get()}
    if userid not in existing:
        api.access.users.post(userid=userid, password=password)



