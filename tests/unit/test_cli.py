"""``spot-extender``: refusals with exit 2 and one sentence, and TLS certificates reloaded from disk."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from extender.certs import write_bundle
from extender.cli import ReloadingSSLContext, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    out = tmp_path / "certs"
    write_bundle(out, service="spotshift", namespace="spotshift", secret_name="s", ips=["127.0.0.1"])
    return out


def test_bad_config_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("webhook:\n  weight: 150\n")
    assert main(["--config", str(config), "--no-node-cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("spot-extender: config field webhook.weight:")
    assert len(err.splitlines()) == 1


def test_missing_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(tmp_path / "nope.yaml"), "--no-node-cache"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_certfile_without_keyfile_exits_2(certs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--certfile", str(certs / "tls.crt"), "--no-node-cache"]) == 2
    assert "--certfile and --keyfile" in capsys.readouterr().err


def test_key_not_matching_the_certificate_exits_2(
    certs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    write_bundle(other, service="x", namespace="y", secret_name="z")
    assert main(["--certfile", str(certs / "tls.crt"), "--keyfile", str(other / "tls.key"), "--no-node-cache"]) == 2
    assert "cannot load --certfile" in capsys.readouterr().err


def test_no_api_credentials_exits_2_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["--bind", "127.0.0.1:0"]) == 2
    assert "--no-node-cache" in capsys.readouterr().err


# --- TLS reload ---------------------------------------------------------------------------------------------


class _Conf:
    def __init__(self, certs: Path) -> None:
        self.certfile, self.keyfile = str(certs / "tls.crt"), str(certs / "tls.key")


def _factory(certs: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    return ctx


def test_context_is_built_once_and_rebuilt_when_the_files_change(certs: Path) -> None:
    hook = ReloadingSSLContext(str(certs / "tls.crt"), str(certs / "tls.key"))
    first = hook(_Conf(certs), lambda: _factory(certs))
    assert hook(_Conf(certs), lambda: _factory(certs)) is first
    assert hook.loads == 1
    write_bundle(certs, service="spotshift", namespace="spotshift", secret_name="s", ips=["127.0.0.1"])
    second = hook(_Conf(certs), lambda: _factory(certs))
    assert second is not first and hook.loads == 2


def test_a_broken_rotation_keeps_serving_the_previous_certificate(certs: Path) -> None:
    hook = ReloadingSSLContext(str(certs / "tls.crt"), str(certs / "tls.key"))
    first = hook(_Conf(certs), lambda: _factory(certs))
    (certs / "tls.crt").write_text("half-written")
    assert hook(_Conf(certs), lambda: _factory(certs)) is first


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _served_serial(port: int, ca: Path) -> int:
    ctx = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        der = s.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number


@pytest.fixture
def running(certs: Path, tmp_path: Path) -> Iterator[int]:
    port = _free_port()
    log = (tmp_path / "server.log").open("wb")
    tls = ["--certfile", str(certs / "tls.crt"), "--keyfile", str(certs / "tls.key")]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "extender.cli",
            "--bind",
            f"127.0.0.1:{port}",
            *tls,
            "--no-node-cache",
            "--workers",
            "1",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            _served_serial(port, certs / "ca.crt")
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail((tmp_path / "server.log").read_text())
            time.sleep(0.2)
    yield port
    proc.terminate()
    proc.wait(15)
    log.close()


def test_real_server_serves_a_rotated_certificate_without_restart(certs: Path, running: int) -> None:
    before = _served_serial(running, certs / "ca.crt")
    _, serving = write_bundle(certs, service="spotshift", namespace="spotshift", secret_name="s", ips=["127.0.0.1"])
    after = _served_serial(running, certs / "ca.crt")
    assert after != before
    assert after == serving.cert.serial_number
