"""Keel's SQLite history: maintenance kept cluster-wide when a shared directory is given,
old rows pruned, files written atomically."""

from __future__ import annotations

import json

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
