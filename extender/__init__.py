"""spotshift webhook and scheduler extender (Flask on gunicorn)."""

USER_AGENT = "spotshift-extender"
"""The ``User-Agent`` of the extender's and its tools' requests (the API server's audit log, API priority and
fairness), through the one transport of :mod:`shared.kube.api`."""
