"""``keel sim`` as a command: what it says when it cannot listen, and on an address other
than loopback (the warning about /_sim, a certificate that names the address)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import requests

from conftest import DEMO_SCENARIO, DEMO_TOKEN, python_env


def keel_sim(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "keel", "sim", "--scenario", str(DEMO_SCENARIO), "--clock-factor", "0",
         "--tls-dir", str(tmp_path / "tls"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=python_env())


def held_port() -> socket.socket:
    """A socket that holds a loopback port, as another program would."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    return holder


def test_a_port_in_use_is_one_line_and_status_1(tmp_path):
    with held_port() as holder:
        port = holder.getsockname()[1]
        process = keel_sim(tmp_path, "--port", str(port))
        out, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert out == ""
    assert err == f"keel sim: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_another_address_than_loopback_warns_that_the_control_api_is_open(tmp_path):
    # The port is taken, so nothing ever listens on every interface during the test.
    with held_port() as holder:
        port = holder.getsockname()[1]
        process = keel_sim(tmp_path, "--host", "0.0.0.0", "--port", str(port))
        _, err = process.communicate(timeout=60)
    lines = err.splitlines()
    assert lines[0].startswith("keel sim: warning: listening on 0.0.0.0, not on loopback: the "
                               "control API (/_sim) has no authentication")
    assert lines[1:] == [f"keel sim: cannot listen on 0.0.0.0:{port}: Address already in use"]
    assert process.returncode == 1


def test_the_certificate_names_the_host_given(tmp_path):
    process = keel_sim(tmp_path, "--host", "127.0.0.2", "--port", "0")
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("listening on https://127.0.0.2:"), line
        # Verified TLS to 127.0.0.2 works: the certificate names it.
        response = requests.get(f"{line.split(' ', 2)[2]}/api2/json/version",
                                headers={"Authorization": f"PVEAPIToken={DEMO_TOKEN}"},
                                verify=str(tmp_path / "tls" / "sim.crt"), timeout=30)
        assert response.status_code == 200
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0
    assert "warning" not in err          # 127.0.0.0/8 is loopback


def test_the_certificate_names_an_ip_address_or_a_dns_name(tmp_path):
    from cryptography import x509

    from keel.sim.tls import make_certificate

    for host, wanted in (("10.1.2.3", "10.1.2.3"), ("Sim.Example.Org", "sim.example.org")):
        cert_file, _ = make_certificate(tmp_path / host, host)
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found = [str(n.value) for n in names]
        assert found[:2] == ["localhost", "127.0.0.1"] and wanted in found
