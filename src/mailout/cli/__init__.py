"""The ``mailout`` command line: the click group (``main``), shared helpers
(``common``), retry, cancel and purge (``changes``), operator commands (``rollout``),
human-readable output (``display``), ``mailout check`` (``preflight``) and the
embedded demo (``demo``).

May import anything in the package; nothing in the package imports it.
"""
