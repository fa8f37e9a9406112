"""The fake's REST API (``/api/v3``, as GitHub Enterprise Server serves it).

Each handler takes the ``Call`` and returns ``(status, body)`` or raises ``GhError`` with
GitHub's status and message.  Authentication (``http``) has happened already, except for
the App's JWT and the runner registration's ``RemoteAuth``, checked here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import jwt

from keel.sim.github.state import FakeGitHub, Token, iso

SKEW_S = 60.0
JWT_MAX_S = 600.0


class GhError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None,
                 body: dict[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.body = body or {"message": message, "documentation_url": "https://docs.github.com/rest"}
        self.headers = headers or {}


@dataclass
class Call:
    fake: FakeGitHub
    method: str
    path: str
    groups: tuple[str, ...]
    query: dict[str, str]
    body: Any
    headers: Any
    base: str                              # https://127.0.0.1:PORT
    token: Token | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Call], tuple[int, Any]]
ROUTES: list[tuple[str, re.Pattern[str], Handler]] = []
SCOPE = r"(orgs/[^/]+|repos/[^/]+/[^/]+|enterprises/[^/]+)"


def route(method: str, pattern: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ROUTES.append((method, re.compile("^" + pattern + "$"), handler))
        return handler
    return register


def check_scope(call: Call, scope: str) -> None:
    """An installation token reaches its own account's runners and repositories; a PAT all."""
    token = call.token
    if token is None or token.account is None:
        return
    kind, _, rest = scope.partition("/")
    if kind == "enterprises":
        raise GhError(403, "Resource not accessible by integration")
    if rest.split("/")[0].lower() != token.account.lower():
        raise GhError(404, "Not Found")


# -- auth ------------------------------------------------------------------------------------


@route("POST", r"/app/installations/(\d+)/access_tokens")
def access_token(call: Call) -> tuple[int, Any]:
    fake = call.fake
    header = call.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        raise GhError(401, "A JSON web token could not be decoded")
    app = verify_app_jwt(fake, header[7:])
    installation = int(call.groups[0])
    account = dict(app.installations).get(installation)
    if account is None:
        raise GhError(404, "Not Found")
    token = fake.issue_token("installation", account, "ghs_")
    return 201, {"token": token.value, "expires_at": iso(token.expires_at),
                 "permissions": {"organization_self_hosted_runners": "write", "administration": "write",
                                 "actions": "read", "metadata": "read"},
                 "repository_selection": "all"}


def verify_app_jwt(fake: FakeGitHub, token: str) -> Any:
    """RS256 against an App's public key; iss, iat and exp checked against simulated time."""
    for app in fake.spec.apps:
        try:
            claims = jwt.decode(token, app.public_key, algorithms=["RS256"],
                                options={"verify_exp": False, "verify_iat": False, "verify_nbf": False,
                                         "verify_aud": False})
        except jwt.PyJWTError:
            continue
        if str(claims.get("iss")) not in (app.client_id, str(app.app_id)):
            raise GhError(401, "'Issuer' claim ('iss') must be an Integer or the Client ID")
        now = fake.now
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, (int, float)) or not isinstance(iat, (int, float)):
            raise GhError(401, "'Expiration time' claim ('exp') is missing")
        if exp <= now:
            raise GhError(401, "'Expiration time' claim ('exp') must be a numeric value representing "
                               "the future time at which the assertion expires")
        if exp - now > JWT_MAX_S + SKEW_S:
            raise GhError(401, "'Expiration time' claim ('exp') is too far in the future")
        if iat > now + SKEW_S:
            raise GhError(401, "'Issued at' claim ('iat') must be an Integer representing the time "
                               "that the assertion was issued")
        return app
    raise GhError(401, "A JSON web token could not be decoded")


@route("POST", "/" + SCOPE + r"/actions/runners/registration-token")
def registration_token(call: Call) -> tuple[int, Any]:
    check_scope(call, call.groups[0])
    token = call.fake.issue_token("registration", call.groups[0], "AR")
    return 201, {"token": token.value, "expires_at": iso(token.expires_at)}


@route("POST", r"/actions/runner-registration")
def runner_registration(call: Call) -> tuple[int, Any]:
    """The scale-set handshake: a registration token buys an Actions service admin token."""
    fake = call.fake
    header = call.headers.get("Authorization", "")
    token = fake.tokens.get(header[len("RemoteAuth "):]) if header.startswith("RemoteAuth ") else None
    if token is None or token.kind != "registration" or token.expires_at <= fake.now:
        raise GhError(401, "Bad credentials")
    body = call.body if isinstance(call.body, dict) else {}
    if body.get("runner_event") != "register" or not body.get("url"):
        raise GhError(422, "url and runner_event: register are required")
    admin = jwt.encode({"iat": int(fake.now), "exp": int(fake.now + fake.spec.token_ttl_s),
                        "scope": token.account}, fake.admin_secret, algorithm="HS256")
    return 200, {"url": f"{call.base}/_actions/", "token": admin, "token_schema": "OAuthAccessToken"}


# -- runners -------------------------------------------------------------------------------------


@route("GET", r"/(orgs|enterprises)/([^/]+)/actions/runner-groups")
def runner_groups(call: Call) -> tuple[int, Any]:
    check_scope(call, f"{call.groups[0]}/{call.groups[1]}")
    groups = [{"id": gid, "name": name, "default": gid == min(call.fake.groups), "visibility": "all"}
              for gid, name in call.fake.groups.items()]
    return 200, {"total_count": len(groups), "runner_groups": groups}


@route("POST", "/" + SCOPE + r"/actions/runners/generate-jitconfig")
def generate_jitconfig(call: Call) -> tuple[int, Any]:
    fake = call.fake
    check_scope(call, call.groups[0])
    body = call.body if isinstance(call.body, dict) else {}
    name, group, labels = body.get("name"), body.get("runner_group_id"), body.get("labels")
    if not isinstance(name, str) or not name or group is None:
        raise GhError(422, "Invalid request.\n\n\"name\" and \"runner_group_id\" are required")
    if not isinstance(labels, list) or not 1 <= len(labels) <= 100:
        raise GhError(422, "Invalid request.\n\nlabels must have 1 to 100 items")
    if group not in fake.groups:
        raise GhError(404 if group != 2 else 403, "Not Found" if group != 2 else "Forbidden")
    if fake.runner_by_name(name):
        raise GhError(409, "Already exists - A runner with the name already exists.")
    runner = fake.new_runner(name, [str(x) for x in labels], int(group), None)
    return 201, {"runner": fake.runner_json(runner), "encoded_jit_config": fake.jit_config(runner)}


@route("GET", "/" + SCOPE + r"/actions/runners")
def list_runners(call: Call) -> tuple[int, Any]:
    fake = call.fake
    check_scope(call, call.groups[0])
    runners = sorted(fake.runners.values(), key=lambda r: r.id)
    if call.query.get("name"):
        runners = [r for r in runners if r.name == call.query["name"]]
    per_page = max(1, min(100, int(call.query.get("per_page", 30))))
    page = max(1, int(call.query.get("page", 1)))
    chunk = runners[(page - 1) * per_page: page * per_page]
    last = max(1, -(-len(runners) // per_page))
    if page < last:
        url = f"{call.base}/api/v3/{call.groups[0]}/actions/runners?per_page={per_page}"
        call.extra_headers["Link"] = f'<{url}&page={page + 1}>; rel="next", <{url}&page={last}>; rel="last"'
    return 200, {"total_count": len(runners), "runners": [fake.runner_json(r) for r in chunk]}


@route("GET", "/" + SCOPE + r"/actions/runners/(\d+)")
def get_runner(call: Call) -> tuple[int, Any]:
    check_scope(call, call.groups[0])
    runner = call.fake.runners.get(int(call.groups[1]))
    if runner is None:
        raise GhError(404, "Not Found")
    return 200, call.fake.runner_json(runner)


@route("DELETE", "/" + SCOPE + r"/actions/runners/(\d+)")
def delete_runner(call: Call) -> tuple[int, Any]:
    check_scope(call, call.groups[0])
    runner = call.fake.runners.get(int(call.groups[1]))
    if runner is None:
        raise GhError(404, "Not Found")
    if runner.busy:
        raise GhError(422, "Bad request - Runner \"%s\" is still running a job\"" % runner.name)
    call.fake.remove_runner(runner)
    return 204, None


# -- jobs ----------------------------------------------------------------------------------------


@route("GET", r"/repos/([^/]+/[^/]+)/actions/jobs/(\d+)")
def get_job(call: Call) -> tuple[int, Any]:
    check_scope(call, "repos/" + call.groups[0])
    job = call.fake.jobs.get(int(call.groups[1]))
    if job is None or job.repo != call.groups[0]:
        raise GhError(404, "Not Found")
    return 200, call.fake.job_json(job)


@route("GET", r"/repos/([^/]+/[^/]+)/actions/runs")
def list_runs(call: Call) -> tuple[int, Any]:
    check_scope(call, "repos/" + call.groups[0])
    status = call.query.get("status")
    runs = {}
    for job in call.fake.jobs.values():
        if job.repo == call.groups[0] and (status is None or job.status == status):
            runs[job.run_id] = {"id": job.run_id, "status": job.status, "name": "CI",
                                "created_at": iso(job.queued_at)}
    return 200, {"total_count": len(runs), "workflow_runs": list(runs.values())}


@route("GET", r"/repos/([^/]+/[^/]+)/actions/runs/(\d+)/jobs")
def list_run_jobs(call: Call) -> tuple[int, Any]:
    check_scope(call, "repos/" + call.groups[0])
    jobs = [call.fake.job_json(j) for j in call.fake.jobs.values()
            if j.repo == call.groups[0] and j.run_id == int(call.groups[1])]
    return 200, {"total_count": len(jobs), "jobs": jobs}


@route("GET", r"/installation/repositories")
def installation_repositories(call: Call) -> tuple[int, Any]:
    account = call.token.account if call.token else None
    repos = [{"full_name": r, "name": r.split("/")[1], "owner": {"login": r.split("/")[0]}}
             for r in call.fake.spec.repos if account is None or r.split("/")[0] == account]
    return 200, {"total_count": len(repos), "repositories": repos}
