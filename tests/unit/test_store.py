"""Keel's SQLite history: maintenance kept cluster-wide when a shared directory is given,
old rows pruned, files written atomically."""

from __future__ import annotations

import json
import sqlite3

import pytest

from keel.files import atomic_write
from keel.store import KEEP_MOVES_S, Store


class FakeMove:
    vmid, name, type, source, target, reason, detail = 100, "web1", "qemu", "a", "b", "balance", "x"


def test_maintenance_in_the_shared_directory_is_seen_by_every_store(tmp_path):
    shared = tmp_path / "pve-keel"
    a = Store(tmp_path / "a.db", shared_dir=shared)
    b = Store(tmp_path / "b.db", shared_dir=shared)
    a.maintenance_enter("pve3", "web:alice@pam", 1000.0)
    assert b.maintenance_nodes() == {"pve3": {"since": 1000.0, "requested_by": "web:alice@pam"}}
    assert b.history(2000.0).maintenance == {"pve3"}
    assert json.loads((shared / "maintenance.json").read_text())["nodes"]["pve3"]["since"] == 1000.0
    assert b.maintenance_leave("pve3") and not a.maintenance_leave("pve3")
    assert a.history(2000.0).maintenance == frozenset()


def test_without_a_shared_directory_maintenance_stays_in_sqlite(tmp_path):
    store = Store(tmp_path / "k.db")
    store.maintenance_enter("pve1", "cli:root", 5.0)
    assert Store(tmp_path / "k.db").maintenance_nodes()["pve1"]["requested_by"] == "cli:root"


def test_prune_drops_old_moves_and_expired_blocks(tmp_path):
    store = Store(tmp_path / "k.db")
    now = 10 * KEEP_MOVES_S
    old = store.move_started("p1", FakeMove, "cli:root", None, now - KEEP_MOVES_S - 10)
    store.move_ended(old, True, now - KEEP_MOVES_S - 5)
    new = store.move_started("p2", FakeMove, "cli:root", None, now - 100)
    store.move_ended(new, True, now - 50)
    store.block(101, now - 1, "refused")
    store.block(102, now + 3600, "refused")
    store.prune(now)
    assert [m["plan_id"] for m in store.moves()] == ["p2"]
    assert set(store.history(now).blocked) == {102}


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "dir" / "file.json"
    atomic_write(target, "one")
    atomic_write(target, "two")
    assert target.read_text() == "two" and [p.name for p in target.parent.iterdir()] == ["file.json"]


@pytest.fixture
def connections(monkeypatch):
    """Every SQLite connection Keel's stores open (Python 3.13 warns about an unclosed one
    only when the collector finds it; this sees it on any version)."""
    opened: list[sqlite3.Connection] = []
    real = sqlite3.connect

    def connect(*args, **kwargs):
        opened.append(real(*args, **kwargs))
        return opened[-1]
    monkeypatch.setattr(sqlite3, "connect", connect)
    return opened


def _open(connection: sqlite3.Connection) -> bool:
    try:
        connection.execute("SELECT 1")
        return True
    except sqlite3.ProgrammingError:         # "Cannot operate on a closed database."
        return False


def test_the_history_store_closes_every_connection_it_opens(tmp_path, connections):
    store = Store(tmp_path / "k.db")          # __init__ made the schema through `with db:`, which
    store.move_started("p1", FakeMove(), "cli:root", None, 1.0)     # commits but never closed
    store.add_samples(2.0, {"qemu/100": (0.5, 0.25)}, keep_s=60)
    assert store.moves() and store.samples(0.0)
    assert len(connections) >= 4 and not [c for c in connections if _open(c)]


def test_a_store_that_cannot_be_opened_leaves_no_connection(tmp_path, connections):
    from keel.errors import InvalidError
    from keel.runners.store import RunnerStore
    bad = tmp_path / "not-a-database.db"
    bad.write_bytes(b"this is no SQLite file " * 100)
    for make in (Store, RunnerStore):
        with pytest.raises(InvalidError, match="cannot open Keel's store"):
            make(bad)
    assert len(connections) == 2 and not [c for c in connections if _open(c)]


def test_the_runners_store_closes_its_connection(tmp_path, connections):
    from keel.runners.store import RunnerStore
    store = RunnerStore(tmp_path / "k.db")
    store.event(1.0, "created")
    store.close()
    assert len(connections) == 1 and not _open(connections[0])
