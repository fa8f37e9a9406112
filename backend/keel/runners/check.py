# SPDX-License-Identifier: AGPL-3.0-or-later
""""Test connection": can the runners' settings reach what they name?

``connection(settings, local_client, clock)`` returns one result per check, in order,
each ``{"check", "target", "ok", "message"}``:

* **GitHub credentials**: the App's JWT buys an installation token (or the token file is
  read), on a client of its own (the running service's is not touched);
* **GitHub runners**: the runners of the scope (org, repo or enterprise) can be listed;
* **GitHub scale sets**: the scale-set handshake (registration token, then the Actions
  service) and each scale set's runner group;
* per provider: **reachable** (``/cluster/resources``), its **nodes** exist, and each
  **template** its scale sets use exists on that cluster and is a template.

A check that depends on a failed one is reported as skipped (``ok: null``).  Messages
come from ``GitHubClient`` and ``PveClient`` errors, which name paths and statuses, never
a token or a key; the engine scrubs them again before answering.
"""

from __future__ import annotations

from typing import Any, Callable

from keel.errors import KeelError
from keel.pve.client import PveClient, Target
from keel.runners.github import GitHubClient
from keel.runners.spec import ProviderSettings, RunnersSettings, read_secret


def _result(check: str, target: str, ok: bool | None, message: str) -> dict[str, Any]:
    return {"check": check, "target": target, "ok": ok, "message": message}


def connection(settings: RunnersSettings, local: PveClient | None,
               clock: Callable[[], float]) -> list[dict[str, Any]]:
    results = _github(settings, clock)
    for provider in settings.providers:
        results += _provider(settings, provider, local)
    return results


def _github(settings: RunnersSettings, clock: Callable[[], float]) -> list[dict[str, Any]]:
    gh = settings.github
    target = gh.url
    how = (f"GitHub App {gh.app_client_id}, installation {gh.app_installation_id}" if gh.app_client_id
           else "a token")
    client = GitHubClient(gh, clock)
    out = []
    try:
        try:
            client._installation_token(fresh=True)
        except KeelError as err:
            out.append(_result("GitHub credentials", target, False, f"{how}: {err}"))
            out += [_result(name, target, None, "skipped: the credentials failed")
                    for name in ("GitHub runners", "GitHub scale sets")]
            return out
        out.append(_result("GitHub credentials", target, True,
                           f"{how}: accepted" if gh.app_client_id else f"{how} from {gh.token_path}"))
        try:
            runners = client.list_runners()
            out.append(_result("GitHub runners", target, True,
                               f"{len(runners)} self-hosted runner(s) registered in {client.scope}"))
        except KeelError as err:
            out.append(_result("GitHub runners", target, False, str(err)))
        groups: dict[str | None, str] = {}
        try:
            for ss in settings.scale_sets:
                if ss.runner_group not in groups:
                    groups[ss.runner_group] = str(client.runner_group_id(ss.runner_group))
            if not settings.scale_sets:
                client.runner_group_id(None)
            named = ", ".join(f"{g or 'Default'} (id {i})" for g, i in groups.items())
            out.append(_result("GitHub scale sets", target, True,
                               "the Actions service answered" + (f"; runner groups {named}" if named else "")))
        except KeelError as err:
            out.append(_result("GitHub scale sets", target, False, str(err)))
    finally:
        client.close()
    return out


def _provider(settings: RunnersSettings, provider: ProviderSettings,
              local: PveClient | None) -> list[dict[str, Any]]:
    name = f"provider {provider.name}"
    where = provider.url or "this cluster"
    specs = [entry.runner for ss in settings.scale_sets for entry in ss.providers if entry.name == provider.name]
    templates = sorted({vmid for spec in specs for vmid in spec.template_ids})
    names = sorted({spec.template_name for spec in specs if spec.template_name})
    client = None
    own = False
    try:
        if provider.url:
            secret = read_secret(str(provider.token_secret_path), f"API token secret of {provider.name}")
            verify: bool | str = provider.ca_file or provider.verify_tls
            target = Target.from_url(provider.url, verify=verify, timeout_s=provider.timeout_s)
            client, own = PveClient(target.with_token(f"{provider.token_id}={secret}")), True
        elif local is None:
            raise KeelError("no connection to this cluster")
        else:
            client = local
        rows = client.get("/cluster/resources")
    except KeelError as err:
        if own and client is not None:
            client.close()
        return [_result(f"{name}: reachable", where, False, str(err))] + \
            [_result(f"{name}: template {t}", where, None, "skipped: the provider is not reachable")
             for t in templates]
    if own:
        client.close()
    nodes = {r["node"]: r.get("status") for r in rows if r.get("type") == "node"}
    vms = {int(r["vmid"]): r for r in rows if r.get("type") == "qemu" and r.get("vmid") is not None}
    out = [_result(f"{name}: reachable", where, True,
                   f"{len(nodes)} node(s), {sum(1 for s in nodes.values() if s == 'online')} online")]
    if provider.nodes:
        missing = [n for n in provider.nodes if n not in nodes]
        out.append(_result(f"{name}: nodes", where, not missing,
                           f"the cluster has no node {', '.join(missing)} (it has {', '.join(sorted(nodes))})"
                           if missing else f"{', '.join(provider.nodes)} exist"))
    if not templates and not names:
        out.append(_result(f"{name}: template", where, None, "no scale set uses this provider"))
    for template_name in names:
        found = [r for r in vms.values() if r.get("template") and r.get("name") == template_name]
        on = ", ".join(f"{r['vmid']} on {r.get('node')}" for r in sorted(found, key=lambda r: r["vmid"]))
        out.append(_result(f"{name}: template {template_name}", where, bool(found),
                           f"copies: {on}" if found else f"no template named {template_name} on {where}"))
    for vmid in templates:
        vm = vms.get(vmid)
        if vm is None:
            out.append(_result(f"{name}: template {vmid}", where, False,
                               f"VM {vmid} does not exist on {where} (or Keel's token may not see it)"))
        elif not vm.get("template"):
            out.append(_result(f"{name}: template {vmid}", where, False,
                               f"VM {vmid} ({vm.get('name', '')}) on {vm.get('node')} is not a template"))
        else:
            out.append(_result(f"{name}: template {vmid}", where, True,
                               f"template {vmid} ({vm.get('name', '')}) on {vm.get('node')}"))
    return out
