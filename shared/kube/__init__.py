"""The only part of ``shared/`` that talks to an API server: the one transport, list+watch, credentials.

Everything else in ``shared/`` is pure (API JSON in, values out; no client, clock, environment or I/O), and a
test keeps it so. The extender and the rescheduler reach the API server the same way, so these pieces live
here once, apart, rather than written twice:

* :mod:`shared.kube.api`: the one transport of every spotshift process (raw JSON over one ``urllib3`` pool per
  process, errors mapped to classes once, ``Retry``, the :class:`~shared.kube.api.Kube` helpers, and the
  :class:`~shared.kube.api.Collection` an informer lists and watches). The extender's caches, ``spot-certs``
  and the probe, and everything the rescheduler reads or does, go through it.
* :mod:`shared.kube.informer`: list with pagination, then watch from the list's resourceVersion; relist on
  410 Gone; backoff on errors.
* :mod:`shared.kube.version`: the cluster's kube-scheduler release from ``/version``, and the rules it selects.
* :mod:`shared.kube.credentials`: a kubeconfig or the in-cluster service account into a
  ``kubernetes.client.Configuration``, the only use of the ``kubernetes`` package.

No pure module of ``shared/`` imports this package.
"""
