# SPDX-License-Identifier: AGPL-3.0-or-later
"""pve-ui/keel_inject.py (installed as /usr/share/pve-keel/keel-inject): the one marked line
in index.html.tpl, on templates shaped like PVE 8's and 9's."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "pve-ui" / "keel_inject.py"
FIXTURES = ROOT / "tests" / "fixtures" / "pve-ui"
TEMPLATES = sorted(FIXTURES.glob("index-pve*.html.tpl"))

spec = importlib.util.spec_from_file_location("keel_inject", SCRIPT)
inject = importlib.util.module_from_spec(spec)
spec.loader.exec_module(inject)


def ids(path: Path) -> str:
    return path.name.split(".")[0].removeprefix("index-")


@pytest.fixture(params=TEMPLATES, ids=ids)
def template(request, tmp_path: Path) -> Path:
    path = tmp_path / "index.html.tpl"
    path.write_bytes(request.param.read_bytes())
    return path


def our_lines(text: bytes) -> list[bytes]:
    return [line for line in text.splitlines(keepends=True) if b"/pve2/js/keel.js" in line]


def test_fixtures_are_pve_8_and_9_shaped():
    assert [ids(p) for p in TEMPLATES] == ["pve8", "pve9"]
    for path in TEMPLATES:
        text = path.read_text()
        order = ["ext-all.js", "u2f-api.js", "Proxmox = {", "proxmoxlib.js", "pvemanagerlib.js",
                 "locale/locale-", "Ext.onReady"]
        assert [text.index(s) for s in order] == sorted(text.index(s) for s in order)
        assert text.count("pvemanagerlib.js") == 1


def test_apply_adds_one_line_right_after_pvemanagerlib(template: Path):
    pristine = template.read_bytes()
    message = inject.apply(str(template), "0.1.0-1")
    assert "after the pvemanagerlib.js line" in message
    text = template.read_bytes()
    lines = text.splitlines(keepends=True)
    ours = our_lines(text)
    assert ours == [b'    <script type="text/javascript" src="/pve2/js/keel.js?ver=0.1.0-1"></script>'
                    b'<!-- pve-keel -->\n']
    at = lines.index(ours[0])
    assert b"/pve2/js/pvemanagerlib.js" in lines[at - 1]
    assert b"locale/locale-" in lines[at + 1]
    assert len(text) == len(pristine) + len(ours[0])
    assert b"".join(lines[:at] + lines[at + 1:]) == pristine


def test_remove_restores_the_template_byte_for_byte(template: Path):
    pristine = template.read_bytes()
    inject.apply(str(template), "0.1.0-1")
    assert template.read_bytes() != pristine
    assert inject.remove(str(template)).endswith("Keel line removed")
    assert template.read_bytes() == pristine
    assert "nothing changed" in inject.remove(str(template))
    assert template.read_bytes() == pristine


def test_apply_is_idempotent_and_writes_nothing_when_nothing_changes(template: Path, monkeypatch):
    inject.apply(str(template), "0.1.0-1")
    once = template.read_bytes()
    before = os.stat(template)
    writes = []
    monkeypatch.setattr(inject, "_write", lambda *a: writes.append(a))
    assert "nothing changed" in inject.apply(str(template), "0.1.0-1")
    assert writes == []
    after = os.stat(template)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert template.read_bytes() == once
    monkeypatch.undo()
    pristine = inject.strip(once)
    template.write_bytes(pristine)
    monkeypatch.setattr(inject, "_write", lambda *a: writes.append(a))
    assert "has no Keel line" in inject.remove(str(template))
    assert writes == []


def test_a_new_version_replaces_the_line_and_never_duplicates_it(template: Path):
    pristine = template.read_bytes()
    inject.apply(str(template), "0.1.0-1")
    inject.apply(str(template), "0.2.0-1")
    ours = our_lines(template.read_bytes())
    assert len(ours) == 1 and b"?ver=0.2.0-1" in ours[0]
    # Duplicates (a file edited by hand, an old bug) collapse into one line.
    text = template.read_bytes()
    template.write_bytes(text.replace(ours[0], ours[0] * 3))
    inject.apply(str(template), "0.2.0-1")
    assert our_lines(template.read_bytes()) == ours
    inject.remove(str(template))
    assert template.read_bytes() == pristine


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"], ids=["crlf", "cr"])
def test_line_endings_are_kept(template: Path, ending: bytes):
    pristine = template.read_bytes().replace(b"\n", ending)
    template.write_bytes(pristine)
    inject.apply(str(template), "1")
    text = template.read_bytes()
    line = [x for x in text.splitlines(keepends=True) if b"keel.js" in x]
    assert len(line) == 1 and line[0].endswith(b"<!-- pve-keel -->" + ending)
    assert b"\n" not in text.replace(b"\r\n", b"") or ending == b"\r\n"
    inject.remove(str(template))
    assert template.read_bytes() == pristine


def test_odd_endings_mixed_tabs_and_no_final_newline_are_kept(tmp_path: Path):
    path = tmp_path / "index.html.tpl"
    pristine = (b"<html>\r\n<head>\n\t\t<script src='/proxmoxlib.js'></script>\r"
                b"\t\t<script src='/pve2/js/pvemanagerlib.js?ver=[% version %]'></script>\r\n"
                b"</head>\n<body></body></html>")
    path.write_bytes(pristine)
    inject.apply(str(path), "")
    text = path.read_bytes()
    assert (b"pvemanagerlib.js?ver=[% version %]'></script>\r\n\t\t<script type=\"text/javascript\" "
            b"src=\"/pve2/js/keel.js\"></script><!-- pve-keel -->\r\n</head>\n") in text
    inject.remove(str(path))
    assert path.read_bytes() == pristine


def test_anchor_on_the_last_line_without_an_ending(tmp_path: Path):
    path = tmp_path / "index.html.tpl"
    for pristine in (b"<head>\r\n  <script src='/pve2/js/pvemanagerlib.js'></script>",
                     b"  <script src='/pve2/js/pvemanagerlib.js'></script>"):
        path.write_bytes(pristine)
        inject.apply(str(path), "1")
        text = path.read_bytes()
        assert text.startswith(pristine) and text.count(b"keel.js") == 1
        assert "nothing changed" in inject.apply(str(path), "1")
        inject.remove(str(path))
        assert path.read_bytes() == pristine


def test_without_pvemanagerlib_the_line_goes_before_head_end(tmp_path: Path):
    path = tmp_path / "index.html.tpl"
    pristine = b"<html>\n  <head>\n    <title>x</title>\n  </head>\n  <body></body>\n</html>\n"
    path.write_bytes(pristine)
    assert "before </head>" in inject.apply(str(path), "1")
    assert path.read_bytes() == pristine.replace(
        b"  </head>", b'  <script type="text/javascript" src="/pve2/js/keel.js?ver=1"></script>'
                      b"<!-- pve-keel -->\n  </head>")
    inject.remove(str(path))
    assert path.read_bytes() == pristine


def test_no_place_for_the_line_is_reported_and_changes_nothing(tmp_path: Path):
    path = tmp_path / "index.html.tpl"
    pristine = b"<html><head><title>x</title></head><body></body></html>\n"
    path.write_bytes(pristine)
    assert "no line loading pvemanagerlib.js and no </head> line" in inject.apply(str(path), "1")
    assert path.read_bytes() == pristine


def test_lines_we_did_not_write_are_left_alone(template: Path):
    mine = b'    <script src="/pve2/js/keel.js"></script><!-- my own, not the package\'s -->\n'
    text = template.read_bytes().replace(b"  </head>\n", mine + b"  </head>\n")
    template.write_bytes(text)
    inject.apply(str(template), "1")
    inject.remove(str(template))
    assert template.read_bytes() == text


def test_mode_and_owner_are_kept_and_no_temporary_file_is_left(template: Path):
    os.chmod(template, 0o640)
    if os.geteuid() == 0:
        os.chown(template, 1234, 4321)
    inject.apply(str(template), "1")
    st = os.stat(template)
    assert st.st_mode & 0o7777 == 0o640
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1234, 4321)
    assert sorted(p.name for p in template.parent.iterdir()) == ["index.html.tpl"]


def test_a_failed_write_leaves_the_template_and_no_temporary_file(template: Path, monkeypatch):
    pristine = template.read_bytes()

    def broken(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(inject.os, "rename", broken)
    with pytest.raises(inject.Refused, match="cannot write .*index.html.tpl: No space left on device"):
        inject.apply(str(template), "1")
    assert template.read_bytes() == pristine
    assert [p.name for p in template.parent.iterdir()] == ["index.html.tpl"]


def test_status(template: Path):
    assert "does not load Keel's plugin" in inject.status(str(template))
    inject.apply(str(template), "0.1.0-1")
    assert inject.status(str(template)).endswith(
        '(1 line: <script type="text/javascript" src="/pve2/js/keel.js?ver=0.1.0-1"></script><!-- pve-keel -->)')


def run(*args: str) -> subprocess.CompletedProcess:
    # -I -S: no site-packages, no environment: only Python's standard library.
    return subprocess.run([sys.executable, "-I", "-S", str(SCRIPT), *args], capture_output=True, text=True)


def test_command_line_with_the_standard_library_only(template: Path, tmp_path: Path):
    pristine = template.read_bytes()
    done = run("apply", "--template", str(template), "--ver", "0.1.0-1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"keel-inject: {template}: now loads /pve2/js/keel.js after the pvemanagerlib.js line\n"
    assert run("status", "--template", str(template)).stdout.startswith(f"keel-inject: {template}: loads Keel's")
    assert run("remove", "--template", str(template)).returncode == 0
    assert template.read_bytes() == pristine
    missing = tmp_path / "nowhere" / "index.html.tpl"
    for action in ("apply", "remove", "status"):
        done = run(action, "--template", str(missing))
        assert done.returncode == 0 and "not found" in done.stdout, done
        assert done.stderr == ""
    assert not missing.parent.exists()


def test_command_line_errors_name_the_bad_input(tmp_path: Path):
    done = run("apply", "--template", str(tmp_path))
    assert done.returncode == 2 and f"cannot read {tmp_path}" in done.stderr
    done = run("apply", "--template", str(tmp_path / "x"), "--ver", '1"><script>')
    assert done.returncode == 2 and "--ver: letters, digits" in done.stderr
    assert run("frobnicate").returncode == 2


# -- with the template diverted: made from pve-manager's copy, which is never changed -------------

@pytest.fixture
def diverted(template: Path) -> tuple[Path, Path]:
    """pve-manager's template where dpkg puts it once pve-keel diverts it, and the path pveproxy reads."""
    original = template.with_name("index.html.tpl.distrib")
    template.rename(original)
    return original, template


def test_generate_makes_the_template_from_the_original_and_never_changes_it(diverted):
    original, made = diverted
    pristine = original.read_bytes()
    os.chmod(original, 0o644)
    message = inject.generate(str(original), str(made), "0.1.0")
    assert message == f"{made}: made from {original}, loads /pve2/js/keel.js after the pvemanagerlib.js line"
    assert original.read_bytes() == pristine
    ours = our_lines(made.read_bytes())
    assert len(ours) == 1 and b"?ver=0.1.0\"" in ours[0]
    assert inject.strip(made.read_bytes()) == pristine
    assert os.stat(made).st_mode & 0o7777 == 0o644
    assert sorted(p.name for p in made.parent.iterdir()) == ["index.html.tpl", "index.html.tpl.distrib"]
    assert inject.status(str(made), str(original)).startswith(f"{made}: loads Keel's plugin (1 line")


def test_generate_again_writes_nothing_and_a_new_version_replaces_the_line(diverted):
    original, made = diverted
    inject.generate(str(original), str(made), "1")
    before = os.stat(made)
    assert inject.generate(str(original), str(made), "1").endswith("(nothing changed)")
    after = os.stat(made)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    inject.generate(str(original), str(made), "2")
    ours = our_lines(made.read_bytes())
    assert len(ours) == 1 and b"?ver=2\"" in ours[0]


def test_a_new_original_is_taken_up_and_a_stale_made_template_is_reported(diverted):
    original, made = diverted
    inject.generate(str(original), str(made), "1")
    newer = original.read_bytes().replace(b"<title>", b"<title>9.9 ")
    original.write_bytes(newer)                   # pve-manager's upgrade unpacked a new one
    assert "not made from" in inject.status(str(made), str(original))
    inject.generate(str(original), str(made), "1")
    assert inject.strip(made.read_bytes()) == newer and len(our_lines(made.read_bytes())) == 1


def test_an_original_without_a_place_for_the_line_is_copied_as_it_is(tmp_path: Path):
    original, made = tmp_path / "index.html.tpl.distrib", tmp_path / "index.html.tpl"
    original.write_bytes(b"<html><body>no head here</body></html>\n")
    assert "the Keel panel is not added" in inject.generate(str(original), str(made), "1")
    assert made.read_bytes() == original.read_bytes()


def test_without_the_original_the_made_template_goes(diverted):
    original, made = diverted
    inject.generate(str(original), str(made), "1")
    original.unlink()                              # pve-manager removed
    assert "is left from it" in inject.status(str(made), str(original))
    assert "removed the template made from it" in inject.generate(str(original), str(made), "1")
    assert not made.exists()
    assert "nothing to do" in inject.generate(str(original), str(made), "1")


def test_command_line_with_a_diverted_template(diverted):
    original, made = diverted
    done = run("apply", "--template", str(made), "--from", str(original), "--ver", "0.1.0")
    assert done.returncode == 0 and "made from" in done.stdout, done
    done = run("status", "--template", str(made), "--from", str(original))
    assert done.stdout.startswith(f"keel-inject: {made}: loads Keel's plugin"), done
    done = run("remove", "--template", str(made), "--from", str(original))
    assert done.returncode == 2 and "dpkg-divert" in done.stderr
