"""Copy pve-ha-manager CRS test cases into Keel's fixtures (tests/conformance/cases/).

    python tests/conformance/import_cases.py /work/shared/conformance/pve-ha-crs

For each case folder: the input files as they are, and ``expected.log``, the manager's
decision lines of its ``log.expect`` (``pvesim.is_decision``).  A case's
``DESCRIPTION`` (one line, ours) is left alone.  Run it again when PVE's cases change.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pvesim import is_decision, parse_log_line  # noqa: E402

INPUTS = ("cmdlist", "datacenter.cfg", "dynamic_service_stats", "hardware_status",
          "manager_status", "rules_config", "service_config", "static_service_stats")
CASES = Path(__file__).resolve().parent / "cases"


def import_case(source: Path, dest_root: Path = CASES) -> Path:
    dest = dest_root / source.name
    dest.mkdir(parents=True, exist_ok=True)
    for name in INPUTS:
        if (source / name).exists():
            shutil.copyfile(source / name, dest / name)
    expected = [line for line in (source / "log.expect").read_text().splitlines()
                if is_decision(parse_log_line(line))]
    (dest / "expected.log").write_text("".join(f"{line}\n" for line in expected))
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for source in sorted(Path(argv[0]).iterdir()):
        if (source / "log.expect").exists():
            print(import_case(source))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
