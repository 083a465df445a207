"""SMTP: the aiosmtplib client transport, its reply classification and codes, and the
development sink server.

May import: ``mailout.transports.base`` and what ``mailout.transports`` may import.
"""
