"""The rescheduler's pure plan: a cluster snapshot and a configuration in, a Plan out.

Nothing here talks to the API server, logs or reads the clock; the architecture test
(tests/unit/test_architecture.py) keeps it so. See docs/architecture.md.
"""
