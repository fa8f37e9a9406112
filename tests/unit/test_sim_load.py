"""keel.sim.load: guest load as a pure function of (seed, vmid, time)."""

from __future__ import annotations

import statistics

import pytest

from keel.sim import load
from keel.sim.scenario import Profile

DAY = 86400
GiB = 1024**3
T0 = 1_795_000_000.0


def samples(profile: Profile | None, base: float = 0.4, seed: int = 1, vmid: int = 100,
            span: float = DAY, step: float = 10) -> list[float]:
    return [load.cpu_frac(base, profile, seed, vmid, T0 + i * step) for i in range(int(span / step))]


def test_same_inputs_give_the_same_load():
    profile = Profile(daily_amplitude=0.3, noise=0.2, burst_per_hour=2)
    assert samples(profile) == samples(profile)
    assert load.uniform(7, 100, 5) == load.uniform(7, 100, 5)


def test_seed_and_vmid_change_the_noise():
    profile = Profile(noise=0.2)
    assert samples(profile, seed=1) != samples(profile, seed=2)
    assert samples(profile, vmid=100) != samples(profile, vmid=101)


def test_a_value_holds_for_a_whole_sample_period():
    profile = Profile(noise=0.3)
    start = (T0 // load.SAMPLE_S) * load.SAMPLE_S
    values = {load.cpu_frac(0.4, profile, 1, 100, start + dt) for dt in (0, 3.3, 9.99)}
    assert len(values) == 1
    assert load.cpu_frac(0.4, profile, 1, 100, start + load.SAMPLE_S) not in values


def test_without_a_profile_the_base_load_is_constant():
    assert set(samples(None, base=0.37)) == {0.37}
    assert load.mem_bytes(3 * GiB, 8 * GiB, None, T0) == 3 * GiB


@pytest.mark.parametrize("profile", [
    Profile(),
    Profile(daily_amplitude=1.0, noise=1.0),
    Profile(burst_per_hour=60, burst_level=1.0),
    Profile(noise=0.5, burst_per_hour=3, burst_duration_s=60, daily_amplitude=0.5, peak_hour=3),
])
@pytest.mark.parametrize("base", [0.0, 0.05, 0.5, 1.0])
def test_cpu_stays_a_fraction(profile, base):
    assert all(0.0 <= v <= 1.0 for v in samples(profile, base=base, step=60))


def test_daily_cycle_peaks_at_the_peak_hour():
    profile = Profile(daily_amplitude=0.5, peak_hour=14)
    day0 = (T0 // DAY) * DAY
    at = {h: load.cpu_frac(0.4, profile, 1, 100, day0 + h * 3600) for h in range(24)}
    assert max(at, key=at.get) == 14 and min(at, key=at.get) == 2
    assert at[14] == pytest.approx(0.6) and at[2] == pytest.approx(0.2)


def test_noise_averages_out_near_the_base():
    values = samples(Profile(noise=0.1), base=0.4)
    assert statistics.mean(values) == pytest.approx(0.4, abs=0.01)
    assert 0.02 < statistics.pstdev(values) < 0.06


def test_bursts_happen_about_as_often_as_asked():
    profile = Profile(burst_per_hour=2, burst_duration_s=300, burst_level=0.95)
    values = samples(profile, base=0.1, span=10 * DAY, step=60)
    share = sum(v >= 0.95 for v in values) / len(values)
    assert share == pytest.approx(2 * 300 / 3600, abs=0.05)   # about a sixth of the time
    assert min(values) == pytest.approx(0.1)


def test_memory_follows_its_amplitude_within_the_maximum():
    profile = Profile(mem_amplitude=0.5, peak_hour=12)
    day0 = (T0 // DAY) * DAY
    noon = load.mem_bytes(6 * GiB, 8 * GiB, profile, day0 + 12 * 3600)
    night = load.mem_bytes(6 * GiB, 8 * GiB, profile, day0)
    assert noon == 8 * GiB               # 9 GiB wanted, capped at maxmem
    assert night == 3 * GiB


@pytest.mark.parametrize("util, low, high", [(0.0, 0, 0), (0.5, 0, 0), (0.8, 5, 20), (1.0, 49, 50)])
def test_cpu_pressure_is_a_percentage_that_rises_past_60_percent(util, low, high):
    assert low <= load.cpu_pressure(util) <= high


@pytest.mark.parametrize("used, some_low, some_high", [(0.5, 0, 0), (0.9, 1, 10), (1.0, 39, 40)])
def test_memory_pressure_starts_near_85_percent(used, some_low, some_high):
    some, full = load.mem_pressure(used)
    assert some_low <= some <= some_high and 0 <= full <= some


def test_io_pressure_is_small_and_deterministic():
    values = [load.io_pressure(7, 100, T0 + i * 10) for i in range(500)]
    assert values == [load.io_pressure(7, 100, T0 + i * 10) for i in range(500)]
    assert all(0.5 <= some <= 2.0 and full <= some for some, full in values)


def test_uniform_is_spread_over_zero_to_one():
    values = [load.uniform(3, i) for i in range(20000)]
    assert 0 <= min(values) and max(values) < 1
    assert statistics.mean(values) == pytest.approx(0.5, abs=0.01)
    assert sum(v < 0.1 for v in values) / len(values) == pytest.approx(0.1, abs=0.01)
