"""Every call Keel makes to GitHub: App auth, the REST API, and the runner scale-set API.

``GitHubClient(settings, clock)`` authenticates as a GitHub App (an RS256 JWT made with
the App's private key buys an installation token, kept until 5 minutes before it
expires) or with a personal access token (enterprises).  The scale-set API lives on the
Actions service: a registration token buys an admin token there (the "handshake"),
renewed a minute before it expires.  A 401 renews the credential and retries once.

Rate limits are honoured, never hammered: a 403 or 429 with ``retry-after`` waits that
long, one with ``x-ratelimit-remaining: 0`` waits until ``x-ratelimit-reset``, and
another 429 waits 60 s, doubling.  Until then every call raises ``RateLimited`` without
touching the network.  ``trouble_since`` says since when GitHub has not answered (no
answer, or a 5xx), ``rate_limit`` what its rate limit had left at its last answer: while
GitHub cannot be heard, what it does not say is no evidence (``state.Fleet.github_quiet``).
Errors are Keel's (``AuthError``, ``PermissionDeniedError``,
``NotFoundError``, ``BusyError``, ``UnavailableError``) with GitHub's own words and the
path, never a token, a key or a JIT config.

    >>> client = GitHubClient(settings.github, clock=time.time)       # doctest: +SKIP
    >>> session = client.create_session(scale_set_id, "keel@pve1")    # doctest: +SKIP
    >>> client.get_message(session, last_id=0, capacity=16)           # doctest: +SKIP
    {'messageId': 7, 'messageType': 'RunnerScaleSetJobMessages', 'body': '[...]', 'statistics': {...}}
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

import jwt
import requests

from keel.errors import (AuthError, BusyError, InvalidError, KeelError, NotFoundError,
                         PermissionDeniedError, UnavailableError)
from keel.runners.spec import GitHubSettings, read_secret

log = logging.getLogger("keel.runners.github")

API_VERSION = "2022-11-28"
SERVICE_API = "6.0-preview"
TOKEN_MARGIN_S = 300.0          # renew an installation token 5 minutes before it expires
ADMIN_MARGIN_S = 60.0
JWT_LIFE_S = 540.0              # GitHub takes at most 10 minutes
BACKOFF_FIRST_S = 60.0
BACKOFF_MAX_S = 900.0
POLL_TIMEOUT_S = 70.0           # GitHub holds a message poll about 50 s


class RateLimited(UnavailableError):
    """GitHub asked Keel to wait until ``until`` (epoch seconds)."""

    def __init__(self, message: str, until: float):
        super().__init__(message)
        self.until = until


class StillRunning(BusyError):
    """GitHub refuses to remove a runner that is running a job (422)."""


class Conflict(BusyError):
    """Someone else has it: a session for the scale set, a runner of that name (409)."""


@dataclass
class Session:
    scale_set_id: int
    id: str
    queue_url: str
    queue_token: str = field(repr=False)
    statistics: dict[str, int] = field(default_factory=dict)


def api_base(url: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc
    if parts.hostname in ("github.com", "www.github.com"):
        return "https://api.github.com"
    if parts.hostname and parts.hostname.endswith(".ghe.com"):
        return f"https://api.{host}"
    return f"https://{host}/api/v3"


class GitHubClient:
    def __init__(self, settings: GitHubSettings, clock: Callable[[], float]):
        self.settings = settings
        self.clock = clock
        self.api = api_base(settings.url)
        self.scope_kind, self.scope = settings.scope
        self.verify: bool | str = settings.ca_file or settings.verify_tls
        self.requests_total: Counter[str] = Counter()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None
        self._admin: tuple[str, str, float] | None = None     # (service url, token, expires)
        self._blocked: dict[str, float] = {}                   # "rest"|"service" -> until
        self._backoff: dict[str, float] = {}
        self._key: str | None = None
        self.trouble_since: float | None = None               # no answer, or 5xx, since
        self.trouble: str | None = None
        self.rate_limit: dict[str, int] = {}                   # resource -> x-ratelimit-remaining
        # keel-engine's leader fence (engine.lease.Fence), called before each write that acts
        # for the leader: registrations, JIT configs, jobs, sessions; None: always allowed.
        self.fence: Callable[[str], None] | None = None

    def __repr__(self) -> str:
        return f"GitHubClient({self.settings.url!r})"

    def close(self) -> None:
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()

    @property
    def blocked_until(self) -> float:
        return max(self._blocked.values(), default=0.0)

    # -- REST: runners and jobs ---------------------------------------------------------------

    def list_runners(self) -> list[dict[str, Any]]:
        """Every self-hosted runner registered in the scope, all pages."""
        runners: list[dict[str, Any]] = []
        url: str | None = f"{self.api}/{self.scope_kind}/{self.scope}/actions/runners?per_page=100"
        while url:
            response = self._rest("GET", url)
            runners.extend(response.json().get("runners", []))
            url = response.links.get("next", {}).get("url")
        return runners

    def delete_runner(self, runner_id: int) -> bool:
        """Remove a registration: True if it was there.  ``StillRunning`` if it has a job."""
        try:
            self._rest("DELETE", f"{self.api}/{self.scope_kind}/{self.scope}/actions/runners/{runner_id}",
                       expect=(204,))
        except NotFoundError:
            return False
        return True

    def get_job(self, repo: str, job_id: int | str) -> dict[str, Any] | None:
        try:
            return self._rest("GET", f"{self.api}/repos/{repo}/actions/jobs/{job_id}").json()
        except NotFoundError:
            return None

    def repositories(self) -> list[str]:
        """The repositories whose jobs may come to the scope's runners (``owner/name``): the
        scope's own for a repository, the App installation's otherwise (first 100)."""
        if self.scope_kind == "repos":
            return [self.scope]
        if self.settings.token_path:
            return []
        data = self._rest("GET", f"{self.api}/installation/repositories?per_page=100").json()
        return [str(r["full_name"]) for r in data.get("repositories", []) if r.get("full_name")]

    def queued_jobs(self, repo: str) -> list[dict[str, Any]]:
        """Jobs of ``repo`` waiting for a runner (REST: queued runs, then their jobs)."""
        runs = self._rest("GET", f"{self.api}/repos/{repo}/actions/runs?status=queued&per_page=100").json()
        jobs: list[dict[str, Any]] = []
        for run in runs.get("workflow_runs", [])[:20]:
            data = self._rest("GET", f"{self.api}/repos/{repo}/actions/runs/{int(run['id'])}/jobs").json()
            jobs += [{**j, "workflow_name": j.get("workflow_name") or run.get("name")}
                     for j in data.get("jobs", []) if j.get("status") == "queued"]
        return jobs

    # -- the Actions service: scale sets ------------------------------------------------------

    def runner_group_id(self, name: str | None) -> int:
        groups = self._service("GET", "_apis/runtime/runnergroups/",
                               params={"groupName": name} if name else None).json().get("value", [])
        if name is None:
            groups = [g for g in groups if g.get("isDefaultGroup")] or groups
        if not groups:
            raise NotFoundError(f"GitHub has no runner group named {name!r} for {self.settings.url}")
        return int(groups[0]["id"])

    def find_scale_set(self, name: str, group_id: int) -> dict[str, Any] | None:
        found = self._service("GET", "_apis/runtime/runnerscalesets",
                              params={"runnerGroupId": group_id, "name": name}).json().get("value", [])
        return found[0] if found else None

    def create_scale_set(self, name: str, group_id: int, labels: list[str]) -> dict[str, Any]:
        body = {"name": name, "runnerGroupId": group_id,
                "labels": [{"name": label, "type": "System"} for label in [name, *labels]],
                "RunnerSetting": {"ephemeral": True, "isElastic": True, "disableUpdate": False}}
        return self._service("POST", "_apis/runtime/runnerscalesets", body=body).json()

    def get_scale_set(self, scale_set_id: int) -> dict[str, Any]:
        return self._service("GET", f"_apis/runtime/runnerscalesets/{scale_set_id}").json()

    def generate_jit(self, scale_set_id: int, name: str) -> tuple[int, str]:
        """A one-use registration for a runner named ``name``: (runner id, encoded JIT config)."""
        data = self._service("POST", f"_apis/runtime/runnerscalesets/{scale_set_id}/generatejitconfig",
                             body={"name": name, "workFolder": "_work"}).json()
        return int(data["runner"]["id"]), str(data["encodedJITConfig"])

    def acquire_jobs(self, scale_set_id: int, request_ids: list[int]) -> list[int]:
        data = self._service("POST", f"_apis/runtime/runnerscalesets/{scale_set_id}/acquirejobs",
                             body=request_ids).json()
        return [int(x) for x in data.get("value", [])]

    # -- message sessions -------------------------------------------------------------------

    def create_session(self, scale_set_id: int, owner: str) -> Session:
        """``Conflict`` while another listener holds the scale set's session."""
        data = self._service("POST", f"_apis/runtime/runnerscalesets/{scale_set_id}/sessions",
                             body={"ownerName": owner}).json()
        return _session(scale_set_id, data)

    def refresh_session(self, session: Session) -> Session:
        data = self._service("PATCH", f"_apis/runtime/runnerscalesets/{session.scale_set_id}/sessions/"
                                      f"{session.id}").json()
        return _session(session.scale_set_id, data)

    def delete_session(self, session: Session) -> None:
        try:
            self._service("DELETE", f"_apis/runtime/runnerscalesets/{session.scale_set_id}/sessions/"
                                    f"{session.id}", expect=(204,))
        except NotFoundError:
            pass

    def get_message(self, session: Session, last_id: int, capacity: int) -> dict[str, Any] | None:
        """The next message (the long poll), or None when GitHub had none (202).  A session
        whose queue token expired is refreshed in place, and the poll made once more."""
        if self.fence is not None:      # polling with a last id acknowledges: only the leader may
            self.fence("GitHub message poll")
        for attempt in (1, 2):
            url = session.queue_url + (f"?lastMessageId={last_id}" if last_id else "")
            response = self._send("service", "GET", url, expect=(200, 202, 401), timeout=POLL_TIMEOUT_S,
                                  headers={"Authorization": f"Bearer {session.queue_token}",
                                           "Accept": f"application/json; api-version={SERVICE_API}",
                                           "X-ScaleSetMaxCapacity": str(capacity)})
            if response.status_code == 401 and attempt == 1:
                fresh = self.refresh_session(session)
                session.queue_url, session.queue_token = fresh.queue_url, fresh.queue_token
                continue
            if response.status_code == 401:
                raise AuthError(f"GitHub refused the message queue token of scale set "
                                f"{session.scale_set_id} after a refresh")
            return response.json() if response.status_code == 200 else None
        return None

    def ack_message(self, session: Session, message_id: int) -> None:
        self._send("service", "DELETE", f"{session.queue_url}/{message_id}", expect=(204, 404),
                   headers={"Authorization": f"Bearer {session.queue_token}",
                            "Content-Type": "application/json"})

    # -- credentials ---------------------------------------------------------------------------

    def _installation_token(self, fresh: bool = False) -> str:
        with self._lock:
            now = self.clock()
            if not fresh and self._token and self._token[1] - now > TOKEN_MARGIN_S:
                return self._token[0]
            if self.settings.token_path:
                self._token = (read_secret(self.settings.token_path, "GitHub token"), float("inf"))
                return self._token[0]
            url = f"{self.api}/app/installations/{self.settings.app_installation_id}/access_tokens"
            response = self._send("rest", "POST", url, expect=(201,),
                                  headers={"Authorization": f"Bearer {self._app_jwt(now)}"})
            data = response.json()
            self._token = (str(data["token"]), _epoch(data.get("expires_at"), now + 3600))
            return self._token[0]

    def _app_jwt(self, now: float) -> str:
        if self._key is None:
            self._key = read_secret(str(self.settings.app_private_key_path), "GitHub App private key")
        claims = {"iat": int(now - 60), "exp": int(now + JWT_LIFE_S), "iss": self.settings.app_client_id}
        try:
            return jwt.encode(claims, self._key, algorithm="RS256")
        except (ValueError, TypeError, jwt.PyJWTError):
            raise InvalidError(f"the GitHub App private key in {self.settings.app_private_key_path} is not "
                               f"an RSA key in PEM") from None

    def _admin_token(self, fresh: bool = False) -> tuple[str, str]:
        with self._lock:
            admin = self._admin
        if admin and not fresh and admin[2] - self.clock() > ADMIN_MARGIN_S:
            return admin[0], admin[1]
        registration = self._rest("POST", f"{self.api}/{self.scope_kind}/{self.scope}/actions/runners/"
                                          f"registration-token", expect=(201,)).json()["token"]
        data = self._send("rest", "POST", f"{self.api}/actions/runner-registration", expect=(200, 201),
                          headers={"Authorization": f"RemoteAuth {registration}"},
                          body={"url": self.settings.url, "runner_event": "register"}).json()
        token = str(data["token"])
        try:
            expires = float(jwt.decode(token, options={"verify_signature": False}).get("exp", 0))
        except jwt.PyJWTError:
            expires = self.clock() + 3600
        with self._lock:
            self._admin = (str(data["url"]).rstrip("/") + "/", token, expires)
        return self._admin[0], token

    # -- the wire ----------------------------------------------------------------------------

    def _rest(self, method: str, url: str, expect: tuple[int, ...] = (200,),
              body: Any = None) -> requests.Response:
        for attempt in (1, 2):
            token = self._installation_token(fresh=attempt == 2)
            try:
                return self._send("rest", method, url, expect=expect, body=body,
                                  headers={"Authorization": f"Bearer {token}"})
            except AuthError as err:
                if attempt == 2 or isinstance(err, PermissionDeniedError):
                    raise
        raise AssertionError("unreachable")

    def _service(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None,
                 expect: tuple[int, ...] = (200,)) -> requests.Response:
        for attempt in (1, 2):
            base, token = self._admin_token(fresh=attempt == 2)
            query = {**(params or {}), "api-version": SERVICE_API}
            try:
                return self._send("service", method, base + path, expect=expect, body=body, params=query,
                                  headers={"Authorization": f"Bearer {token}"})
            except AuthError as err:
                if attempt == 2 or isinstance(err, PermissionDeniedError):
                    raise
        raise AssertionError("unreachable")

    def _send(self, kind: str, method: str, url: str, expect: tuple[int, ...], headers: dict[str, str],
              body: Any = None, params: dict[str, Any] | None = None,
              timeout: float | None = None) -> requests.Response:
        now = self.clock()
        until = self.blocked_until            # one limit for all of GitHub: never hammer it
        if now < until:
            raise RateLimited(f"GitHub asked Keel to wait; no calls until {until - now:.0f} s from now",
                              until)
        path = urlsplit(url).path
        if method != "GET" and self.fence is not None and not _unfenced(method, path):
            self.fence(f"GitHub {method} {path}")
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        all_headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION,
                       "User-Agent": "keel-runners", **headers}
        if body is not None:
            all_headers.setdefault("Content-Type", "application/json")
        try:
            response = session.request(method, url, headers=all_headers, params=params,
                                       data=None if body is None else json.dumps(body),
                                       timeout=timeout or self.settings.timeout_s, verify=self.verify)
        except requests.exceptions.RequestException as err:
            self.requests_total["error"] += 1
            message = f"cannot reach GitHub ({method} {path}): {type(err).__name__}"
            self._heard(None, message)
            raise UnavailableError(message) from None
        self.requests_total[str(response.status_code)] += 1
        self._heard(response, f"GitHub {method} {path}: {response.status_code}")
        if response.status_code in expect:
            self._backoff.pop(kind, None)
            return response
        raise self._error(kind, method, path, response)

    def _heard(self, response: requests.Response | None, what: str) -> None:
        """How GitHub answered (or did not): its health, and its rate limit."""
        if response is not None:
            remaining = response.headers.get("x-ratelimit-remaining", "")
            if remaining.isdigit():
                self.rate_limit[response.headers.get("x-ratelimit-resource") or "core"] = int(remaining)
        if response is None or response.status_code >= 500:
            if self.trouble_since is None:
                self.trouble_since = self.clock()
            self.trouble = what
        else:
            self.trouble_since, self.trouble = None, None

    def _error(self, kind: str, method: str, path: str, response: requests.Response) -> KeelError:
        status = response.status_code
        text = _message(response)
        where = f"GitHub {method} {path}: {status} {text}".rstrip()
        headers = response.headers
        now = self.clock()
        if status in (403, 429):
            until = None
            if headers.get("retry-after", "").strip().isdigit():
                until = now + float(headers["retry-after"])
            elif headers.get("x-ratelimit-remaining") == "0" and headers.get("x-ratelimit-reset", "").isdigit():
                until = max(now + 1.0, float(headers["x-ratelimit-reset"]))
            elif status == 429:
                wait = min(BACKOFF_MAX_S, self._backoff.get(kind, BACKOFF_FIRST_S / 2) * 2)
                self._backoff[kind] = wait
                until = now + wait
            if until is not None:
                self._blocked[kind] = until
                log.warning("%s; waiting %.0f s", where, until - now)
                return RateLimited(where, until)
        if status == 401:
            return AuthError(where)
        if status == 403:
            return PermissionDeniedError(where)
        if status == 404:
            return NotFoundError(where)
        if status == 409:
            return Conflict(where)
        if status == 422 and method == "DELETE":
            return StillRunning(where)
        if status == 400 and "Exists" in text:
            return Conflict(where)
        if status >= 500:
            return UnavailableError(where)
        return KeelError(where)


def _message(response: requests.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    if data.get("typeName"):
        return f"{data['typeName']}: {data.get('message', '')}"[:300]
    return str(data.get("message", ""))[:300]


def _session(scale_set_id: int, data: dict[str, Any]) -> Session:
    return Session(scale_set_id, str(data["sessionId"]), str(data["messageQueueUrl"]),
                   str(data["messageQueueAccessToken"]), dict(data.get("statistics") or {}))


def _epoch(text: str | None, default: float) -> float:
    if not text:
        return default
    import datetime as dt
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return default


def _unfenced(method: str, path: str) -> bool:
    """Writes that act for nobody: getting a token, and ending our own message session
    (a stopped leader hands the scale set over sooner)."""
    return (path.endswith(("/access_tokens", "/registration-token", "/runner-registration"))
            or (method == "DELETE" and "/sessions/" in path))
