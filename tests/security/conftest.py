"""Fixtures for the hostile tests of keel-web (test_web_*.py)."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from service_helpers import node_stack


@pytest.fixture(scope="session")
def web_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """The demo simulator, keel-engine and keel-web as real processes: (sim, web URL).
    Shared by the modules: each test sends from loopback addresses of its own
    (127.0.0.x), since keel-web counts connections and refusals per address."""
    with node_stack(tmp_path_factory.mktemp("web-security"), 20) as running:
        yield running
