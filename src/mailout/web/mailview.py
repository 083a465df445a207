"""Rendering a message for a person to look at: the stored row or a template
preview, through :class:`mailout.message.render.Renderer` (the worker's own renderer),
then read back from the wire bytes, so what is shown is what would be sent.

Also the template previews: ``<template>/preview.json`` maps a sample name
(usually a locale such as ``en`` or ``de``) to the params to render it with; a
sample named by a locale renders with that locale (``<template>/de/`` when it
exists, as the worker would).
A preview is rendered in memory: nothing is written, enqueued or sent.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from mailout.exceptions import RenderError
from mailout.message.render import Renderer
from mailout.message.templates import template_exists, validate_locale, validate_template_name
from mailout.models import ClaimedMessage
from mailout.web.settings import WebSettings

PREVIEW_FILE = "preview.json"
PREVIEW_RECIPIENT = "recipient@example.com"
_PREVIEW_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class MailView:
    """A rendered message, or why it could not be rendered (``error``)."""

    subject: str | None = None
    html: str | None = None
    text: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    wire: bytes = b""
    error: str | None = None


def renderer_for(settings: WebSettings) -> Renderer | None:
    """The worker's renderer as these settings configure it; None without MAIL_FROM."""
    if not settings.mail_from:
        return None
    templates = settings.templates_dir if settings.templates_dir else None
    try:
        return Renderer(templates, mail_from=settings.mail_from,
                        idempotency_header=settings.idempotency_header)
    except ValueError:  # a bad MAIL_FROM: say so on the page rather than fail to start
        return None


def render(renderer: Renderer | None, msg: ClaimedMessage) -> MailView:
    """Render ``msg``; errors (missing params, bad template) become ``MailView.error``."""
    if renderer is None:
        return MailView(error="set MAIL_FROM (and MAILOUT_TEMPLATES) where the console "
                              "runs to render messages")
    try:
        envelope = renderer.render(msg)
    except RenderError as exc:
        return MailView(error=str(exc))
    return read_wire(envelope.wire)


def read_wire(wire: bytes) -> MailView:
    """Split wire-format bytes into subject, HTML part, text part and headers."""
    parsed = message_from_bytes(wire, policy=policy.default)
    assert isinstance(parsed, EmailMessage)  # policy.default builds EmailMessage objects
    html = parsed.get_body(preferencelist=("html",))
    text = parsed.get_body(preferencelist=("plain",))
    return MailView(
        subject=str(parsed.get("Subject", "")),
        html=_lines(html.get_content()) if html is not None else None,
        text=_lines(text.get_content()) if text is not None else None,
        headers=tuple((name, str(value)) for name, value in parsed.items()),
        wire=wire,
    )


def _lines(content: str) -> str:
    # Wire format ends lines in CRLF; a person reads lines.
    return content.replace("\r\n", "\n")


@dataclass(frozen=True, slots=True)
class TemplatePreviews:
    """One template and its preview samples (sample name -> params), or why none."""

    name: str
    samples: dict[str, dict[str, Any]]
    problem: str | None = None  # a missing or malformed preview.json


def list_templates(templates_dir: Path | None) -> list[TemplatePreviews]:
    """Every template folder under ``templates_dir`` with its previews, by name."""
    if templates_dir is None or not templates_dir.is_dir():
        return []
    names = sorted(p.name for p in templates_dir.iterdir()
                   if p.is_dir() and template_exists(templates_dir, p.name))
    return [load_previews(templates_dir, n) for n in names]


def load_previews(templates_dir: Path, name: str) -> TemplatePreviews:
    """The samples of template ``name``. Raises ValueError for a bad template name."""
    validate_template_name(name)
    path = templates_dir / name / PREVIEW_FILE
    if not path.is_file():
        return TemplatePreviews(name, {}, f"no {PREVIEW_FILE}: add one mapping a sample "
                                          "name (e.g. a locale) to params")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return TemplatePreviews(name, {}, f"{PREVIEW_FILE} is not readable JSON: {exc}")
    if not isinstance(doc, dict) or not doc or not all(isinstance(v, dict) for v in doc.values()):
        return TemplatePreviews(name, {}, f"{PREVIEW_FILE} must map each sample name "
                                          "(e.g. en, de) to an object of params")
    return TemplatePreviews(name, {str(k): v for k, v in doc.items()})


def sample_locale(sample: str) -> str | None:
    """The locale a sample name stands for (``de``, ``es-MX``), or None (``default``)."""
    try:
        return validate_locale(sample)
    except ValueError:
        return None


def preview_message(name: str, sample: str, params: dict[str, Any]) -> ClaimedMessage:
    """An in-memory message for a preview: it never exists in any database. A sample
    named by a locale renders with it, so the template's locale folder is used."""
    locale = sample_locale(sample)
    key = f"preview-{name}-{re.sub(r'[^A-Za-z0-9_.-]', '_', sample)[:40]}"
    return ClaimedMessage(
        id=0, key=key, queue="preview", priority=0, recipient=PREVIEW_RECIPIENT, sender=None,
        template=name, params=params, subject=None, text=None, html=None, headers=None,
        message_id=f"<{key}@preview.mailout.invalid>", attempts=0, unknown_attempts=0,
        created_at=_PREVIEW_EPOCH, expires_at=None, lease_token="", claimed_at=_PREVIEW_EPOCH,
        reclaimed=False, locale=locale,
    )
