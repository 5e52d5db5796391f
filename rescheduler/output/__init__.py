"""A plan rendered for its readers: the HTML page (``page``).

Pure: a plan in, text out; nothing here reads the cluster or writes a file. See docs/architecture.md.
"""
