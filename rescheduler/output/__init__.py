"""A plan rendered for its readers: the table for a person (``table``), the JSON document for programs
(``document``), the HTML page of every node's CPU and memory (``page``).

Pure: a plan in, text out; nothing here reads the cluster or writes a file. See docs/architecture.md.
"""
