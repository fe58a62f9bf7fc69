"""Test certificates for the SSL listener tests, made at test time with `cryptography`.

A CA signs server certificates (for 127.0.0.1 and localhost) and client certificates; any of
them can be made already expired. Everything is written as PEM files, as weir and the clients
read them.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
import ipaddress


@dataclass
class Pem:
    cert: Path
    key: Path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write(dir: Path, name: str, cert: x509.Certificate, key) -> Pem:
    dir.mkdir(parents=True, exist_ok=True)
    c, k = dir / f"{name}.pem", dir / f"{name}.key"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return Pem(c, k)


class Ca:
    def __init__(self, dir: Path, name: str):
        self.dir = dir
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(days=1))
            .not_valid_after(_now() + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = _write(dir, name, self.cert, self.key).cert

    def issue(self, name: str, *, server: bool, expired: bool = False, org: str | None = None) -> Pem:
        """A certificate for `name` signed by this CA: a server's (SAN 127.0.0.1, localhost)
        or a client's; `expired`: valid only until yesterday; `org`: subject O=org, OU=unit
        before CN=name."""
        key = ec.generate_private_key(ec.SECP256R1())
        if expired:
            start, end = _now() - datetime.timedelta(days=10), _now() - datetime.timedelta(days=1)
        else:
            start, end = _now() - datetime.timedelta(days=1), _now() + datetime.timedelta(days=30)
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(
                ([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                  x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "unit, 1")] if org else [])
                + [x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                  else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        return _write(self.dir, name, b.sign(self.key, hashes.SHA256()), key)

    def issue_broker(self, name: str, host: str) -> Pem:
        """A broker's certificate for the peer port (mutual TLS between brokers): valid for
        `host` (an IP or DNS subject alternative name), for both TLS ends (serverAuth and
        clientAuth)."""
        key = ec.generate_private_key(ec.SECP256R1())
        try:
            san = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name[:64])]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(days=1))
            .not_valid_after(_now() + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        return _write(self.dir, name, cert, key)


_PEER_CA: Ca | None = None


def peer_tls_settings(dir: Path, name: str, host: str) -> dict[str, str]:
    """Settings for a cluster broker on `host` to talk to its peers over mutual TLS: a
    certificate for `host` from the test process's cluster CA (made once, under `dir`)."""
    global _PEER_CA
    if _PEER_CA is None:
        _PEER_CA = Ca(dir / "peer-ca", "weir-test-cluster-ca")
    pem = _PEER_CA.issue_broker(name, host)
    return {"security.inter.broker.protocol": "SSL", "ssl.certificate.location": str(pem.cert),
            "ssl.key.location": str(pem.key), "ssl.truststore.location": str(_PEER_CA.pem)}
