"""``spot-certs``: a CA and a serving certificate for the webhook/extender Service, as files and a Secret.

kube-apiserver (for the webhook) and kube-scheduler (for the extender) reach the server through its Service,
so the serving certificate carries every name they may dial: ``svc``, ``svc.ns``, ``svc.ns.svc`` and
``svc.ns.svc.cluster.local`` (Go's TLS stack ignores the CN and checks only SANs), plus any extra DNS names
or IPs (``127.0.0.1`` for tests on loopback). Keys are ECDSA P-256: the cheapest handshake Go's client and
Python's server both speak.

An existing CA in the output directory is reused, so rotating the serving certificate leaves every
``caBundle`` valid; ``--new-ca`` starts over. Files go to ``certs/`` by default, which git ignores; a
directory where git would track them is refused, so generated keys never enter git by accident.

``--apply-secret`` makes the Secret in the cluster instead of leaving it to ``kubectl apply``: an existing one
(with ``ca.crt``, ``tls.crt`` and ``tls.key``) is kept as it is and its CA is the one ``--patch-webhook`` sets, so
running it again (the Helm chart's hook Job runs it on every install and upgrade) changes nothing.
``--delete-secret`` removes it again (the chart's uninstall).

The alternative is cert-manager: ``deploy/README.md`` shows the Certificate and the
``cert-manager.io/inject-ca-from`` annotation that keeps the ``caBundle`` current.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from extender import USER_AGENT
from shared.kube.api import PATCH_JSON, Conflict, Kube, NotFound, transport_from_kubeconfig

__all__ = [
    "CertError",
    "Issued",
    "service_dns_names",
    "make_ca",
    "issue_serving_cert",
    "secret_manifest",
    "write_bundle",
    "patch_webhook_ca_bundle",
    "apply_secret",
    "delete_secret",
    "main",
]

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY, SECRET = "ca.crt", "ca.key", "tls.crt", "tls.key", "secret.yaml"


class CertError(Exception):
    """A request this tool refuses, in one sentence (bad IP, a directory git would track...)."""


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise CertError("the CA key is not an ECDSA key")
        return key


def service_dns_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    """The names a client in the cluster may dial for ``service`` in ``namespace``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def _now() -> datetime.datetime:
    # Backdated a little: a freshly issued cert must verify on a peer whose clock runs slightly behind.
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str = "spotshift-webhook-ca", days: int = 3650) -> Issued:
    """A self-signed CA that may sign leaf certificates only (``pathlen: 0``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving_cert(ca: Issued, dns_names: Sequence[str], ips: Sequence[str] = (), days: int = 365) -> Issued:
    """A TLS server certificate for ``dns_names`` and ``ips``, signed by ``ca``."""
    if not dns_names and not ips:
        raise CertError("a serving certificate needs at least one DNS name or IP address")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    for ip in ips:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError:
            raise CertError(f"--ip {ip!r} is not an IP address") from None
    key = ec.generate_private_key(ec.SECP256R1())
    ca_cert, ca_key = ca.cert, ca.key
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0] if dns_names else ips[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def secret_manifest(name: str, namespace: str, serving: Issued, ca: Issued) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret with ``ca.crt`` beside the pair (the layout cert-manager writes too)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "spotshift"}},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": _b64(serving.cert_pem), "tls.key": _b64(serving.key_pem), "ca.crt": _b64(ca.cert_pem)},
    }


def git_would_track(path: Path) -> bool:
    """True if ``path`` lies in a git work tree and is not ignored there. No git, no work tree: False."""
    directory = path.parent
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    try:
        inside = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            check=False,
        )
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return False
        ignored = subprocess.run(
            ["git", "-C", str(directory), "check-ignore", "-q", str(path.absolute())], capture_output=True, check=False
        )
    except FileNotFoundError:
        return False
    return ignored.returncode != 0


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_bundle(
    out: Path,
    *,
    service: str,
    namespace: str,
    secret_name: str,
    extra_dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    days: int = 365,
    new_ca: bool = False,
    allow_tracked: bool = False,
) -> tuple[Issued, Issued]:
    """Write ``ca.crt ca.key tls.crt tls.key secret.yaml`` into ``out``; returns ``(ca, serving)``.

    The key is written before the certificate, each file atomically, so a server that reloads on the
    certificate's mtime never pairs a new certificate with an old key.
    """
    if not allow_tracked:
        for name in (CA_KEY, TLS_KEY, SECRET):
            if git_would_track(out / name):
                raise CertError(
                    f"{out / name} would be tracked by git: write keys to an ignored directory such as certs/ "
                    "(or pass --allow-tracked)"
                )
    out.mkdir(parents=True, exist_ok=True)
    ca_cert_path, ca_key_path = out / CA_CERT, out / CA_KEY
    if not new_ca and ca_cert_path.exists() and ca_key_path.exists():
        ca = Issued(ca_cert_path.read_bytes(), ca_key_path.read_bytes())
    else:
        ca = make_ca()
        _write_private(ca_key_path, ca.key_pem)
        _write_public(ca_cert_path, ca.cert_pem)
    serving = issue_serving_cert(ca, [*service_dns_names(service, namespace), *extra_dns], ips, days)
    tmp_key = out / (TLS_KEY + ".tmp")
    _write_private(tmp_key, serving.key_pem)
    tmp_key.replace(out / TLS_KEY)
    _write_public(out / TLS_CERT, serving.cert_pem)
    manifest = yaml.safe_dump(secret_manifest(secret_name, namespace, serving, ca), sort_keys=False)
    tmp = out / (SECRET + ".tmp")
    _write_private(tmp, manifest.encode())
    tmp.replace(out / SECRET)
    return ca, serving


def _kube(kubeconfig: str | None) -> Kube:
    return Kube(transport_from_kubeconfig(kubeconfig, user_agent=USER_AGENT))


def _secret_path(namespace: str, name: str | None = None) -> str:
    path = f"/api/v1/namespaces/{quote(namespace)}/secrets"
    return path if name is None else f"{path}/{quote(name)}"


def patch_webhook_ca_bundle(
    name: str, ca_pem: bytes, *, kubeconfig: str | None = None, kube: Kube | None = None
) -> int:
    """Set ``caBundle`` on every webhook of the MutatingWebhookConfiguration ``name``; returns how many."""
    kube = kube or _kube(kubeconfig)
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{quote(name)}"
    current = kube.get(path)
    bundle = _b64(ca_pem)
    ops = [
        {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
        for i in range(len(current.get("webhooks") or []))
    ]
    if ops:
        # A JSON patch (a list body) touches only caBundle, keeping whatever else an operator changed.
        kube.patch(path, ops, PATCH_JSON)
    return len(ops)


def apply_secret(
    manifest: dict[str, Any], *, kubeconfig: str | None = None, kube: Kube | None = None
) -> tuple[bytes, bool]:
    """Create the Secret ``manifest`` unless it exists; returns ``(the CA in the cluster's Secret, created)``.

    An existing Secret is never changed: it may be one an operator rotated, and its CA is what every
    ``caBundle`` trusts. One that lacks a key the servers mount is an error, named in the message.
    """
    api = kube or _kube(kubeconfig)
    meta = manifest["metadata"]
    name, namespace = meta["name"], meta["namespace"]

    def existing() -> dict[str, Any] | None:
        try:
            return dict(api.get(_secret_path(namespace, name)).get("data") or {})
        except NotFound:
            return None

    # Read first: a caller that may only read (the chart's post-install hook) never needs `create`.
    data = existing()
    created = data is None
    if data is None:
        try:
            api.post(_secret_path(namespace), manifest)
            data = manifest["data"]
        except Conflict:  # made meanwhile by another run: that one is kept
            created, data = False, existing() or {}
    missing = [k for k in (CA_CERT, TLS_CERT, TLS_KEY) if not data.get(k)]
    if missing:
        raise CertError(f"Secret {namespace}/{name} exists without {', '.join(missing)}")
    return base64.b64decode(data[CA_CERT]), created


def delete_secret(name: str, namespace: str, *, kubeconfig: str | None = None, kube: Kube | None = None) -> bool:
    """Delete the Secret ``namespace/name``; False if there was none."""
    try:
        (kube or _kube(kubeconfig)).delete(_secret_path(namespace, name))
    except NotFound:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="spot-certs",
        description="Make a CA and a serving certificate for the spotshift webhook/extender Service.",
    )
    parser.add_argument("--out", default="certs", type=Path, help="output directory (default: certs/, git-ignored)")
    parser.add_argument("--service", default="spotshift", help="Service name (default: spotshift)")
    parser.add_argument("--namespace", default="spotshift", help="Service namespace (default: spotshift)")
    parser.add_argument("--secret-name", default="spotshift-tls", help="name of the Secret manifest")
    parser.add_argument("--dns", action="append", default=[], help="an extra DNS SAN (repeatable)")
    parser.add_argument("--ip", action="append", default=[], help="an IP SAN, e.g. 127.0.0.1 (repeatable)")
    parser.add_argument("--days", type=int, default=365, help="validity of the serving certificate")
    parser.add_argument("--new-ca", action="store_true", help="replace an existing CA in --out")
    parser.add_argument("--allow-tracked", action="store_true", help="write even where git would track the keys")
    parser.add_argument("--patch-webhook", metavar="NAME", help="set caBundle of this MutatingWebhookConfiguration")
    parser.add_argument(
        "--apply-secret",
        action="store_true",
        help="create the Secret in the cluster; an existing one is kept, and its CA is used for --patch-webhook",
    )
    parser.add_argument(
        "--delete-secret",
        action="store_true",
        help="delete the Secret from the cluster (an uninstall) and write nothing",
    )
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig for --apply-secret, --delete-secret and --patch-webhook (default: in-cluster, then ~/.kube)",
    )
    args = parser.parse_args(argv)
    if args.delete_secret:
        where = f"{args.namespace}/{args.secret_name}"
        try:
            deleted = delete_secret(args.secret_name, args.namespace, kubeconfig=args.kubeconfig)
        except Exception as e:  # API errors, credentials, the network: one line is what the operator needs
            print(f"spot-certs: could not delete Secret {where}: {e}", file=sys.stderr)
            return 1
        print(f"deleted Secret {where}" if deleted else f"no Secret {where} to delete")
        return 0
    if args.days < 1:
        parser.exit(2, "spot-certs: --days must be at least 1\n")
    try:
        ca, _ = write_bundle(
            args.out,
            service=args.service,
            namespace=args.namespace,
            secret_name=args.secret_name,
            extra_dns=args.dns,
            ips=args.ip,
            days=args.days,
            new_ca=args.new_ca,
            allow_tracked=args.allow_tracked,
        )
    except CertError as e:
        print(f"spot-certs: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}/{{{CA_CERT},{CA_KEY},{TLS_CERT},{TLS_KEY},{SECRET}}}")
    ca_pem = ca.cert_pem
    if args.apply_secret:
        where = f"{args.namespace}/{args.secret_name}"
        try:
            manifest = yaml.safe_load((args.out / SECRET).read_text())
            ca_pem, created = apply_secret(manifest, kubeconfig=args.kubeconfig)
        except Exception as e:  # API errors, credentials, the network: one line is what the operator needs
            print(f"spot-certs: could not apply Secret {where}: {e}", file=sys.stderr)
            return 1
        print(f"created Secret {where}" if created else f"kept the existing Secret {where} (its CA is used)")
    if args.patch_webhook:
        try:
            n = patch_webhook_ca_bundle(args.patch_webhook, ca_pem, kubeconfig=args.kubeconfig)
        except Exception as e:  # API errors, credentials, the network: one line is what the operator needs
            print(f"spot-certs: could not patch {args.patch_webhook}: {e}", file=sys.stderr)
            return 1
        print(f"set caBundle on {n} webhook(s) of mutatingwebhookconfiguration/{args.patch_webhook}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
