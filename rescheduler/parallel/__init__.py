"""Work spread over forked processes: one piece of work in a child (``forked``), the packing passes on
several cores (``packing``). Each falls back to this process when forking fails. See docs/architecture.md.
"""
