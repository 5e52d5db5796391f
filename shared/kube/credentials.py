"""API credentials from a kubeconfig or the in-cluster service account, read one way for every command.

Order, as kubectl and client-go find a cluster:

1. an explicit ``kubeconfig`` file (``--kubeconfig``), with ``context`` if given;
2. in a pod (``KUBERNETES_SERVICE_HOST`` set) without ``$KUBECONFIG``: the service account's token and CA;
   if those cannot be read, the default kubeconfig is tried before giving up;
3. otherwise ``$KUBECONFIG`` or ``~/.kube/config``.

The ``kubernetes`` package reads the files (auth plugins, exec credentials, client certificates and token
refresh are its business); every failure becomes one :class:`KubeconfigError` line a command can print.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["KubeconfigError", "load_client_configuration"]


class KubeconfigError(Exception):
    """No usable kubeconfig or in-cluster service account; the message is one line."""


def _first_line(e: BaseException) -> str:
    text = str(e)
    return text.splitlines()[0] if text else repr(e)


def load_client_configuration(
    kubeconfig: str | None = None, context: str | None = None, *, env: Mapping[str, str] | None = None
) -> Any:
    """A ``kubernetes.client.Configuration`` with the credentials found in the order above.

    ``env`` defaults to ``os.environ``; tests pass their own. Raises :class:`KubeconfigError`.
    """
    env = os.environ if env is None else env
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise KubeconfigError(f"the kubernetes package is not installed ({e})") from None
    configuration = client.Configuration()
    failures = (ConfigException, OSError, TypeError, ValueError)
    try:
        if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in env and not env.get("KUBECONFIG"):
            try:
                config.load_incluster_config(client_configuration=configuration)
                return configuration
            except failures as in_cluster:
                try:
                    config.load_kube_config(context=context, client_configuration=configuration)
                except failures:
                    raise KubeconfigError(
                        f"cannot load the in-cluster service account: {_first_line(in_cluster)}"
                    ) from None
                return configuration
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    except failures as e:
        raise KubeconfigError(f"cannot load the kubeconfig: {_first_line(e)}") from None
    return configuration
