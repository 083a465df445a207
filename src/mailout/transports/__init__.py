"""The transport boundary: how a rendered message reaches a provider.

``base`` is the contract every transport implements (``Transport``, ``Envelope``,
``SendResult``); ``memory`` keeps messages in memory for tests; ``smtp/`` speaks SMTP.
Each transport maps its own replies to a provider-neutral ``SendResult``: nothing
outside this package parses SMTP text or an HTTP body. ``url`` builds a transport
from a ``MAILOUT_TRANSPORT`` URL.

May import: ``mailout.message``, ``mailout.support``, ``mailout.models``,
``mailout.exceptions``. Never imports the database (the same layer), delivery,
feedback or anything above them (tests/unit/test_layering.py).
"""
