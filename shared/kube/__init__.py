"""The only part of ``shared/`` that talks to an API server: list+watch and client credentials.

Everything else in ``shared/`` is pure (API JSON in, values out; no client, clock, environment or I/O), and a
test keeps it so. The extender and the rescheduler both need the same two impure pieces, so they live here
once, apart, rather than written twice: :mod:`shared.kube.informer` (list with pagination, then watch from
the list's resourceVersion; relist on 410 Gone; backoff on errors) and :mod:`shared.kube.credentials`
(kubeconfig or in-cluster service account into a ``kubernetes.client.Configuration``). No pure module of
``shared/`` imports this package.
"""
