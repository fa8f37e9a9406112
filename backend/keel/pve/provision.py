"""What ``keel setup`` makes in Proxmox VE: a user ``keel@pve`` (no password: it logs in
with its token only), a role with exactly the privileges Keel's features need, an API
token with privilege separation, and the ACL entries giving both the role on ``/``.

Every step looks first and changes only what differs, so running it again is safe.  A
token's secret is shown by PVE once, when it is made: if the token exists but its secret
is not in the token file any more, the token is made again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from keel.errors import KeelError, PermissionDeniedError
from keel.pve.client import PveClient

USER = "keel@pve"
TOKEN = "keel"
ROLE = "Keel"

# Why each privilege (docs/security.md has the table).
READ = ("Sys.Audit", "VM.Audit", "Datastore.Audit", "Pool.Audit")
BALANCE = ("VM.Migrate", "Sys.Console", "Datastore.AllocateSpace")
RUNNERS = ("VM.Allocate", "VM.Clone", "VM.PowerMgmt", "VM.Config.CPU", "VM.Config.Memory",
           "VM.Config.Options", "VM.GuestAgent.Audit", "VM.GuestAgent.FileWrite", "SDN.Use")
PRIVILEGES = tuple(sorted(set(READ + BALANCE + RUNNERS)))


def privileges_for(version: str) -> tuple[str, ...]:
    """PVE 8 has no ``VM.GuestAgent.*`` privileges: the guest agent needs ``VM.Monitor``
    there."""
    major = int(version.split(".")[0]) if version[:1].isdigit() else 9
    if major >= 9:
        return PRIVILEGES
    return tuple(sorted(set(PRIVILEGES) - {"VM.GuestAgent.Audit", "VM.GuestAgent.FileWrite"} | {"VM.Monitor"}))


@dataclass
class Outcome:
    steps: list[str] = field(default_factory=list)
    token: str | None = None          # user@realm!name=secret, when a new one was made

    def say(self, line: str) -> None:
        self.steps.append(line)


def provision(client: PveClient, token_exists_locally: bool, privileges: tuple[str, ...] | None = None,
              user: str = USER, token: str = TOKEN, role: str = ROLE) -> Outcome:
    out = Outcome()
    try:
        if privileges is None:
            privileges = privileges_for(str(client.get("/version").get("version", "9")))
        users = {u["userid"]: u for u in client.get("/access/users", full=1)}
        if user in users:
            out.say(f"user {user}: exists")
        else:
            client.post("/access/users", userid=user, comment="Keel (keel setup)")
            out.say(f"user {user}: made")
        roles = {r["roleid"]: r for r in client.get("/access/roles")}
        wanted = ",".join(privileges)
        if role not in roles:
            client.post("/access/roles", roleid=role, privs=wanted)
            out.say(f"role {role}: made ({len(privileges)} privileges)")
        elif set(str(roles[role].get("privs", "")).split(",")) != set(privileges):
            client.put(f"/access/roles/{role}", privs=wanted)
            out.say(f"role {role}: privileges set to {wanted}")
        else:
            out.say(f"role {role}: exists with the right privileges")
        tokens = {t["tokenid"] for t in client.get(f"/access/users/{user}/token")}
        full = f"{user}!{token}"
        if token in tokens and token_exists_locally:
            out.say(f"token {full}: exists, its secret is in the token file")
        else:
            if token in tokens:
                client.delete(f"/access/users/{user}/token/{token}")
                out.say(f"token {full}: its secret was not in the token file; made again")
            made = client.post(f"/access/users/{user}/token/{token}", privsep=1, comment="Keel")
            out.token = f"{made['full-tokenid']}={made['value']}"
            out.say(f"token {full}: made")
        entries = {(e["path"], e["ugid"], e["type"], e["roleid"]) for e in client.get("/access/acl")}
        for kind, ugid in (("user", user), ("token", full)):
            if ("/", ugid, kind, role) in entries:
                out.say(f"ACL / {role} for {kind} {ugid}: exists")
                continue
            key = "users" if kind == "user" else "tokens"
            client.put("/access/acl", path="/", roles=role, propagate=1, **{key: ugid})
            out.say(f"ACL / {role} for {kind} {ugid}: set")
    except PermissionDeniedError as err:
        raise PermissionDeniedError(f"{err}; keel setup needs an administrator's login "
                                    f"(for example --pve-user root@pam --pve-password-file FILE)") from None
    except KeelError:
        raise
    return out
