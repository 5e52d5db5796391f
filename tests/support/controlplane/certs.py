"""Throw-away PKI for the e2e control plane and for test servers (webhooks, extenders).

Everything is ECDSA P-256: key generation takes microseconds (RSA-2048 takes tens of milliseconds each), and
Go's TLS stack and kube-apiserver's service-account token signer both accept it.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from extender import certs as product_certs

_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write `stem.crt` and `stem.key` (mode 0600) into `directory`; return both paths."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_path = directory / f"{stem}.crt"
        key_path = directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _now() -> datetime.datetime:
    # Back-dated a little so that a component whose clock reads the same second does not see "not yet valid".
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)


def make_ca(common_name: str = "spotshift-e2e-ca") -> KeyPair:
    """A self-signed CA (spotshift's own, from ``extender.certs``) that signs serving and client certificates."""
    ca = product_certs.make_ca(common_name, days=_VALIDITY.days)
    return KeyPair(ca.cert_pem, ca.key_pem)


def issue_cert(
    ca: KeyPair,
    common_name: str,
    *,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    organizations: tuple[str, ...] = (),
    server: bool = True,
    client: bool = False,
) -> KeyPair:
    """A leaf certificate signed by `ca`.

    `hosts` become subjectAltNames (IP addresses or DNS names): Go ignores the CN, so a serving certificate
    without a SAN for the address it is dialled at is rejected. `organizations` become the O= entries, which
    kube-apiserver maps to groups for client certificates.
    """
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key must be an EC key made by make_ca()")
    key = _new_key()
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_signing_key() -> tuple[bytes, bytes]:
    """A service-account token signing key pair: (private PEM, public PEM)."""
    key = _new_key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), public
