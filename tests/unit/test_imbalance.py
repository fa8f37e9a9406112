"""One imbalance figure (docs/balancing.md, "The imbalance"): ``keel status``, ``keel plan``
and a plan's reason all show Keel's figure, PVE's CRS figure only beside it and named, and
every percentage is taken on the figure shown (issue 18: "cuts by 95%" beside 0.28 → 0.05
was a cut of the squared objective)."""

from __future__ import annotations

import re

import pytest

from balance_helpers import cluster, node, vm
from keel import words
from keel.balance.balancer import imbalance, make_plan
from keel.balance.history import History
from keel.balance.settings import BalancingSettings
from keel.plan_view import render_plan
from keel.status_view import Style, render, summary

NOW = 1_800_000_000.0


def hot_cluster():
    guests = [vm(100 + i, "a", cpu=0.6, mem_gib=8) for i in range(10)] + [vm(200, "b"), vm(300, "c")]
    return cluster([node("a"), node("b"), node("c")], guests)


def plan(snapshot, **settings):
    return make_plan(snapshot, BalancingSettings(**settings), History(), NOW)


def cut(reason: str) -> tuple[int, float, float]:
    found = re.search(r"cuts the imbalance by (\d+)% \((\d\.\d\d) → (\d\.\d\d)\)", reason)
    assert found, reason
    return int(found.group(1)), float(found.group(2)), float(found.group(3))


def test_the_reason_cuts_the_figure_the_plan_shows_by_the_percentage_it_says():
    p = plan(hot_cluster())
    assert p.verdict == words.PLANNED
    percent, before, after = cut(p.reason)
    b, a = p.before.figures.keel, p.after.figures.keel
    assert (before, after) == (round(b, 2), round(a, 2))
    assert percent == round(100 * (1 - a / b))
    # and not the squared objective's cut, which is larger
    assert round(100 * (1 - p.after.figures.objective / p.before.figures.objective)) > percent
    text = render_plan(p, Style(False, True))
    assert f"Imbalance {b:.2f} → {a:.2f} (typical distance of a node from the cluster average)" in text
    assert f"PVE's CRS figure {p.before.figures.pve:.2f} → {p.after.figures.pve:.2f}" in text
    assert f"by {percent}% ({b:.2f} → {a:.2f})" in text


def test_the_margin_is_a_cut_of_the_figure_too():
    percent, _, _ = cut(plan(hot_cluster(), margin=0.0).reason)
    assert plan(hot_cluster(), margin=(percent - 2) / 100).verdict == words.PLANNED
    refused = plan(hot_cluster(), margin=(percent + 2) / 100)
    assert refused.verdict == words.NOT_WORTH_IT
    assert f"less than the margin of {percent + 2}%" in refused.reason


def test_status_shows_the_figure_a_plan_starts_from():
    snap = hot_cluster()
    settings = BalancingSettings()
    p = make_plan(snap, settings, History(), NOW)
    assert imbalance(snap, settings).keel == pytest.approx(p.before.figures.keel)
    data = summary(snap, settings)
    assert data["imbalance"]["keel"] == round(p.before.figures.keel, 4)
    assert data["imbalance"]["pve"] == round(p.before.figures.pve, 4)
    line = render(snap, Style(False, True)).splitlines()[2]
    assert line.startswith(f"Imbalance {p.before.figures.keel:.2f} (typical distance of a node from the "
                           f"cluster average) · PVE's CRS figure {p.before.figures.pve:.2f} · spread")


def test_a_node_in_maintenance_is_left_out_of_the_figure_as_the_plan_leaves_it_out():
    snap = hot_cluster()
    settings = BalancingSettings(maintenance=frozenset({"c"}))
    p = make_plan(snap, settings, History(), NOW)
    assert summary(snap, settings)["imbalance"]["keel"] == round(p.before.figures.keel, 4)
    assert summary(snap, BalancingSettings(), maintenance=["c"])["imbalance"]["keel"] == \
        round(p.before.figures.keel, 4)


@pytest.mark.parametrize("figure, name", [("pve", "PVE's CRS figure"), ("spread", "spread")])
def test_a_threshold_on_another_figure_names_it(figure, name):
    # a threshold the figure is within, and no test of a single hot node
    p = plan(hot_cluster(), imbalance=figure, threshold=0.99, above_mean=None, hotspot=None)
    assert p.verdict == words.BALANCED and p.reason.startswith(f"{name} ")
    assert plan(hot_cluster(), threshold=0.99, above_mean=None, hotspot=None).reason.startswith("imbalance ")


def test_mandatory_moves_are_said_apart_so_every_figure_in_the_reason_adds_up():
    snap = hot_cluster()
    p = plan(snap, maintenance=frozenset({"c"}))        # c's guest must go first
    assert p.verdict == words.PLANNED and any(m.reason == words.MAINTENANCE for m in p.moves)
    found = re.match(r"1 mandatory move: imbalance (\d\.\d\d) → (\d\.\d\d); then cuts the imbalance by "
                     r"(\d+)% \((\d\.\d\d) → (\d\.\d\d)\) with \d+ balancing moves(; [^;]+)?$", p.reason)
    assert found, p.reason
    start, middle, percent, middle_again, end, _ = found.groups()
    assert float(start) == round(p.before.figures.keel, 2) and middle == middle_again
    assert float(end) == round(p.after.figures.keel, 2)
