"""The runners' commands: ``keel runners run|status|events`` and ``keel import-rungar``.

``keel.cli`` declares them through ``add_parsers``; each takes the parsed arguments and
the CLI's ``Env`` and returns an exit status.  Until the engine hosts the runner service,
``keel runners run`` runs its loop in the foreground, and ``keel runners status`` reads
what that loop last wrote to Keel's database.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from keel.errors import ExitStatus, InvalidError


def add_parsers(sub: Any, add_connection: Any) -> None:
    imp = sub.add_parser("import-rungar", help="convert a Rungar config to Keel's runners: section",
                         description="Print the runners: section of Keel's config equivalent to a "
                                     "Rungar config file, with comments on every difference. Secrets "
                                     "are not copied. See docs/runners.md.")
    imp.add_argument("file", metavar="FILE", help="Rungar's config (/etc/rungar/config.yaml)")
    imp.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")


def cmd_import_rungar(args: argparse.Namespace, env: Any) -> int:
    from keel.importers.rungar import import_file

    text = import_file(args.file)
    if not args.output:
        env.stdout.write(text)
        return ExitStatus.OK
    try:
        Path(args.output).write_text(text)
    except OSError as err:
        raise InvalidError(f"cannot write {args.output}: {err.strerror}") from None
    print(f"wrote {args.output} (converted from {args.file}); read its comments before using it",
          file=env.stderr)
    return ExitStatus.OK


COMMANDS = {"import-rungar": cmd_import_rungar}
