"""Load over time: what a simulated guest uses at a given instant.

Everything is a pure function of (seed, vmid, time), so a scenario replays the same way
every run and the RRD history can be computed for any past instant without storing it.
Samples change every ``SAMPLE_S`` seconds, as pvestatd broadcasts every 10 s.
"""

from __future__ import annotations

import math

from keel.sim.scenario import Profile

SAMPLE_S = 10
_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64 finaliser: a well-spread 64-bit hash of an integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def uniform(*keys: int) -> float:
    """A deterministic number in [0, 1) for the given integer keys."""
    h = 0
    for key in keys:
        h = _mix(h ^ (key & _MASK))
    return (h >> 11) / float(1 << 53)


def gaussian(*keys: int) -> float:
    u1 = max(uniform(*keys, 1), 1e-12)
    u2 = uniform(*keys, 2)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2 * math.pi * u2)


def daily_factor(amplitude: float, peak_hour: float, t: float) -> float:
    if not amplitude:
        return 1.0
    hour = (t % 86400) / 3600.0
    return 1.0 + amplitude * math.cos(2 * math.pi * (hour - peak_hour) / 24.0)


def cpu_frac(base: float, profile: Profile | None, seed: int, vmid: int, t: float) -> float:
    """The guest's cpu use, as a fraction of its own cpus, at time ``t``."""
    if profile is None:
        return base
    sample = int(t // SAMPLE_S)
    value = base * daily_factor(profile.daily_amplitude, profile.peak_hour, t)
    if profile.noise:
        value *= max(0.0, 1.0 + profile.noise * gaussian(seed, vmid, sample))
    if profile.burst_per_hour:
        slot = int(t // profile.burst_duration_s)
        chance = profile.burst_per_hour * profile.burst_duration_s / 3600.0
        if uniform(seed, vmid, slot, 7) < chance:
            value = max(value, profile.burst_level)
    return min(1.0, max(0.0, value))


def mem_bytes(base: int, maxmem: int, profile: Profile | None, t: float) -> int:
    if profile is None or not profile.mem_amplitude:
        return base
    value = base * daily_factor(profile.mem_amplitude, profile.peak_hour, t)
    return int(min(maxmem, max(0, value)))


def cpu_pressure(util: float) -> float:
    """PSI cpu "some" (percent) for a host at ``util`` busy: rises past 60 % use."""
    return round(min(100.0, 100.0 * max(0.0, (util - 0.6) / 0.4) ** 2 * 0.5), 2)


def mem_pressure(used_frac: float) -> tuple[float, float]:
    """PSI memory (some, full) in percent: reclaim stalls start near 85 % use."""
    some = min(100.0, 100.0 * max(0.0, (used_frac - 0.85) / 0.15) ** 2 * 0.4)
    return round(some, 2), round(some * 0.3, 2)


def io_pressure(seed: int, key: int, t: float) -> tuple[float, float]:
    some = 0.5 + 1.5 * uniform(seed, key, int(t // SAMPLE_S), 11)
    return round(some, 2), round(some * 0.2, 2)
