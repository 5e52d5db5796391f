"""``spot-extender``: the webhook and scheduler extender under gunicorn, over TLS.

Worker model: ``extender.worker.PollerHandshakeWorker`` (gthread's poller; see that module), 2 workers.
kube-apiserver and kube-scheduler keep connections alive and send one request after another on each;
gunicorn's ``sync`` worker answers every request with ``Connection: close``, so every admission and every
filter/prioritize call would pay a new TCP and TLS handshake on the pod's critical path. ``keepalive`` is
above Go's 90 s idle timeout, so the client, not the server, closes an idle connection and no request races
a server-side close. Stock gthread hands every new connection to a pool thread that blocks on its first
read, and Go parks spare connections without a request: with few threads one parked connection stalls a
worker, with many the threads contend for the GIL. The poller worker handshakes and gathers requests on the
poller and answers complete requests there, so idle and slow connections hold no thread. Requests over 1 MiB
are decided on a thread of their own; ``--threads`` sizes the pool of the stock ``gthread`` worker class (a
benchmark comparison), which the poller worker does not use. The worker models are compared by
``bench/webhook_load.py --compare-workers`` (figures in ``bench/README.md``).

TLS: gunicorn asks its ``ssl_context`` hook for a context on *every* accepted connection and by default
builds a new one each time, reading and parsing the key and chain again. :class:`ReloadingSSLContext`
builds one per worker and rebuilds it only when the certificate or key file changes on disk (a
cert-manager or ``spot-certs`` rotation), so a rotated certificate is served without a restart and an
unchanged one costs two ``stat`` calls per connection. A half-written pair that fails to load keeps the
previous context until the next connection tries again.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import ssl
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from shared.config import Config, ConfigError, flag_overrides, load_config

__all__ = ["ReloadingSSLContext", "ServerApplication", "build_cache", "main"]

log = logging.getLogger("spotshift.extender")

# --worker-class names (the non-default ones are for bench/webhook_load.py) -> gunicorn worker classes
WORKER_CLASSES = {"poller": "extender.worker.PollerHandshakeWorker", "gthread": "gthread", "sync": "sync"}
DEFAULT_WORKER_CLASS = "poller"
DEFAULT_THREADS = 4
DEFAULT_SWITCH_INTERVAL = 0.0005
KEEPALIVE_SECONDS = 100  # > Go's http.Transport IdleConnTimeout (90 s) used by kube-apiserver and kube-scheduler

CONFIG_FLAGS = {"--bind": "server.bind", "--certfile": "server.tls_cert_file", "--keyfile": "server.tls_key_file"}
"""Flags that set a setting (flag → field path): they override the file and ``SPOTSHIFT_*`` variables and are
validated by the same rules, an error naming the flag."""


class ReloadingSSLContext:
    """gunicorn's ``ssl_context`` hook with a per-process cache keyed on the files' mtimes and sizes."""

    def __init__(self, certfile: str, keyfile: str) -> None:
        self.certfile = certfile
        self.keyfile = keyfile
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._context: ssl.SSLContext | None = None
        self.loads = 0

    def _current_stamp(self) -> tuple[int, int, int, int]:
        c, k = os.stat(self.certfile), os.stat(self.keyfile)
        return (c.st_mtime_ns, c.st_size, k.st_mtime_ns, k.st_size)

    def __call__(self, conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        stamp: tuple[int, int, int, int] | None
        try:
            stamp = self._current_stamp()
        except OSError:
            stamp = self._stamp  # files briefly missing during a rotation: keep serving the old pair
        if stamp == self._stamp and self._context is not None:
            return self._context
        with self._lock:
            if stamp != self._stamp or self._context is None:
                try:
                    context = default_ssl_context_factory()
                except (ssl.SSLError, OSError, ValueError) as e:
                    if self._context is None:
                        raise
                    log.warning("TLS certificate reload failed (%s); serving the previous certificate", e)
                    return self._context
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                self._context, self._stamp = context, stamp
                self.loads += 1
                from extender import metrics  # in the worker, after PROMETHEUS_MULTIPROC_DIR is set

                metrics.observe_certificate(self.certfile)
                if self.loads > 1:
                    log.info("TLS certificate reloaded from %s", self.certfile)
        return self._context


def build_cache(config: Config, kubeconfig: str | None, *, watch_pods: bool = True) -> Any:
    """The watch-backed node cache (and pod index for spot ceilings) of one worker, started.

    Called in the worker, after gunicorn forked it: the worker's API transport, and its connection pool, are
    made here and used by this process only."""
    from extender.cache import ClusterCache, Reflector, node_collection, pod_collection, worker_kube
    from extender.pools import PoolScores
    from extender.scheduling import ExtenderPolicy, NodeIndex, PodIndex, reduce_node, reduce_pod

    policy = ExtenderPolicy.from_config(config)
    kube = worker_kube(kubeconfig)
    index = NodeIndex(PoolScores(config.extender, config.spot))  # spot reclaims learnt from this worker's watch
    nodes = Reflector("nodes", node_collection(kube), lambda o: reduce_node(o, policy), index)
    pods = None
    if watch_pods:
        pods = Reflector(
            "pods",
            pod_collection(kube),
            lambda o: reduce_pod(o, config.spot_ceiling),
            PodIndex(),
            key=lambda o: o["metadata"].get("uid") or f"{o['metadata'].get('namespace')}/{o['metadata']['name']}",
        )
    return ClusterCache(nodes, pods).start()


def _check_kubeconfig(kubeconfig: str | None) -> str | None:
    """One sentence if no API credentials can be found, else None."""
    from shared.kube.credentials import KubeconfigError, load_client_configuration

    try:
        load_client_configuration(kubeconfig)
    except KubeconfigError as e:
        return f"{e}; pass --kubeconfig, or --no-node-cache to serve without one"
    return None


class ServerApplication:
    """gunicorn run programmatically (``BaseApplication``), so the CLI owns validation and defaults."""

    def __init__(self, options: dict[str, Any], load_app: Callable[[], Any]) -> None:
        from gunicorn.app.base import BaseApplication

        outer = self

        class _App(BaseApplication):  # type: ignore[misc]
            def load_config(self) -> None:
                for key, value in outer.options.items():
                    if key in self.cfg.settings:  # settings newer than the installed gunicorn are skipped
                        self.cfg.set(key, value)

            def load(self) -> Any:
                return outer.load_app()

        self.options = options
        self.load_app = load_app
        self._app = _App()

    def run(self) -> None:
        self._app.run()


def _child_exit(server: Any, worker: Any) -> None:
    from extender import metrics

    metrics.mark_process_dead(worker.pid)


def _prepare_metrics_dir() -> str:
    """``PROMETHEUS_MULTIPROC_DIR``, emptied: stale files of a previous run would be summed in."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        Path(path).mkdir(parents=True, exist_ok=True)
        for f in Path(path).glob("*.db"):
            f.unlink()
    else:
        path = tempfile.mkdtemp(prefix="spotshift-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spot-extender",
        description="spotshift admission webhook (/mutate) and scheduler extender (/filter, /prioritize).",
    )
    p.add_argument("--bind", help="HOST:PORT to listen on (default: server.bind of the config, 0.0.0.0:8443)")
    p.add_argument(
        "--certfile",
        help="PEM certificate, reloaded when it changes (default: server.tls_cert_file; neither: plain HTTP)",
    )
    p.add_argument("--keyfile", help="PEM private key, given together with --certfile (default: server.tls_key_file)")
    p.add_argument("--config", help="YAML configuration file (default: $SPOTSHIFT_CONFIG, else defaults)")
    p.add_argument("--kubeconfig", help="kubeconfig for the node cache (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    p.add_argument(
        "--threads",
        type=int,
        default=DEFAULT_THREADS,
        help=f"threads per worker of the gthread worker class (default: {DEFAULT_THREADS})",
    )
    p.add_argument(
        "--worker-class", default=DEFAULT_WORKER_CLASS, choices=tuple(WORKER_CLASSES), help=argparse.SUPPRESS
    )
    p.add_argument("--no-node-cache", action="store_true", help="serve without watching the API (Nodes-only extender)")
    p.add_argument("--no-pod-cache", action="store_true", help="do not watch pods (per-workload spot ceilings off)")
    p.add_argument("--echo", action="store_true", help=argparse.SUPPRESS)  # benchmark baseline endpoint
    # Connections per worker; at the cap the oldest idle one is closed for a new one (extender/worker.py).
    p.add_argument("--worker-connections", type=int, default=1000, help=argparse.SUPPRESS)
    p.add_argument("--switch-interval", type=float, default=DEFAULT_SWITCH_INTERVAL, help=argparse.SUPPRESS)
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--access-log", action="store_true", help="log every request (costly at high rates)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def fail(message: str) -> int:
        print(f"spot-extender: {message}", file=sys.stderr)
        return 2

    if (args.certfile is None) != (args.keyfile is None):
        return fail("--certfile and --keyfile must be given together")
    try:
        config = load_config(args.config, os.environ, *flag_overrides(vars(args), CONFIG_FLAGS))
    except ConfigError as e:
        return fail(str(e))
    bind, certfile, keyfile = config.server.bind, config.server.tls_cert_file, config.server.tls_key_file
    if args.workers < 1 or args.threads < 1:
        return fail("--workers and --threads must be at least 1")
    options: dict[str, Any] = {
        "bind": bind,
        "workers": args.workers,
        "worker_class": WORKER_CLASSES[args.worker_class],
        "threads": args.threads,
        "worker_connections": args.worker_connections,
        "keepalive": KEEPALIVE_SECONDS,
        "timeout": 30,
        "graceful_timeout": 20,
        "loglevel": args.log_level,
        "errorlog": "-",
        "accesslog": "-" if args.access_log else None,
        "child_exit": _child_exit,
        "proc_name": "spot-extender",
        # gunicorn >= 25.1 opens a control socket under $HOME by default; the container's root is read-only.
        "control_socket_disable": True,
    }
    if certfile:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
        except (OSError, ssl.SSLError) as e:
            return fail(f"cannot load --certfile {certfile} with --keyfile {keyfile}: {e}")
        options.update(certfile=certfile, keyfile=keyfile, ssl_context=ReloadingSSLContext(certfile, keyfile))
    if not args.no_node_cache:
        problem = _check_kubeconfig(args.kubeconfig)
        if problem:
            return fail(problem)
        from extender.release import read_release, release_sentence

        found = read_release(args.kubeconfig)  # its transport is closed before gunicorn forks the workers
        said = release_sentence(found)
        print(f"spot-extender: {'warning: ' if found.warning else ''}{said}", file=sys.stderr, flush=True)
    owns_metrics_dir = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    metrics_dir = _prepare_metrics_dir()
    master_pid = os.getpid()

    def load_app() -> Any:
        # Requests run on the poller thread next to the node cache's watch threads (and one thread for
        # requests over 1 MiB); a thread waiting for the GIL waits up to the switch interval (5 ms by default) while
        # another runs Python, which shows up directly in tail latency. A request takes well under 1 ms.
        sys.setswitchinterval(args.switch_interval)
        # Imported in the worker, after PROMETHEUS_MULTIPROC_DIR is set: prometheus-client reads it at import.
        from extender.app import create_app

        cache = None
        if not args.no_node_cache:
            cache = build_cache(config, args.kubeconfig, watch_pods=not args.no_pod_cache)
        app = create_app(config, cache, echo=args.echo)
        # Everything loaded so far lives as long as the worker: keep it out of the collector's generations,
        # so a full collection (triggered by request garbage) scans only young objects instead of pausing
        # a request for milliseconds.
        gc.collect()
        gc.freeze()
        return app

    try:
        ServerApplication(options, load_app).run()
    finally:
        # Workers leave through here too (gunicorn exits them with SystemExit): only the master cleans up.
        if owns_metrics_dir and os.getpid() == master_pid:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
