"""Running a Flask app under gunicorn from inside ``keel`` (no gunicorn command line).

``keel engine`` and ``keel web`` use it; the systemd units call those.  The app is built
in the worker (never in the master), so the engine's threads live where requests are
served, and ``on_exit`` runs when the worker stops (SIGTERM: finish what runs, release
the lease).
"""

from __future__ import annotations

from typing import Any, Callable

from gunicorn.app.base import BaseApplication


class _Server(BaseApplication):  # type: ignore[misc]
    def __init__(self, load: Callable[[], Any], options: dict[str, Any]):
        self._load = load
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._load()


def serve(load: Callable[[], Any], options: dict[str, Any]) -> None:
    """Serve until SIGTERM/SIGINT.  ``options`` are gunicorn settings (bind, workers, ...)."""
    base = {"worker_class": "gthread", "accesslog": None, "errorlog": "-", "loglevel": "warning",
            "preload_app": False, "capture_output": False}
    _Server(load, {**base, **options}).run()
