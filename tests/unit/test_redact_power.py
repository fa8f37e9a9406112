"""Power saving's free text names no guest the caller may not see (keel.engine.redact)."""

from __future__ import annotations

from types import SimpleNamespace

from keel.engine import redact


def guest(vmid, name):
    return SimpleNamespace(vmid=vmid, name=name)


GUESTS = [guest(250, "build-cache"), guest(101, "web1"), guest(1010, "web10")]


def test_a_hidden_guest_is_replaced_everywhere_in_the_answer_and_the_rest_kept():
    see = lambda vmid: vmid == 101            # noqa: E731
    hidden = redact.hidden_names(GUESTS, see)
    assert sorted(hidden) == ["1010", "250", "build-cache", "web10"]
    plan = {"verdict": "ALL AWAKE", "refusals": [
        {"node": "pve8", "gate": "guests stay", "detail": "build-cache (250) has local disks; web1 (101) too"}],
        "events": [["pve8", "web10 (1010) still running on it"]], "count": 250}
    out = redact.scrub(plan, hidden)
    text = str(out)
    assert "build-cache" not in text and "(250)" not in text and "web10" not in text and "1010" not in text
    assert out["refusals"][0]["detail"] == ("a guest you may not see (a guest you may not see) has local disks; "
                                            "web1 (101) too")
    assert out["refusals"][0]["node"] == "pve8" and out["count"] == 250       # numbers are not text
    assert out["events"][0][0] == "pve8"


def test_a_name_inside_another_word_is_not_touched():
    hidden = redact.hidden_names([guest(10, "web")], lambda vmid: False)
    assert redact.scrub({"t": "web10 and webapp; web (10) here"}, hidden) == {
        "t": "web10 and webapp; a guest you may not see (a guest you may not see) here"}


def test_nothing_hidden_leaves_the_answer_as_it_is():
    data = {"detail": "build-cache (250)"}
    assert redact.scrub(data, redact.hidden_names(GUESTS, lambda vmid: True)) is data
