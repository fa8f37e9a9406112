"""The leader lease on an ordinary directory: one holder, renewals, expiry, take-over."""

from __future__ import annotations

from keel.engine.lease import Lease


class Clock:
    def __init__(self, t=1_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


def test_one_takes_it_the_other_waits(tmp_path):
    clock = Clock()
    a = Lease(tmp_path / "lock", expiry_s=120, node="a", clock=clock)
    b = Lease(tmp_path / "lock", expiry_s=120, node="b", clock=clock)
    assert a.tick() and not b.tick()
    assert a.holder() == "a" and b.holder() == "a"
    clock.t += 10
    assert a.tick() and not b.tick()


def test_a_dead_holder_is_replaced_after_the_expiry_and_never_before(tmp_path):
    clock = Clock()
    a = Lease(tmp_path / "lock", expiry_s=120, node="a", clock=clock)
    b = Lease(tmp_path / "lock", expiry_s=120, node="b", clock=clock)
    assert a.tick()
    # a stops renewing (it died); it stops acting itself after half the expiry
    clock.t += 61
    assert not a.held
    clock.t += 58                      # 119 s after a's last renewal
    assert not b.tick()
    clock.t += 2                       # 121 s
    assert b.tick() and b.holder() == "b"
    # a comes back: its renewal fails (not its lock any more), and it does not act
    assert not a.tick()
    assert b.tick()


def test_never_two_acting_at_once(tmp_path):
    clock = Clock()
    leases = [Lease(tmp_path / "lock", expiry_s=20, node=f"n{i}", clock=clock) for i in range(3)]
    alive = [True, True, True]
    for step in range(400):
        clock.t += 1
        if step == 50:
            alive[0] = False           # the first leader dies ...
        if step == 200:
            alive[0] = True            # ... and comes back
        for lease, up in zip(leases, alive):
            if up and step % 3 == leases.index(lease) % 3:
                lease.tick()
        assert sum(lease.held for lease in leases) <= 1
    assert any(lease.held for lease in leases)


def test_release_lets_another_take_it_at_once(tmp_path):
    clock = Clock()
    a = Lease(tmp_path / "lock", node="a", clock=clock)
    b = Lease(tmp_path / "lock", node="b", clock=clock)
    assert a.tick()
    a.release()
    assert not a.held and not (tmp_path / "lock").exists()
    assert b.tick()


def test_a_lock_directory_that_cannot_be_made_makes_a_follower(tmp_path):
    (tmp_path / "pve").write_text("not a directory: as /etc/pve without quorum refuses writes")
    lease = Lease(tmp_path / "pve" / "lock", node="a")
    assert not lease.tick() and not lease.held
    assert lease.error and str(tmp_path / "pve") in lease.error
