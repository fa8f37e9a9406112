"""The web UI harness (a development aid, off by default, never on in the package):
``keel web --harness DIR`` serves the standalone page in ``www/`` that shows Keel's
browser plugin without a Proxmox VE cluster, and a login that gets a PVE ticket from
``proxmox.url`` (the simulator), so the plugin calls keel-web with the user's ticket
exactly as it does inside the Proxmox VE UI.

    /harness/             the page (www/index.html) and its stand-ins (www/*.js, *.css)
    /harness/ext/...      ExtJS 6.2 GPL from npm (www/node_modules/extjs-gpl/build)
    /harness/fa/...       Font Awesome 4.7 from Debian's fonts-font-awesome (or www/node_modules/font-awesome)
    /harness/keel/...     the built plugin (build/pve-ui/keel.js, keel.css)
    POST /harness/login   {"username", "password"} -> ticket, CSRF token and GuiCap
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from flask import Blueprint, Response, jsonify, redirect, request, send_from_directory

from keel.errors import AuthError, InvalidError, KeelError
from keel.pve import access

FONT_AWESOME = Path("/usr/share/fonts-font-awesome")


@dataclass(frozen=True)
class Harness:
    www: Path            # the harness page and its stand-ins
    plugin: Path         # the directory holding the built keel.js (and keel.css)
    extjs: Path          # ExtJS's build directory
    fontawesome: Path = FONT_AWESOME

    @classmethod
    def from_dir(cls, directory: str, plugin: str | None = None) -> "Harness":
        """``DIR`` is the repository's www/; the plugin defaults to ../build/pve-ui beside it.
        Everything it needs must be there: refused with what is missing and how to get it."""
        www = Path(directory).resolve()
        fontawesome = FONT_AWESOME
        if not (fontawesome / "css").exists() and (www / "node_modules" / "font-awesome" / "css").exists():
            fontawesome = www / "node_modules" / "font-awesome"
        harness = cls(www=www, plugin=Path(plugin).resolve() if plugin else www.parent / "build" / "pve-ui",
                      extjs=www / "node_modules" / "extjs-gpl" / "build", fontawesome=fontawesome)
        fetch = "run `make extjs` (fetches what www/package-lock.json pins from the npm registry; no node needed)"
        missing = [(harness.www / "index.html", "the harness page: --harness takes the repository's www/"),
                   (harness.extjs / "ext-all.js", f"ExtJS: {fetch}"),
                   (harness.fontawesome / "css" / "font-awesome.min.css",
                    f"Font Awesome: apt-get install fonts-font-awesome, or {fetch}"),
                   (harness.plugin / "keel.js", "the plugin: run `make ui`")]
        for path, fix in missing:
            if not path.exists():
                raise InvalidError(f"web UI harness: {path} is missing ({fix})")
        return harness


def blueprint(harness: Harness, pve_url: str, verify: bool | str,
              pve_calls: Callable[..., Any] = lambda fn, *args: fn(*args)) -> Blueprint:
    """``pve_calls`` runs the blocking login call (keel-web's thread pool for PVE)."""
    bp = Blueprint("harness", __name__)

    @bp.get("/harness")
    def to_page() -> Response:
        return redirect("/harness/", code=302)

    @bp.get("/harness/")
    def page() -> Response:
        return send_from_directory(harness.www, "index.html", max_age=0)

    @bp.get("/harness/<name>")
    def stand_in(name: str) -> Response:
        if not name.endswith((".js", ".css", ".html")):
            return _missing(name)
        return send_from_directory(harness.www, name, max_age=0)

    @bp.get("/harness/ext/<path:name>")
    def extjs(name: str) -> Response:
        return send_from_directory(harness.extjs, name, max_age=3600)

    @bp.get("/harness/fa/<path:name>")
    def fontawesome(name: str) -> Response:
        return send_from_directory(harness.fontawesome, name, max_age=3600)

    @bp.get("/harness/keel/<name>")
    def plugin(name: str) -> Response:
        return send_from_directory(harness.plugin, name, max_age=0)

    @bp.post("/harness/login")
    def login() -> Response:
        data = request.get_json(silent=True)
        if not isinstance(data, dict):
            data = {}
        username, password = data.get("username"), data.get("password")
        if not isinstance(username, str) or not isinstance(password, str) or not username:
            return _refuse(400, "login: expected a JSON object with username and password")
        try:
            answer = pve_calls(access.login, pve_url, username, password, verify)
        except AuthError as err:
            return _refuse(401, err.message)
        except KeelError as err:
            return _refuse(503, err.message)
        return jsonify({"data": answer})

    return bp


def _missing(name: str) -> Response:
    return _refuse(404, f"no such harness file: {name}")


def _refuse(status: int, message: str) -> Response:
    response = jsonify({"data": None, "message": message, "errors": {}})
    response.status_code = status
    return response
