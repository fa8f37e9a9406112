"""Which provider a runner is tried on, and who stays off which provider for how long.

Pure: no I/O, and time comes in as ``now``.

* **Order** (``order``): ``spread`` tries first the provider with the fewest of the scale
  set's runners for its weight (a provider of weight 2 counts as having half of them);
  ``pack`` tries the highest weight first.  Ties go in the order the scale set lists them.
* **Backoff** (``refused``/``succeeded``): a provider that refuses a scale set's runner, for
  whatever reason, is skipped by that scale set for 15 s, doubling with each refusal in a
  row up to 2 minutes; one runner created there forgives it.  Other scale sets still try it.
  A *full* backoff also ends early when Keel itself frees room on that provider after the
  refusal and the runner fits now (``ends_on_room``, then ``forgive``): the pass that sees
  the room tries the scale sets in priority order, so the room goes to the highest first.
* **Holds**: a scale set refused as *full* holds scale sets of lower priority back from
  that provider for two reconcile intervals, so that the next room freed there is its own.
  It renews the hold while it keeps wanting a runner there (``renew``) and ends it when it
  creates one.  Equal priorities never hold each other; it is not a reservation: nothing
  running is touched, and a held-back scale set still uses its other providers.

    >>> p = Placement(interval_s=30)
    >>> _ = p.refused("large", 10, "pve", FULL, now=0)
    >>> p.held_back("small", 0, "pve", now=10).holder
    'large'
    >>> p.backoff_until("large", "pve", now=10)
    15.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

FULL = "full"            # nothing fits now: CPU, memory, disk
NEVER = "never"          # can never fit, or the template is missing: a config problem
FAILING = "failing"      # an error: the API refused, a task failed
REFUSALS = (FULL, NEVER, FAILING)

BACKOFF_FIRST_S = 15.0
BACKOFF_MAX_S = 120.0
HOLD_INTERVALS = 2


@dataclass
class Backoff:
    refusals: int
    until: float
    kind: str
    message: str = ""
    at: float = 0.0          # when it was refused


@dataclass
class Hold:
    holder: str
    priority: int
    until: float


@dataclass
class Placement:
    interval_s: float
    backoffs: dict[tuple[str, str], Backoff] = field(default_factory=dict)
    holds: dict[str, dict[str, Hold]] = field(default_factory=dict)     # provider -> holder -> hold

    # -- order -----------------------------------------------------------------------------

    @staticmethod
    def order(placement: str, listed: Iterable[str], weights: dict[str, float],
              counts: dict[str, int]) -> list[str]:
        names = list(listed)
        index = {name: i for i, name in enumerate(names)}
        if placement == "pack":
            return sorted(names, key=lambda n: (-weights.get(n, 1.0), index[n]))
        return sorted(names, key=lambda n: (counts.get(n, 0) / weights.get(n, 1.0), index[n]))

    # -- backoff ----------------------------------------------------------------------------

    def refused(self, scale_set: str, priority: int, provider: str, kind: str, now: float,
                message: str = "", holds: bool = True) -> Backoff:
        """A refusal; ``holds``: whether any scale set of lower priority uses the provider."""
        previous = self.backoffs.get((scale_set, provider))
        refusals = previous.refusals + 1 if previous else 1
        wait = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (refusals - 1))
        backoff = Backoff(refusals, now + wait, kind, message, now)
        self.backoffs[(scale_set, provider)] = backoff
        if kind == FULL and holds:
            self.hold(scale_set, priority, provider, now)
        return backoff

    def succeeded(self, scale_set: str, provider: str) -> None:
        self.backoffs.pop((scale_set, provider), None)
        self.holds.get(provider, {}).pop(scale_set, None)

    def backoff_until(self, scale_set: str, provider: str, now: float) -> float | None:
        backoff = self.backoffs.get((scale_set, provider))
        return backoff.until if backoff and backoff.until > now else None

    def backoff(self, scale_set: str, provider: str) -> Backoff | None:
        return self.backoffs.get((scale_set, provider))

    def ends_on_room(self, scale_set: str, provider: str, freed_at: float | None, now: float) -> bool:
        """A "full" backoff still running that room freed since (at ``freed_at``) may end."""
        backoff = self.backoffs.get((scale_set, provider))
        return backoff is not None and backoff.until > now and backoff.kind == FULL and \
            freed_at is not None and freed_at >= backoff.at

    def forgive(self, scale_set: str, provider: str, now: float) -> None:
        """The wait is over now (room was freed and the runner fits); the count of refusals in
        a row stays, until a runner is created there."""
        backoff = self.backoffs.get((scale_set, provider))
        if backoff is not None:
            backoff.until = min(backoff.until, now)

    def next_change(self, after: float) -> float | None:
        """When the first backoff or hold ends after ``after`` (the last pass): a pass is due then."""
        ends = [b.until for b in self.backoffs.values() if b.until > after]
        ends += [h.until for holds in self.holds.values() for h in holds.values() if h.until > after]
        return min(ends, default=None)

    # -- holds -------------------------------------------------------------------------------

    def hold(self, scale_set: str, priority: int, provider: str, now: float) -> None:
        self.holds.setdefault(provider, {})[scale_set] = Hold(scale_set, priority,
                                                             now + HOLD_INTERVALS * self.interval_s)

    def renew(self, scale_set: str, provider: str, now: float) -> bool:
        """The holder still wants a runner there: its hold lasts two more intervals."""
        hold = self.holds.get(provider, {}).get(scale_set)
        if hold is None or hold.until <= now:
            return False
        hold.until = now + HOLD_INTERVALS * self.interval_s
        return True

    def held_back(self, scale_set: str, priority: int, provider: str, now: float) -> Hold | None:
        """The hold of a higher-priority scale set that keeps this one off ``provider``."""
        found = [h for h in self.holds.get(provider, {}).values()
                 if h.until > now and h.priority > priority and h.holder != scale_set]
        return max(found, key=lambda h: (h.priority, h.until)) if found else None

    def holds_on(self, provider: str, now: float) -> list[Hold]:
        return sorted((h for h in self.holds.get(provider, {}).values() if h.until > now),
                      key=lambda h: (-h.priority, h.holder))

    def expire(self, now: float) -> None:
        for provider in list(self.holds):
            self.holds[provider] = {k: h for k, h in self.holds[provider].items() if h.until > now}
            if not self.holds[provider]:
                del self.holds[provider]
