"""What a web user may change in the runners' settings, beyond ``Sys.Modify`` on ``/``.

keel-engine runs as root and holds tokens; the runners' settings say where it sends them,
which files it reads and writes, and what its PVE token clones.  So through keel-web
(docs/security.md, "Who can do what"):

* **files**: a secret's file is always the fixed name in the secrets directory the engine
  started with (``github-token``, ``github-webhook-secret``, ...; ``keel.runners.secrets``).
  A ``*_path`` key may only be left as it is, removed, or set to that name: never to a
  file Keel did not make, such as ``pve-token`` or ``/root/.ssh/authorized_keys``;
* **where secrets go**: changing ``github.url`` or a provider's ``url`` needs the secret
  sent there to be entered again in the same change, so a caller can only send a secret
  they know to a host they chose;
* **TLS and listeners**: ``tls.ca_file``, ``tls.insecure_skip_verify``, ``webhook.listen``
  and ``metrics`` are root's (edit the file);
* **what the token touches**: a template, pool or storage that was not in the settings
  before needs the caller's own ``VM.Clone`` on ``/vms/<template>``, ``VM.Allocate`` on
  ``/pool/<pool>`` and ``Datastore.AllocateSpace`` on ``/storage/<id>``: what PVE would ask
  of them to clone it themselves.  A template given by name may be any VM of that name, so
  a new one needs ``VM.Clone`` on ``/vms``.

``problems`` answers every breach keyed by its config path; root (the CLI) is not limited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection

from keel.authz import Principal
from keel.runners.settings import ProviderSettings, RunnersSettings
from keel.runners.secrets import DEFAULT_NAMES

ROOT_ONLY = "only root changes this (edit the config file on a node)"


def _path_problem(old: str | None, new: str | None, fixed: Path) -> str | None:
    if new is None or new == old or Path(new) == fixed:
        return None
    return (f"{new} is not a file Keel made; through the web UI a secret's file is {fixed} "
            f"(set the secret itself, and Keel writes it there)")


def _references(settings: RunnersSettings) -> tuple[set[int], set[str], set[str], set[str]]:
    templates: set[int] = set()
    pools: set[str] = set()
    storages: set[str] = set()
    names: set[str] = set()
    for scale_set in settings.scale_sets:
        for provider in scale_set.providers:
            spec = provider.runner
            templates.update(spec.template_ids)
            if spec.template_name:
                names.add(spec.template_name)
            if spec.pool:
                pools.add(spec.pool)
            if spec.storage:
                storages.add(spec.storage)
    return templates, pools, storages, names


def problems(old: RunnersSettings, new: RunnersSettings, given: Collection[str], secrets_dir: Path,
             principal: Principal, considered: Collection[str]) -> dict[str, str]:
    """Every way ``new`` goes beyond what ``principal`` may change, keyed by config path."""
    if principal.is_root:
        return {}
    found: dict[str, str] = {}
    og, ng = old.github, new.github

    def path_key(key: str, old_value: str | None, new_value: str | None, secret_id: str) -> None:
        problem = _path_problem(old_value, new_value, secrets_dir / DEFAULT_NAMES[secret_id])
        if problem:
            found[key] = problem

    path_key("runners.github.app_private_key_path", og.app_private_key_path, ng.app_private_key_path,
             "github.app_private_key")
    path_key("runners.github.token_path", og.token_path, ng.token_path, "github.token")
    path_key("runners.webhook.secret_path", old.webhook.secret_path, new.webhook.secret_path, "webhook.secret")
    if (ng.ca_file, ng.verify_tls) != (og.ca_file, og.verify_tls):
        found["runners.github.tls"] = ROOT_ONLY
    if new.webhook.listen != old.webhook.listen:
        found["runners.webhook.listen"] = ROOT_ONLY
    if new.metrics != old.metrics:
        found["runners.metrics"] = ROOT_ONLY
    if ng.url and ng.url != og.url:
        needed = "github.token" if ng.token_path else "github.app_private_key"
        if needed not in given:
            found["runners.github.url"] = (f"the GitHub credentials would go to {ng.url}: enter {needed} "
                                           f"again with this change")
    before = {p.name: p for p in old.providers}
    for index, provider in enumerate(new.providers):
        _provider(found, index, before.get(provider.name), provider, given, secrets_dir)
    _objects(found, old, new, principal, considered)
    return found


def _provider(found: dict[str, str], index: int, old: ProviderSettings | None, new: ProviderSettings,
              given: Collection[str], secrets_dir: Path) -> None:
    key = f"runners.providers[{index}]"
    secret_id = f"providers.{new.name}.token_secret"
    old_tls = (old.ca_file, old.verify_tls) if old else (None, True)
    if (new.ca_file, new.verify_tls) != old_tls:
        found[f"{key}.tls"] = ROOT_ONLY
    problem = _path_problem(old.token_secret_path if old else None, new.token_secret_path,
                            secrets_dir / f"pve-{new.name}-token")
    if problem:
        found[f"{key}.token_secret_path"] = problem
    if new.url and new.url != (old.url if old else None) and secret_id not in given:
        found[f"{key}.url"] = (f"the token secret would go to {new.url}: enter {secret_id} again with "
                               f"this change")


def _objects(found: dict[str, str], old: RunnersSettings, new: RunnersSettings, principal: Principal,
             considered: Collection[str]) -> None:
    old_refs, new_refs = _references(old), _references(new)
    checks = (("template", "VM.Clone", "/vms/{}"), ("pool", "VM.Allocate", "/pool/{}"),
              ("storage", "Datastore.AllocateSpace", "/storage/{}"))
    for (what, privilege, shape), before, after in zip(checks, old_refs, new_refs):
        for value in sorted(after - before, key=str):
            path = shape.format(value)
            if not principal.can(privilege, path, considered):
                found[f"runners.scale_sets ({what} {value})"] = (
                    f"permission check failed ({path}, {privilege}): runners cloned from it would use "
                    f"Keel's token where you may not")
    for name in sorted(new_refs[3] - old_refs[3]):
        if not principal.can("VM.Clone", "/vms", considered):
            found[f"runners.scale_sets (template {name})"] = (
                "permission check failed (/vms, VM.Clone): a template by name may be any VM of that "
                "name, so it needs VM.Clone on every VM; give its VMID (or one per node) instead")
