# SPDX-License-Identifier: AGPL-3.0-or-later
"""debian/ agrees with the code: the version, every third-party import a Depends, the
units' and directories' paths the services' defaults, an example config that loads, and
maintainer scripts that never write to /etc/pve.  (`make test-package` builds and installs
the package; these are the quick checks `make test` runs.)"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import yaml

import keel
from keel import config as cfg
from keel.engine.settings import EngineSettings, WebSettings

ROOT = Path(__file__).resolve().parents[2]
DEBIAN = ROOT / "debian"
PACKAGE = ROOT / "backend" / "keel"

# Every module keel imports that is not in Python's standard library, and its Debian package.
DEBIAN_PACKAGE = {
    "cryptography": "python3-cryptography",
    "flask": "python3-flask",
    "gevent": "python3-gevent",
    "gunicorn": "python3-gunicorn",
    "jwt": "python3-jwt",
    "numpy": "python3-numpy",
    "proxmoxer": "python3-proxmoxer",
    "requests": "python3-requests",
    "werkzeug": "python3-werkzeug",
    "yaml": "python3-yaml",
}


def control_depends() -> set[str]:
    text = (DEBIAN / "control").read_text()
    block = re.search(r"^Depends:(.*?)(?=^\S)", text, re.M | re.S).group(1)
    return {dep.strip().split()[0] for dep in block.split(",") if dep.strip() and "${" not in dep}


def third_party_imports() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "keel" and top not in sys.stdlib_module_names:
                    found.add(top)
    return found


def test_every_third_party_import_is_a_debian_dependency():
    imports = third_party_imports()
    assert imports <= set(DEBIAN_PACKAGE), f"map these to Debian packages: {imports - set(DEBIAN_PACKAGE)}"
    assert {DEBIAN_PACKAGE[name] for name in imports} <= control_depends()


def test_the_changelog_version_is_keels():
    first = (DEBIAN / "changelog").read_text().splitlines()[0]
    match = re.fullmatch(r"pve-keel \(([^)]+)\) \w+; urgency=\w+", first)
    assert match, first
    assert match.group(1).split("-")[0].split("+")[0] == keel.__version__
    assert (DEBIAN / "source" / "format").read_text().strip() == "3.0 (native)"


def unit(name: str) -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for line in (DEBIAN / f"pve-keel.{name}.service").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            keys.setdefault(key, []).append(value)
    return keys


def test_the_units_run_keel_with_the_default_config_and_users():
    engine, web = unit("keel-engine"), unit("keel-web")
    assert engine["ExecStart"] == [f"/usr/bin/keel engine --config {cfg.DEFAULT_CONFIG_FILE}"]
    assert web["ExecStart"] == [f"/usr/bin/keel web --config {cfg.DEFAULT_CONFIG_FILE}"]
    assert engine["ConditionPathExists"] == web["ConditionPathExists"] == [str(cfg.DEFAULT_CONFIG_FILE)]
    assert "User" not in engine
    assert web["User"] == ["keel-web"]
    assert web["SupplementaryGroups"] == [f"{EngineSettings.socket_group} www-data"]
    for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                       ("PrivateTmp", "yes"), ("CapabilityBoundingSet", ""),
                       ("InaccessiblePaths", "-/etc/pve/priv")):
        assert web[key] == [value], key
    sysusers = (DEBIAN / "pve-keel.sysusers").read_text()
    assert f"g {EngineSettings.socket_group} -" in sysusers and "u keel-web " in sysusers
    assert f"m keel-web {EngineSettings.socket_group}" in sysusers


def test_directories_are_the_engines_defaults():
    tmpfiles = (DEBIAN / "pve-keel.tmpfiles").read_text()
    assert f"d {Path(EngineSettings.store).parent} 0700 root root -" in tmpfiles
    assert f"d {Path(EngineSettings.socket).parent} 0750 root {EngineSettings.socket_group} -" in tmpfiles
    assert "port 8443" in (DEBIAN / "control").read_text() and WebSettings.port == 8443


def test_the_example_config_loads():
    text = (DEBIAN / "examples" / "keel.yaml").read_text()
    config = cfg.parse(yaml.safe_load(text), "debian/examples/keel.yaml")
    assert config.engine.socket == EngineSettings.socket and config.engine.store == EngineSettings.store
    assert config.balancing.enable is False
    assert config.proxmox.token_file == str(cfg.DEFAULT_TOKEN_FILE)      # the secret stays in its file


TEMPLATE = "/usr/share/pve-manager/index.html.tpl"


def test_the_trigger_the_diversion_and_the_injector_path():
    interests = [line for line in (DEBIAN / "pve-keel.triggers").read_text().splitlines()
                 if not line.startswith("#")]
    assert interests == [f"interest-noawait {TEMPLATE}.distrib", f"interest-noawait {TEMPLATE}"]
    rules = (DEBIAN / "rules").read_text()
    assert "pve-ui/keel_inject.py $(PKG)/usr/share/pve-keel/keel-inject" in rules
    postinst = (DEBIAN / "pve-keel.postinst").read_text()
    assert '"$INJECT" apply --from "$TEMPLATE.distrib" --template "$TEMPLATE"' in postinst
    preinst, postrm = (DEBIAN / "pve-keel.preinst").read_text(), (DEBIAN / "pve-keel.postrm").read_text()
    assert f"TEMPLATE={TEMPLATE}\n" in preinst and f"TEMPLATE={TEMPLATE}\n" in postrm
    assert 'dpkg-divert --package pve-keel --add --rename --divert "$TEMPLATE.distrib" "$TEMPLATE"' in preinst
    assert 'dpkg-divert --package pve-keel --no-rename --remove "$TEMPLATE"' in postrm
    assert re.search(r"^ +remove\|abort-install\|disappear\)\n +undivert$", postrm, re.M)


def test_purge_leaves_system_users_and_other_packages_files_alone():
    for name in ("preinst", "postinst", "prerm", "postrm"):
        text = (DEBIAN / f"pve-keel.{name}").read_text()
        assert not re.search(r"\b(userdel|groupdel|deluser|delgroup)\b", text), name
        assert "/var/cache/man" not in text, name


def test_the_relation_to_pve_manager():
    control = (DEBIAN / "control").read_text()
    assert re.search(r"^Enhances: pve-manager$", control, re.M)
    assert re.search(r"^Breaks: pve-manager \(<< 8~\)$", control, re.M)
    assert "python3-yaml" not in re.search(r"^Build-Depends:(.*?)(?=^\S)", control, re.M | re.S).group(1)


def test_maintainer_scripts_are_sh_and_never_write_to_etc_pve():
    writes = re.compile(r"\b(rm|mkdir|cp|mv|chmod|chown|touch|install|tee|ln)\b|>")
    for name in ("preinst", "postinst", "prerm", "postrm"):
        path = DEBIAN / f"pve-keel.{name}"
        subprocess.run(["sh", "-n", str(path)], check=True)
        text = path.read_text()
        assert text.startswith("#!/bin/sh\n") and "#DEBHELPER#" in text and "set -e" in text
        for line in text.splitlines():
            code = line.split("#", 1)[0] if not line.lstrip().startswith("echo") else ""
            if "/etc/pve" in code:
                assert not writes.search(code.replace(">&2", "").replace(">/dev/null", "")), line


def test_the_man_page_header_from_either_argparse_manpage():
    """Debian 12's argparse-manpage 1.2 and 13's 4.x write different .TH lines: both become ours."""
    for first in ('.TH keel "1" Manual page for keel 0.1.0', '.TH KEEL "1" "2026\\-11\\-30" "keel" "Generated Python Manual"'):
        page = subprocess.run(["sh", str(DEBIAN / "man-finish"), "0.1.0"], input=f"{first}\n.SH NAME\nkeel\n",
                              capture_output=True, text=True, check=True).stdout.splitlines()
        assert page[:3] == ['.TH KEEL 1 "" "keel 0.1.0" "Keel manual"', ".SH NAME",
                            "keel \\- keeps a Proxmox VE cluster level and runs CI runners on it"], first
