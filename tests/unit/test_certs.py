"""``spot-certs``: SANs, a chain that verifies (with OpenSSL, in a real handshake), the Secret, keys kept out of
git, and the Secret and ``caBundle`` in the cluster through the project's transport boundary."""

from __future__ import annotations

import base64
import contextlib
import shutil
import socket
import ssl
import stat
import subprocess
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from cryptography import x509

from extender.certs import (
    CertError,
    apply_secret,
    delete_secret,
    git_would_track,
    main,
    patch_webhook_ca_bundle,
    service_dns_names,
    write_bundle,
)
from shared.kube.api import PATCH_JSON, Kube, NotFound, error_for

ROOT = Path(__file__).resolve().parents[2]


def bundle(out: Path, **kwargs: object) -> tuple[x509.Certificate, x509.Certificate]:
    ca, serving = write_bundle(out, service="spotshift", namespace="spotshift", secret_name="spotshift-tls", **kwargs)  # type: ignore[arg-type]
    return ca.cert, serving.cert


def test_serving_cert_names_every_service_dns_name_plus_extras(tmp_path: Path) -> None:
    _, cert = bundle(tmp_path, extra_dns=["localhost"], ips=["127.0.0.1", "::1"])
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "spotshift",
        "spotshift.spotshift",
        "spotshift.spotshift.svc",
        "spotshift.spotshift.svc.cluster.local",
        "localhost",
    ]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in eku


def test_service_dns_names_follow_the_cluster_domain() -> None:
    assert service_dns_names("hook", "ops", "corp.local")[-1] == "hook.ops.svc.corp.local"


def test_ca_signs_the_serving_cert_and_is_a_leaf_only_ca(tmp_path: Path) -> None:
    ca, cert = bundle(tmp_path)
    cert.verify_directly_issued_by(ca)
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca and bc.path_length == 0
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


@pytest.mark.parametrize("hostname", ["spotshift.spotshift.svc", "spotshift.spotshift.svc.cluster.local", "127.0.0.1"])
def test_a_tls_client_trusting_only_the_ca_completes_a_handshake(tmp_path: Path, hostname: str) -> None:
    bundle(tmp_path, ips=["127.0.0.1"])
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    a, b = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.sendall(s.recv(5))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    t = threading.Thread(target=serve)
    t.start()
    with client_ctx.wrap_socket(b, server_hostname=hostname) as c:
        c.sendall(b"hello")
        assert c.recv(5) == b"hello"
    t.join(5)
    assert not errors


def test_a_client_dialing_a_name_not_in_the_cert_is_refused(tmp_path: Path) -> None:
    bundle(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    a, b = socket.socketpair()

    def serve() -> None:
        with contextlib.suppress(ssl.SSLError, OSError):  # the client aborts the handshake
            server_ctx.wrap_socket(a, server_side=True).close()

    t = threading.Thread(target=serve)
    t.start()
    with pytest.raises(ssl.SSLCertVerificationError):
        client_ctx.wrap_socket(b, server_hostname="evil.example.com")
    b.close()
    t.join(5)


def test_secret_manifest_is_a_tls_secret_with_the_ca(tmp_path: Path) -> None:
    bundle(tmp_path)
    secret = yaml.safe_load((tmp_path / "secret.yaml").read_text())
    assert secret["apiVersion"] == "v1" and secret["kind"] == "Secret"
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["name"] == "spotshift-tls" and secret["metadata"]["namespace"] == "spotshift"
    for key, file in (("tls.crt", "tls.crt"), ("tls.key", "tls.key"), ("ca.crt", "ca.crt")):
        assert base64.b64decode(secret["data"][key]) == (tmp_path / file).read_bytes()


def test_private_keys_and_the_secret_are_readable_by_the_owner_only(tmp_path: Path) -> None:
    bundle(tmp_path)
    for name in ("ca.key", "tls.key", "secret.yaml"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name


def test_an_existing_ca_is_reused_so_the_ca_bundle_stays_valid(tmp_path: Path) -> None:
    ca1, cert1 = bundle(tmp_path)
    ca2, cert2 = bundle(tmp_path)
    assert ca1 == ca2
    assert cert1.serial_number != cert2.serial_number
    cert2.verify_directly_issued_by(ca1)
    ca3, _ = bundle(tmp_path, new_ca=True)
    assert ca3 != ca1


def test_bad_ip_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(CertError, match="not an IP address"):
        bundle(tmp_path, ips=["300.1.1.1"])


def _git_work_tree() -> bool:
    if shutil.which("git") is None:
        return False
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True)
    return r.stdout.strip() == "true"


@pytest.mark.skipif(not _git_work_tree(), reason="not a git work tree")
def test_the_default_certs_directory_is_ignored_by_git() -> None:
    for name in ("ca.key", "tls.key", "tls.crt", "secret.yaml"):
        assert not git_would_track(ROOT / "certs" / name), name


@pytest.mark.skipif(not _git_work_tree(), reason="not a git work tree")
def test_writing_keys_where_git_would_track_them_is_refused() -> None:
    target = ROOT / "deploy" / "generated-certs-test"
    with pytest.raises(CertError, match="would be tracked by git"):
        write_bundle(target, service="s", namespace="n", secret_name="x")
    assert not target.exists(), "nothing is written before the check"


def test_cli_writes_the_bundle_and_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    assert main(["--out", str(out), "--service", "hook", "--namespace", "ops", "--ip", "127.0.0.1"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "secret.yaml", "tls.crt", "tls.key"]
    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    assert "hook.ops.svc" in cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)
    assert "wrote" in capsys.readouterr().out


def test_cli_refuses_a_bad_ip_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--ip", "not-an-ip"]) == 2
    assert "not an IP address" in capsys.readouterr().err


# --- the cluster side (--apply-secret, --delete-secret, --patch-webhook), through the project's transport ------


class Objects:
    """A :class:`shared.kube.api.Transport` over a few objects by path: GET, POST to their collection (409 if
    there), DELETE, and JSON patches that add."""

    def __init__(self, **objects: Any) -> None:
        self.objects: dict[str, Any] = dict(objects)
        self.requests: list[tuple[str, str]] = []

    def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = "application/json", **_: Any
    ) -> bytes:
        self.requests.append((method, path))
        if method == "POST":
            path = f"{path}/{body['metadata']['name']}"
            if path in self.objects:
                raise error_for(409, {"reason": "AlreadyExists", "message": "exists"}, method=method, path=path)
            self.objects[path] = body
            return orjson.dumps(body)
        if path not in self.objects:
            raise error_for(404, {"reason": "NotFound", "message": f"{path} not found"}, method=method, path=path)
        if method == "DELETE":
            return orjson.dumps(self.objects.pop(path))
        if method == "PATCH":
            assert content_type == PATCH_JSON
            for op in body:
                assert op["op"] == "add"
                *parents, last = op["path"].strip("/").split("/")
                target = self.objects[path]
                for key in parents:
                    target = target[int(key)] if isinstance(target, list) else target[key]
                target[last] = op["value"]
        return orjson.dumps(self.objects[path])

    def stream(self, path: str, **_: Any) -> Any:
        raise AssertionError("no watch")


SECRET_PATH = "/api/v1/namespaces/spotshift/secrets/spotshift-tls"
HOOK_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/spotshift"


def _manifest(tmp_path: Path) -> dict[str, Any]:
    bundle(tmp_path)
    manifest: dict[str, Any] = yaml.safe_load((tmp_path / "secret.yaml").read_text())
    return manifest


def test_apply_secret_creates_the_secret_once_and_then_keeps_the_clusters(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)
    api = Objects()
    ca, created = apply_secret(manifest, kube=Kube(api))
    assert created and ca == (tmp_path / "ca.crt").read_bytes()
    assert api.requests == [("GET", SECRET_PATH), ("POST", "/api/v1/namespaces/spotshift/secrets")]
    other = _manifest(tmp_path / "other")
    ca_again, created_again = apply_secret(other, kube=Kube(api))
    assert not created_again and ca_again == ca, "an existing Secret is kept, and its CA is the one used"


def test_apply_secret_keeps_a_secret_made_meanwhile_by_another_run(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path)

    class Racing(Objects):
        def request(self, method: str, path: str, **kwargs: Any) -> bytes:
            if method == "POST":  # another run made it between our read and our create
                self.objects[SECRET_PATH] = _manifest(tmp_path / "other")
            return super().request(method, path, **kwargs)

    ca, created = apply_secret(manifest, kube=Kube(Racing()))
    assert not created and ca == (tmp_path / "other" / "ca.crt").read_bytes()


def test_apply_secret_refuses_an_existing_secret_without_the_keys_the_servers_mount(tmp_path: Path) -> None:
    api = Objects(**{SECRET_PATH: {"metadata": {"name": "spotshift-tls"}, "data": {"tls.crt": "eA=="}}})
    with pytest.raises(CertError, match=r"exists without ca\.crt, tls\.key"):
        apply_secret(_manifest(tmp_path), kube=Kube(api))


def test_delete_secret_says_whether_there_was_one() -> None:
    api = Objects(**{SECRET_PATH: {"metadata": {"name": "spotshift-tls"}}})
    assert delete_secret("spotshift-tls", "spotshift", kube=Kube(api)) is True
    assert delete_secret("spotshift-tls", "spotshift", kube=Kube(api)) is False


def test_patch_webhook_sets_the_ca_bundle_of_every_webhook_and_nothing_else(tmp_path: Path) -> None:
    hooks = [
        {"name": n, "clientConfig": {"service": {"name": "spotshift"}}} for n in ("a.spotshift.io", "b.spotshift.io")
    ]
    api = Objects(**{HOOK_PATH: {"metadata": {"name": "spotshift"}, "webhooks": hooks}})
    assert patch_webhook_ca_bundle("spotshift", b"PEM", kube=Kube(api)) == 2
    bundle_b64 = base64.b64encode(b"PEM").decode()
    assert [h["clientConfig"] for h in api.objects[HOOK_PATH]["webhooks"]] == [
        {"service": {"name": "spotshift"}, "caBundle": bundle_b64}
    ] * 2
    assert api.requests == [("GET", HOOK_PATH), ("PATCH", HOOK_PATH)]


def test_a_missing_webhook_configuration_is_an_api_error_the_cli_prints_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(NotFound):
        patch_webhook_ca_bundle("spotshift", b"PEM", kube=Kube(Objects()))
    assert main(["--out", str(tmp_path), "--delete-secret", "--kubeconfig", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("spot-certs: could not delete Secret spotshift/spotshift-tls: cannot load the kubeconfig")
    assert err.count("\n") == 1
