"""Hand-built envelopes carrying every field a message can hold, for transport tests."""

from __future__ import annotations

from mailout.message.envelope import Envelope
from mailout.models import Attachment, Mailbox

PDF = b"%PDF-1.4 fake invoice\n"
PNG = b"\x89PNG\r\n\x1a\nfake logo"


def full_envelope(key: str = "order-9-invoice", to: str = "alice@example.com") -> Envelope:
    """Two To, a Cc, a Bcc, a Reply-To, custom headers, an attachment and an inline image."""
    return Envelope(
        message_id=f"<{key}@shop.example.com>",
        idempotency_key=key,
        sender=Mailbox("shop@example.com", "Shop"),
        to=(Mailbox(to, "Alice"), Mailbox("bob@example.com")),
        cc=(Mailbox("carol@example.com", "Carol"),),
        bcc=(Mailbox("audit@example.com"),),
        reply_to=(Mailbox("help@example.com", "Help desk"),),
        subject="Your invoice",
        text="Invoice attached.\n",
        html='<p>Invoice attached.</p><img src="cid:logo@shop">',
        headers=(("X-Order", "9"), ("List-Unsubscribe", "<mailto:unsub@example.com>")),
        attachments=(
            Attachment("invoice.pdf", PDF, "application/pdf"),
            Attachment("logo.png", PNG, "image/png", inline=True, cid="logo@shop"),
        ),
    )
