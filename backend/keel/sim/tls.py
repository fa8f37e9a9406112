"""A self-signed certificate for the address the simulator listens on, made fresh at every
start: always ``localhost`` and ``127.0.0.1``, plus the ``--host`` given (an IP address or
a DNS name; for a wildcard address, the machine's host names)."""

from __future__ import annotations

import datetime
import ipaddress
import socket
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def subject_names(host: str = "127.0.0.1") -> list[x509.GeneralName]:
    """The subjectAltName entries for a server listening on ``host``."""
    names: list[x509.GeneralName] = [x509.DNSName("localhost"),
                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    hosts = [host]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None and address.is_unspecified:
        # 0.0.0.0 answers on every address: name the machine as clients will.
        hosts = [host, socket.gethostname(), socket.getfqdn()]
    for name in hosts:
        try:
            entry: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            entry = x509.DNSName(name.lower())
        if name and entry not in names:
            names.append(entry)
    return names


def make_certificate(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """Write ``sim.crt`` and ``sim.key`` into ``directory``; return their paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Keel simulator")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(subject_names(host)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "sim.crt", directory / "sim.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.touch(mode=0o600)
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path
