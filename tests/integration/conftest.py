"""Fixtures the runners' integration tests share."""

from __future__ import annotations

import pytest

from runners_helpers import SimPool, kit_fixture


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """One simulator per scenario for the module, reset before each test."""
    pool = SimPool(tmp_path_factory.mktemp("sims"))
    yield pool
    pool.close()


@pytest.fixture
def kits(pool, tmp_path):
    """``kits(scale_sets, scenario, ...)`` makes a runner service on a simulator of the pool;
    every one made is closed after the test."""
    make, made = kit_fixture(pool, tmp_path)
    yield make
    for kit in made:
        kit.service.close()
