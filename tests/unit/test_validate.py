"""The strict reader reports every problem with its path, and unknown keys too."""

import pytest

from keel.errors import InvalidError
from keel.validate import Problems, Reader


def read(data):
    problems = Problems("test.yaml")
    top = Reader(data, "", problems)
    values = {
        "name": top.get("name", str),
        "count": top.integer("count", 3, low=1),
        "ratio": top.number("ratio", 0.5, 0, 1),
        "size": top.size("size", 1024),
        "wait": top.duration("wait", 10.0),
        "mode": top.choice("mode", ("a", "b"), "a"),
        "tags": top.string_list("tags"),
    }
    items = [Reader(item, path, problems).get("id", int) for path, item in top.items("things")]
    top.done()
    return values, items, problems


def test_a_good_document_reads_with_defaults():
    values, items, problems = read({"name": "x", "tags": "a;b, c", "things": [{"id": 1}]})
    assert problems.items == []
    assert values == {"name": "x", "count": 3, "ratio": 0.5, "size": 1024, "wait": 10.0,
                      "mode": "a", "tags": ("a", "b", "c")}
    assert items == [1]


def test_every_problem_is_reported_with_its_path():
    _, _, problems = read({"count": 0, "ratio": "half", "size": "big", "wait": "soon",
                           "mode": "c", "colour": "red", "things": [{"id": 1}, {"id": "two"}]})
    paths = dict(problems.items)
    assert set(paths) == {"name", "count", "ratio", "size", "wait", "mode", "colour", "things[1].id"}
    assert paths["name"] == "is required"
    assert paths["colour"] == "unknown key"
    assert "at least 1" in paths["count"]
    assert "one of a, b" in paths["mode"]
    with pytest.raises(InvalidError) as caught:
        problems.raise_if_any()
    assert "test.yaml: 8 problem(s)" in str(caught.value)
    assert caught.value.errors["things[1].id"].startswith("expected an integer")


def test_booleans_are_not_numbers_and_numbers_not_booleans():
    problems = Problems("t")
    top = Reader({"n": True, "b": 1}, "", problems)
    top.integer("n", 0)
    top.get("b", bool, False)
    assert [p for p, _ in problems.items] == ["n", "b"]


def test_a_section_that_is_not_a_mapping_is_reported():
    problems = Problems("t")
    Reader(["a"], "pve", problems)
    assert problems.items == [("pve", "expected a mapping, got list")]
