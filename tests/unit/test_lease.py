"""The leader lease on an ordinary directory: one holder, renewals, expiry, take-over;
the acting window on the monotonic clock (stalls, clock steps) and the fence."""

from __future__ import annotations

import pytest

from keel.engine.lease import Fence, Lease
from keel.errors import FencedError


class Clock:
    """The wall clock; ``mono`` the monotonic one, which moves with it unless ``step``."""

    def __init__(self, t=1_000_000.0):
        self.t = t
        self.offset = 0.0

    def __call__(self):
        return self.t

    def mono(self):
        return self.t - self.offset - 999_000.0

    def step(self, seconds):
        """An NTP step: the wall clock jumps, the monotonic one does not."""
        self.t += seconds
        self.offset += seconds


def lease(path, node, clock, expiry_s=120.0):
    return Lease(path, expiry_s=expiry_s, node=node, clock=clock, monotonic=clock.mono)


def test_one_takes_it_the_other_waits(tmp_path):
    clock = Clock()
    a = lease(tmp_path / "lock", "a", clock)
    b = lease(tmp_path / "lock", "b", clock)
    assert a.tick() and not b.tick()
    assert a.holder() == "a" and b.holder() == "a"
    clock.t += 10
    assert a.tick() and not b.tick()


def test_a_dead_holder_is_replaced_after_the_expiry_and_never_before(tmp_path):
    clock = Clock()
    a = lease(tmp_path / "lock", "a", clock)
    b = lease(tmp_path / "lock", "b", clock)
    assert a.tick()
    # a stops renewing (it died); it stops acting itself after half the expiry
    clock.t += 61
    assert not a.held()
    clock.t += 58                      # 119 s after a's last renewal
    assert not b.tick()
    clock.t += 2                       # 121 s
    assert b.tick() and b.holder() == "b"
    # a comes back: its renewal fails (not its lock any more), and it does not act
    assert not a.tick()
    assert b.tick()


def test_never_two_acting_at_once(tmp_path):
    clock = Clock()
    leases = [lease(tmp_path / "lock", f"n{i}", clock, expiry_s=20) for i in range(3)]
    alive = [True, True, True]
    for step in range(400):
        clock.t += 1
        if step == 50:
            alive[0] = False           # the first leader dies ...
        if step == 200:
            alive[0] = True            # ... and comes back
        for one, up in zip(leases, alive):
            if up and step % 3 == leases.index(one) % 3:
                one.tick()
        assert sum(one.held() for one in leases) <= 1
    assert any(one.held() for one in leases)


def test_release_lets_another_take_it_at_once(tmp_path):
    clock = Clock()
    a = lease(tmp_path / "lock", "a", clock)
    b = lease(tmp_path / "lock", "b", clock)
    assert a.tick()
    a.release()
    assert not a.held() and not (tmp_path / "lock").exists()
    assert b.tick()


def test_a_hand_over_stops_acting_first_and_does_not_contend_for_a_while(tmp_path):
    clock = Clock()
    a = lease(tmp_path / "lock", "a", clock)
    b = lease(tmp_path / "lock", "b", clock)
    assert a.tick()
    fence = Fence(a, 15.0)
    a.release(hold_off_s=120.0, reason="handed over: so that a may sleep")
    assert not a.held() and a.lost_reason == "handed over: so that a may sleep"
    with pytest.raises(FencedError, match="handed over"):
        fence.check("a migration")
    assert not a.tick()                       # free, but a holds off: b takes it
    assert b.tick() and b.holder() == "b"
    clock.t += 60
    b.release()                               # b gives it back within a's hold-off: a still waits
    assert not a.tick() and not (tmp_path / "lock").exists()
    clock.t += 61                             # past the hold-off: a contends again
    assert a.tick() and a.holder() == "a"


def test_a_lock_directory_that_cannot_be_made_makes_a_follower(tmp_path):
    (tmp_path / "pve").write_text("not a directory: as /etc/pve without quorum refuses writes")
    one = Lease(tmp_path / "pve" / "lock", node="a")
    assert not one.tick() and not one.held()
    assert one.error and str(tmp_path / "pve") in one.error


def test_a_stalled_holder_wakes_up_without_the_lease_and_never_renews_late(tmp_path):
    """Issue 13, finding 1: a leader stopped for longer than its window used to think it
    still led (held was computed from a clock that it renewed on waking)."""
    clock = Clock()
    a, b = lease(tmp_path / "lock", "a", clock, expiry_s=4), lease(tmp_path / "lock", "b", clock, expiry_s=4)
    assert a.tick() and a.held(0.5)
    clock.t += 1.6                    # inside the window, but not with half a second to spare
    assert a.held() and not a.held(0.5)
    clock.t += 3.0                    # SIGSTOP: 4.6 s without a renewal; nobody took it yet
    assert not a.held()
    assert not a.tick()               # not renewed late, although the lock is still its own
    assert "not renewed for 4.6 s" in a.lost_reason
    clock.t += 0.5                    # stale: anyone may take it, a as well as b
    assert b.tick() and not a.tick() and b.holder() == "b"


def test_a_wall_clock_step_makes_the_holder_step_down(tmp_path):
    clock = Clock()
    a = lease(tmp_path / "lock", "a", clock, expiry_s=120)
    assert a.tick()
    clock.t += 10
    assert a.tick()
    clock.step(-300)                  # the lock's mtime, set from this clock, is now suspect
    assert not a.tick() and not a.held()
    assert "stepped by -300.0 s" in a.lost_reason
    clock.t += 10                     # the monotonic clock is what measured that
    assert a.age() is None


def test_the_window_is_measured_from_the_start_of_a_renewal(tmp_path, monkeypatch):
    """A slow /etc/pve: the renewal that took 3 s counts from when it began."""
    clock = Clock()
    a = lease(tmp_path / "lock", "a", clock, expiry_s=8)
    assert a.tick()
    real = a._renew

    def slow():
        clock.t += 3
        return real()
    monkeypatch.setattr(a, "_renew", slow)
    clock.t += 1
    assert a.tick() and a.age() == pytest.approx(3.0)


def test_the_fence_lets_acts_through_only_with_the_margin_and_says_why_not(tmp_path):
    clock = Clock()
    a = lease(tmp_path / "lock", "a", clock, expiry_s=4)
    lost = []
    fence = Fence(a, 0.5, on_lost=lost.append, sleep=lambda s: setattr(clock, "t", clock.t + s))
    with pytest.raises(FencedError, match="not the leader: POST /x not made"):
        fence.check("POST /x")        # never held
    assert a.tick()
    fence.check("POST /x")
    assert lost == [lost[0]] and fence.refused == 1
    clock.t += 1.7                    # near the end: the fence waits for a renewal that never comes
    with pytest.raises(FencedError, match="last renewed"):
        fence.check("POST /y")
    assert len(lost) == 2 and "POST /y" in lost[1]


def test_the_fence_waits_out_a_renewal_near_the_end_of_the_window(tmp_path):
    clock = Clock()
    a = lease(tmp_path / "lock", "a", clock, expiry_s=4)
    assert a.tick()
    clock.t += 1.7
    waits = []

    def sleep(seconds):
        waits.append(seconds)
        clock.t += seconds
        if len(waits) == 2:
            a.tick()                   # the lease loop renews meanwhile
    Fence(a, 0.5, sleep=sleep).check("POST /x")
    assert len(waits) == 2
