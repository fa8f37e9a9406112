"""``keel demo`` (``make demo``): the simulator on the demo cluster, shown as ``keel status``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from keel.errors import ExitStatus
from keel.pve import snapshot
from keel.pve.client import PveClient, Target
from keel.sim import scenario as sc
from keel.sim.serve import SimServer
from keel.status_view import Style, render

if TYPE_CHECKING:
    from keel.cli import Env

DEMO_SCENARIO = Path(__file__).parent / "sim" / "scenarios" / "demo.yaml"
DEMO_TOKEN = "keel@pve!keel=6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f"


def run_demo(env: "Env", scenario_path: str | None = None, keep_running: bool = False) -> int:
    path = Path(scenario_path) if scenario_path else DEMO_SCENARIO
    scenario = sc.load(path)
    out = env.stdout
    server = SimServer(scenario, port=0)
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
        print("$ keel status --guests", file=out)
        out.write(render(snap, Style(env.color, env.unicode), show_guests=True))
        print(f"\n(snapshot: {snap.api_calls} API calls in {elapsed * 1000:.0f} ms)", file=out)
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
