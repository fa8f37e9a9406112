"""``keel demo`` (``make demo``): the simulator on the demo cluster, shown as ``keel status``,
then balanced: ``keel plan`` (dry run), ``keel apply --yes`` (the migrations run in the
simulator, its clock sped up so they take seconds), and ``keel status`` again."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from keel.balance.balancer import make_plan
from keel.balance.executor import Executor
from keel.balance.settings import BalancingSettings
from keel.errors import ExitStatus
from keel.plan_view import render_plan
from keel.pve import snapshot
from keel.pve.client import PveClient, Target
from keel.sim import scenario as sc
from keel.sim.serve import SimServer
from keel.status_view import Style, render
from keel.store import Store

if TYPE_CHECKING:
    from keel.cli import Env

DEMO_SCENARIO = Path(__file__).parent / "sim" / "scenarios" / "demo.yaml"
DEMO_TOKEN = "keel@pve!keel=6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f"
CLOCK_FACTOR = 60.0     # a simulated minute per second: a 30-s migration takes half a second


def run_demo(env: "Env", scenario_path: str | None = None, keep_running: bool = False) -> int:
    path = Path(scenario_path) if scenario_path else DEMO_SCENARIO
    scenario = sc.load(path)
    out = env.stdout
    server = SimServer(scenario, port=0, clock_factor=CLOCK_FACTOR)
    server.start()
    try:
        print(f"Keel demo: simulated Proxmox VE cluster {scenario.name!r} "
              f"({len(scenario.nodes)} nodes, {len(scenario.guests)} guests) at {server.url}\n",
              file=out)
        target = Target.from_url(server.url, verify=str(server.cert_file)).with_token(DEMO_TOKEN)
        client = PveClient(target)
        started = time.monotonic()
        snap = snapshot.collect(client)
        elapsed = time.monotonic() - started
        style = Style(env.color, env.unicode)
        print("$ keel status --guests", file=out)
        out.write(render(snap, style, show_guests=True))
        print(f"\n(snapshot: {snap.api_calls} API calls in {elapsed * 1000:.0f} ms)", file=out)
        _balance(env, client, snap, style)
        if keep_running:
            print(f"\nThe simulator keeps running at {server.url} until Ctrl-C. Try:\n"
                  f"  KEEL_PVE_URL={server.url} KEEL_PVE_CA_FILE={server.cert_file} \\\n"
                  f"  KEEL_PVE_TOKEN='{DEMO_TOKEN}' keel status --guests", file=out, flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    finally:
        server.stop()
    return ExitStatus.OK


def _balance(env: "Env", client: PveClient, snap: snapshot.Snapshot, style: Style) -> None:
    """Plan, apply and show the result, as an operator would with the CLI."""
    from keel.cli_balance import _printer
    out = env.stdout
    settings = BalancingSettings()
    print("\n$ keel plan", file=out)
    plan = make_plan(snap, settings)
    out.write(render_plan(plan, style))
    if not plan.moves:
        return
    print(f"\n$ keel apply --yes      (the simulator's clock runs x{CLOCK_FACTOR:g})", file=out, flush=True)
    with tempfile.TemporaryDirectory(prefix="keel-demo-") as tmp:
        store = Store(Path(tmp) / "keel.db")
        executor = Executor(client, settings, store, requested_by="keel demo",
                            on_event=_printer(env, False), poll_s=0.25)
        result = executor.run(plan)
    failed = [r for r in result.results if not r.ok]
    print(f"{len(result.results) - len(failed)} of {len(plan.moves)} migrations done"
          + (f", {len(failed)} failed" if failed else ""), file=out)
    after = snapshot.collect(client)
    print("\n$ keel status", file=out)
    out.write(render(after, style, show_guests=False))
