"""The serving certificate's expiry is a metric, set whenever the server (re)loads its certificate, so the
PrometheusRule can warn before kube-apiserver and kube-scheduler start refusing the server."""

from __future__ import annotations

import ssl
from pathlib import Path

from prometheus_client import REGISTRY

from extender import metrics
from extender.certs import write_bundle
from extender.cli import ReloadingSSLContext

NAME = "spotshift_tls_certificate_expiry_timestamp_seconds"


class _Conf:
    def __init__(self, certs: Path) -> None:
        self.certfile, self.keyfile = str(certs / "tls.crt"), str(certs / "tls.key")


def _factory(certs: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    return ctx


def _bundle(certs: Path, days: int) -> float:
    _, serving = write_bundle(certs, service="spotshift", namespace="spotshift", secret_name="s", days=days)
    return serving.cert.not_valid_after_utc.timestamp()


def test_loading_and_rotating_the_certificate_sets_its_expiry(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    first = _bundle(certs, days=30)
    hook = ReloadingSSLContext(str(certs / "tls.crt"), str(certs / "tls.key"))
    hook(_Conf(certs), lambda: _factory(certs))
    assert REGISTRY.get_sample_value(NAME) == first

    rotated = _bundle(certs, days=90)
    assert rotated > first
    hook(_Conf(certs), lambda: _factory(certs))
    assert REGISTRY.get_sample_value(NAME) == rotated


def test_a_file_that_is_not_a_certificate_leaves_the_last_value(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    expiry = _bundle(certs, days=10)
    metrics.observe_certificate(str(certs / "tls.crt"))
    (certs / "tls.crt").write_text("half-written")
    metrics.observe_certificate(str(certs / "tls.crt"))
    metrics.observe_certificate(str(certs / "missing.crt"))
    assert REGISTRY.get_sample_value(NAME) == expiry
