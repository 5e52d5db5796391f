"""The rescheduler's hands on the cluster: watch-backed state, marks, evictions, Events, leader election.

Every request goes through the one transport of :mod:`shared.kube.api`, which names the rescheduler to the API
server as :data:`USER_AGENT`. See docs/architecture.md.
"""

USER_AGENT = "spotshift-rescheduler"
"""The ``User-Agent`` of the rescheduler's requests (the API server's audit log, API priority and fairness)."""
