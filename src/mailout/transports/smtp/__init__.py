"""SMTP: the aiosmtplib client transport (its connections, its pool slots and the sends
taken along on another's connection, and one mail transaction on a connection), its
reply classification and codes, and the development sink server.

May import: ``mailout.transports.base`` and what ``mailout.transports`` may import.
"""
