"""Named SMTP reply codes (RFC 5321 section 4.2) used by mailout's decisions."""

from __future__ import annotations

from typing import Final

# 2yz: positive completion
OK: Final = 250
USER_NOT_LOCAL_WILL_FORWARD: Final = 251  # RCPT accepted, to be forwarded
SERVICE_READY: Final = 220
AUTH_SUCCEEDED: Final = 235
START_MAIL_INPUT: Final = 354  # intermediate reply to DATA

# 4yz: transient negative completion, the same request may work later
SERVICE_NOT_AVAILABLE: Final = 421  # the server is closing the channel
MAILBOX_BUSY: Final = 450
LOCAL_ERROR: Final = 451
INSUFFICIENT_STORAGE: Final = 452
TEMPORARY_AUTH_FAILURE: Final = 454  # also "TLS not available due to temporary reason"

# 5yz: permanent negative completion, do not repeat the request unchanged
SYNTAX_ERROR: Final = 500
PARAMETER_SYNTAX_ERROR: Final = 501
COMMAND_NOT_IMPLEMENTED: Final = 502
BAD_SEQUENCE: Final = 503
AUTH_REQUIRED: Final = 530  # RFC 4954; also sent when STARTTLS must come first
AUTH_CREDENTIALS_INVALID: Final = 535  # RFC 4954
ENCRYPTION_REQUIRED: Final = 538  # RFC 4954: encryption required for this AUTH mechanism
MAILBOX_UNAVAILABLE: Final = 550
USER_NOT_LOCAL: Final = 551
EXCEEDED_STORAGE: Final = 552
MAILBOX_NAME_NOT_ALLOWED: Final = 553
TRANSACTION_FAILED: Final = 554

# Reply classes, the first digit
POSITIVE: Final = 2
TRANSIENT: Final = 4
PERMANENT: Final = 5

# Enhanced status codes (RFC 3463) that change a decision
MAILBOX_FULL: Final = "4.2.2"
MESSAGE_TOO_BIG: Final = "5.3.4"
DELIVERY_NOT_AUTHORIZED: Final = "5.7.1"
