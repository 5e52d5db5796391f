"""The rescheduler's hands on the cluster: API client, watch-backed state, marks, evictions, Events, leader election.

See docs/architecture.md.
"""
