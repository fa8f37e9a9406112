#!/usr/bin/env python3
"""``make bench``, what the web UI's tabs cost (docs/ui.md, "What the panels cost"): the
harness in Debian's Chromium against the real keel-web, keel-engine (hosting the runners)
and the simulator with its fake GitHub, each tab open alone, its requests to keel-web
counted with the bytes they took on the wire (headers and the encoded body, gzip where
sent):

* idle: the tab shown, nothing happening, for ``--idle`` seconds;
* hidden: the browser tab hidden (``document.hidden``), for ``--hidden`` seconds;
* during a job: Rebalancing while a maintenance job empties a node, Runners while CI
  jobs are queued and run.

Targets: idle at most 20 requests and 40 KB a minute per tab, hidden 0.  Prints a table;
exits non-zero on a miss.  ``--json FILE`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "backend"))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import DEMO_PASSWORD  # noqa: E402
from runners_helpers import runners_stack  # noqa: E402
from ui.conftest import CHROMIUM, CHROMIUM_ARGS, WWW, _prerequisites, select_tab, wait_for_datacenter  # noqa: E402

IDLE_REQUESTS_MIN = 20
IDLE_KB_MIN = 40.0
READY = {
    "keel-rebalancing": "() => { const p = Ext.ComponentQuery.query('pveKeelRebalancing')[0];"
                        " return p && p.status && p.plan !== undefined && p.chartNodes; }",
    "keel-runners": "() => { const p = Ext.ComponentQuery.query('pveKeelRunners')[0];"
                    " return p && p.down('#scaleSets').getStore().getCount() > 0 && p.settings; }",
}
HIDE = """() => { Object.defineProperty(document, 'hidden', {value: true, configurable: true});
    Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});
    document.dispatchEvent(new Event('visibilitychange')); }"""


class Meter:
    """Requests to keel-web's /api/ and the bytes of their answers as received."""

    def __init__(self, page: Any, base: str) -> None:
        self.base = base
        self.requests = 0
        self.bytes = 0
        self.paths: dict[str, int] = {}
        page.on("requestfinished", self.finished)
        page.on("requestfailed", lambda request: self.count(request, 0))

    def count(self, request: Any, size: int) -> None:
        if request.url.startswith(self.base + "/api/") and request.method != "OPTIONS":
            self.requests += 1
            self.bytes += size
            path = request.url[len(self.base):].split("?")[0]
            self.paths[path] = self.paths.get(path, 0) + 1

    def finished(self, request: Any) -> None:
        try:
            sizes = request.sizes()
            size = sizes["responseBodySize"] + sizes["responseHeadersSize"] + sizes["requestHeadersSize"]
        except Exception:            # an answer the browser could not size still counts as a request
            size = 0
        self.count(request, max(0, size))

    def window(self, page: Any, seconds: float, until: Any = None) -> dict[str, Any]:
        """Counts for ``seconds`` (or until ``until()``, at least 10 s): per minute."""
        r0, b0, p0 = self.requests, self.bytes, dict(self.paths)
        start = time.monotonic()
        while True:
            page.wait_for_timeout(500)
            took = time.monotonic() - start
            if (until is None and took >= seconds) or (until is not None and took >= 10 and until()) \
                    or took >= max(seconds, 600):
                break
        minutes = took / 60
        paths = {k: v - p0.get(k, 0) for k, v in self.paths.items() if v - p0.get(k, 0)}
        return {"seconds": round(took, 1), "requests_min": round((self.requests - r0) / minutes, 1),
                "kb_min": round((self.bytes - b0) / 1024 / minutes, 1), "paths": paths}


def open_tab(browser: Any, url: str, tab: str) -> tuple[Any, Any, Meter]:
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(f"{url}/harness/?layout=9")
    page.wait_for_function("window.Ext && Ext.isReady && Ext.ComponentQuery.query('#harnessLogin').length")
    page.evaluate("""p => { Ext.ComponentQuery.query('#harnessLogin form')[0].getForm()
        .setValues({username: 'root@pam', password: p}); }""", DEMO_PASSWORD)
    with page.expect_navigation():
        page.click("#harness-login-button")
    wait_for_datacenter(page)
    meter = Meter(page, url)
    select_tab(page, tab)
    page.wait_for_function(READY[tab], timeout=60_000)
    page.wait_for_timeout(3000)          # the first round of every poller is not idle
    return context, page, meter


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of each idle window")
    parser.add_argument("--hidden", type=float, default=30.0, help="seconds of each hidden window")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    _prerequisites()
    from playwright.sync_api import sync_playwright
    rows: list[tuple[str, str, dict[str, Any]]] = []
    tmp = Path(tempfile.mkdtemp(prefix="keel-bench-ui-"))
    with runners_stack(tmp, web_args=("--harness", str(WWW))) as stack, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            for tab in ("keel-rebalancing", "keel-runners"):
                context, page, meter = open_tab(browser, stack.url, tab)
                rows.append((tab, "idle", meter.window(page, args.idle)))
                if tab == "keel-rebalancing":
                    node = "pve2"
                    stack.client.call("POST", f"/api/maintenance/{node}", {"action": "enter"})
                    running = lambda: stack.client.call("GET", "/api/status")["job"] is None   # noqa: E731
                    rows.append((tab, "during a job", meter.window(page, 20, until=running)))
                    stack.client.call("POST", f"/api/maintenance/{node}", {"action": "leave"})
                else:
                    stack.gh("POST", "jobs", {"labels": "keel-c2-m4", "duration": 20, "count": 3})
                    rows.append((tab, "during a job", meter.window(page, 40)))
                page.evaluate(HIDE)
                page.wait_for_timeout(1500)        # a request in flight when hidden ends
                rows.append((tab, "hidden", meter.window(page, args.hidden)))
                context.close()
        finally:
            browser.close()
    misses = []
    print("\nWeb UI cost per tab (requests to keel-web and their bytes on the wire)")
    print(f"{'tab':<18} {'state':<14} {'requests/min':>12} {'KB/min':>8}  target")
    for tab, state, figures in rows:
        target = ""
        if state == "idle":
            target = f"<= {IDLE_REQUESTS_MIN}/min, <= {IDLE_KB_MIN:.0f} KB/min"
            if figures["requests_min"] > IDLE_REQUESTS_MIN or figures["kb_min"] > IDLE_KB_MIN:
                misses.append(f"{tab} idle: {figures}")
        elif state == "hidden":
            target = "0"
            if figures["requests_min"] > 0:
                misses.append(f"{tab} hidden: {figures}")
        print(f"{tab[5:]:<18} {state:<14} {figures['requests_min']:>12.1f} {figures['kb_min']:>8.1f}  {target}")
        print(f"{'':<18} {'':<14} " + ", ".join(f"{p} x{n}" for p, n in sorted(figures["paths"].items())))
    if args.json:
        Path(args.json).write_text(json.dumps([{"tab": t, "state": s, **f} for t, s, f in rows], indent=2))
    for miss in misses:
        print(f"MISSED: {miss}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
