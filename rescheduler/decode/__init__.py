"""Cluster snapshots read from kubectl's JSON: typed decoding, the pod fast path, a big file read in two halves.

Nothing here acts on the cluster or runs the loop; :mod:`rescheduler.cluster.listing` reads a live cluster
with the same decoders. See docs/architecture.md.
"""
