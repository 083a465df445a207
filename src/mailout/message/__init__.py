"""The message: what one e-mail is, from the params at enqueue to the bytes on the wire.

Owns the parts of a complete message at enqueue (``compose``), the rules for headers,
params, keys, unsubscribe links and attachments (``validate``), addresses and their
parser (``addresses``), template folders (``templates``) and the params a variant
needs (``template_params``), rendering a claimed row (``render``) into the envelope a
transport sends (``envelope``), the RFC 5322 / MIME wire format (``mime``) and the
per-message envelope sender bounces come back to (``return_path``).

May import: ``mailout.support``, ``mailout.models``, ``mailout.exceptions``; Jinja2 and
email-validator. Never imports the database, the transports, delivery, feedback or
anything above them (tests/unit/test_layering.py).
"""
