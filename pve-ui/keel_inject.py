#!/usr/bin/python3
# Copyright (C) 2026 the Keel developers
# SPDX-License-Identifier: AGPL-3.0-or-later
"""keel-inject: add or remove the one marked line that loads Keel's web UI plugin in
Proxmox VE's page template, /usr/share/pve-manager/index.html.tpl.

    keel-inject apply  [--template FILE] [--ver VERSION] [--from ORIGINAL]
    keel-inject remove [--template FILE]
    keel-inject status [--template FILE] [--from ORIGINAL]

The Debian package diverts pve-manager's template (``dpkg-divert``: dpkg puts pve-manager's
copy at ``index.html.tpl.distrib``) and runs ``apply --from index.html.tpl.distrib``: the
template is then made afresh from pve-manager's copy, which is never changed, so
``dpkg --verify pve-manager`` stays clean (docs/packaging.md).  When the original is gone
(pve-manager removed), the made template goes too.  Without ``--from``, ``apply`` and
``remove`` edit the template in place.

The line goes right after the line that loads ``pvemanagerlib.js`` (so every PVE class
exists when the plugin runs), or, when there is no such line, before a line that starts
with ``</head>``.  It is indented and ended like the line it follows:

    <script type="text/javascript" src="/pve2/js/keel.js?ver=0.1.0"></script><!-- pve-keel -->

``apply`` first takes out every line of that shape (an older version's), then inserts the
line afresh, and writes only when that changes the file; ``remove`` takes them out, so the
template is byte-for-byte what it was before ``apply``.  Writes go to a temporary file in
the same directory, given the template's mode and owner, then renamed over it.

A missing template (no Proxmox VE on this machine) or one without a place for the line is
reported and is not an error: the Debian package's maintainer scripts call this and must
never fail because of it.  Exit status: 0, or 2 for a usage error or a file that cannot be
read or written.

Only Python's standard library: it runs while the ``keel`` package is half-configured.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

TEMPLATE = "/usr/share/pve-manager/index.html.tpl"
SRC = "/pve2/js/keel.js"
MARK = b"<!-- pve-keel -->"
ANCHOR = b"pvemanagerlib.js"

# A line this tool wrote, and only such a line: nothing an operator wrote is taken out.
OUR_LINE = re.compile(rb'[ \t]*<script type="text/javascript" src="/pve2/js/keel\.js(\?ver=[A-Za-z0-9.+~:_-]*)?">'
                      rb'</script>' + re.escape(MARK) + rb'[ \t]*')
HEAD_END = re.compile(rb"[ \t]*</head>", re.IGNORECASE)
VERSION = re.compile(r"[A-Za-z0-9.+~:_-]*")


class Refused(Exception):
    """The template cannot be read or written."""


def script_line(ver: str = "") -> bytes:
    if not VERSION.fullmatch(ver):
        raise ValueError(f"--ver: letters, digits and .+~:_- only, got {ver!r}")
    query = f"?ver={ver}" if ver else ""
    return f'<script type="text/javascript" src="{SRC}{query}"></script>'.encode() + MARK


def _split(line: bytes) -> tuple[bytes, bytes]:
    """A line and its ending (b"", b"\\n", b"\\r\\n" or b"\\r")."""
    body = line.rstrip(b"\r\n")
    return body, line[len(body):]


def strip(text: bytes) -> bytes:
    """The template without our lines: exactly what it was before ``insert``."""
    lines = text.splitlines(keepends=True)
    out: list[bytes] = []
    for i, line in enumerate(lines):
        body, end = _split(line)
        if not OUR_LINE.fullmatch(body):
            out.append(line)
        elif not end and out:
            # Inserted after a last line that had no ending: that line gave its ending
            # to ours (see insert); take it back.
            prev_body, _ = _split(out[-1])
            out[-1] = prev_body
    return b"".join(out)


def _indent(line: bytes) -> bytes:
    return line[:len(line) - len(line.lstrip(b" \t"))]


def _ending(lines: list[bytes]) -> bytes:
    for line in lines:
        _, end = _split(line)
        if end:
            return end
    return b"\n"


def insert(text: bytes, ver: str = "") -> tuple[bytes, str]:
    """The template (without our lines) with ours added, and where it went ("" if nowhere)."""
    tag = script_line(ver)
    lines = text.splitlines(keepends=True)
    anchors = [i for i, line in enumerate(lines) if ANCHOR in line and not OUR_LINE.fullmatch(_split(line)[0])]
    if anchors:
        where = "after the pvemanagerlib.js line"
        out: list[bytes] = []
        for i, line in enumerate(lines):
            out.append(line)
            if i in anchors:
                body, end = _split(line)
                if end:
                    out.append(_indent(line) + tag + end)
                else:                        # the last line, with no ending: lend it one
                    out[-1] = body + _ending(lines)
                    out.append(_indent(line) + tag)
        return b"".join(out), where
    for i, line in enumerate(lines):
        if HEAD_END.match(line):
            end = _split(line)[1] or _ending(lines)
            return b"".join(lines[:i] + [_indent(line) + tag + end] + lines[i:]), "before </head>"
    return text, ""


def _write(path: str, data: bytes, like: str | None = None) -> None:
    """Atomically: a temporary file beside it with its mode and owner (or those of ``like``),
    then rename; a failure is ``Refused`` with the system's reason."""
    try:
        _replace(path, data, like)
    except OSError as e:
        raise Refused(f"cannot write {path}: {e.strerror}") from None


def _replace(path: str, data: bytes, like: str | None = None) -> None:
    st = os.stat(like or path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".keel-inject.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, st.st_mode & 0o7777)
        if os.geteuid() == 0:
            os.chown(tmp, st.st_uid, st.st_gid)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Refused(f"cannot read {path}: {e.strerror}") from None


def apply(path: str = TEMPLATE, ver: str = "") -> str:
    """Make the template load the plugin; a sentence saying what happened."""
    text = _read(path)
    if text is None:
        return f"{path} not found: Proxmox VE's web UI (pve-manager) is not installed here; nothing to do"
    new, where = insert(strip(text), ver)
    if not where:
        return (f"{path}: no line loading pvemanagerlib.js and no </head> line; "
                f"the Keel panel is not added (nothing changed)")
    if new == text:
        return f"{path}: already loads {SRC} {where} (nothing changed)"
    _write(path, new)
    return f"{path}: now loads {SRC} {where}"


def generate(original: str, path: str = TEMPLATE, ver: str = "") -> str:
    """Make the template from pve-manager's diverted copy ``original``, with our line; a
    sentence saying what happened.  Without the original, remove the made template."""
    text = _read(original)
    current = _read(path)
    if text is None:
        if current is None:
            return f"{original} not found: Proxmox VE's web UI (pve-manager) is not installed here; nothing to do"
        try:
            os.unlink(path)
        except OSError as e:
            raise Refused(f"cannot remove {path}: {e.strerror}") from None
        return f"{original} not found (pve-manager was removed): removed the template made from it, {path}"
    new, where = insert(strip(text), ver)
    if not where:                   # the page must still work: the original, unchanged
        new = strip(text)
        what = f"{path}: a copy of {original}, which has no line loading pvemanagerlib.js and no </head> line; " \
               f"the Keel panel is not added"
    else:
        what = f"{path}: made from {original}, loads {SRC} {where}"
    if new == current:
        return f"{what} (nothing changed)"
    _write(path, new, like=original)
    return what


def remove(path: str = TEMPLATE) -> str:
    text = _read(path)
    if text is None:
        return f"{path} not found: nothing to remove"
    new = strip(text)
    if new == text:
        return f"{path}: has no Keel line (nothing changed)"
    _write(path, new)
    return f"{path}: Keel line removed"


def status(path: str = TEMPLATE, original: str | None = None) -> str:
    text = _read(path)
    if original is not None:
        made = _read(original)
        if made is None:
            return (f"{original} not found: Proxmox VE's web UI is not installed here"
                    + ("" if text is None else f" ({path} is left from it: `keel-inject apply --from` removes it)"))
        if text is None or strip(text) != strip(made):
            return f"{path}: not made from {original} yet (run `keel-inject apply --from {original}`)"
    if text is None:
        return f"{path} not found: Proxmox VE's web UI is not installed here"
    ours = [_split(line)[0].strip().decode("ascii", "replace")
            for line in text.splitlines() if OUR_LINE.fullmatch(line.rstrip(b"\r\n"))]
    if not ours:
        return f"{path}: does not load Keel's plugin"
    return f"{path}: loads Keel's plugin ({len(ours)} line{'s' if len(ours) > 1 else ''}: {ours[0]})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="keel-inject", description="Add or remove the line that loads Keel's plugin in "
                                        "Proxmox VE's index.html.tpl.")
    parser.add_argument("action", choices=("apply", "remove", "status"))
    parser.add_argument("--template", default=TEMPLATE, metavar="FILE", help=f"default {TEMPLATE}")
    parser.add_argument("--ver", default="", metavar="VERSION",
                        help="added as ?ver=VERSION so browsers fetch a new plugin after an upgrade")
    parser.add_argument("--from", dest="original", metavar="ORIGINAL",
                        help="make the template from this copy of pve-manager's (the diverted "
                             "index.html.tpl.distrib) instead of editing it in place")
    args = parser.parse_args(argv)
    if not VERSION.fullmatch(args.ver):
        parser.error(f"--ver: letters, digits and .+~:_- only, got {args.ver!r}")
    if args.original is not None and args.action == "remove":
        parser.error("remove --from: the package takes the made template out by removing its "
                     "diversion (dpkg-divert); remove edits a template in place")
    try:
        if args.action == "apply" and args.original is not None:
            message = generate(args.original, args.template, args.ver)
        elif args.action == "apply":
            message = apply(args.template, args.ver)
        elif args.action == "remove":
            message = remove(args.template)
        else:
            message = status(args.template, args.original)
    except Refused as e:
        print(f"keel-inject: {e}", file=sys.stderr)
        return 2
    print(f"keel-inject: {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
