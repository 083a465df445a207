"""Amazon SES notifications, delivered by SNS and signed by SNS.

An SNS HTTP(S) delivery is a JSON document (``Type``, ``MessageId``, ``TopicArn``,
``Message``, ``Timestamp``, ``Signature``, ``SigningCertURL``...). Verification:

1. the ``TopicArn`` must be one of ``MAILOUT_WEBHOOK_SES_TOPICS`` (403 otherwise,
   before anything is fetched);
2. ``SigningCertURL`` must be ``https://sns.<region>.amazonaws.com/...pem`` (the
   ``.cn`` partition too); a certificate from anywhere else is never fetched;
3. the certificate is fetched over verified TLS (cached per URL), must be within
   its validity period, and its RSA key must verify ``Signature`` over the canonical
   string of the message's fields (SHA1 for ``SignatureVersion`` 1, SHA256 for 2);
4. ``Timestamp`` must be within ``sns_tolerance`` (SNS signs at publish time and
   retries the same signed copy);
5. ``MessageId`` is the replay nonce.

A ``SubscriptionConfirmation`` for an allowed topic is confirmed by fetching its
``SubscribeURL`` (same host rule) unless ``MAILOUT_WEBHOOK_SES_AUTO_CONFIRM=false``.
A ``Notification``'s ``Message`` is the SES notification: ``Bounce``, ``Complaint``,
``Delivery`` (and, from configuration-set event publishing, ``DeliveryDelay`` and
``Reject``) are stored; ``Send``, ``Open``, ``Click`` and the like are ignored.

Tests point certificate and confirmation fetches at a local HTTPS server through
``MAILOUT_SNS_TEST_ORIGIN`` (with ``MAILOUT_SNS_TEST_CA_FILE``); production never
sets it.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import re
import ssl
import threading
import time
import urllib.request
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from mailout.feedback.dsn import provider_bounce_kind
from mailout.feedback.events import clip, normalize_message_id, parse_time, payload_text
from mailout.message.addresses import normalize_address
from mailout.models import BounceKind, Event, EventType, Provider
from mailout.webhooks.base import (
    FORBIDDEN_TOPIC,
    MISSING_AUTH,
    UNKNOWN_EVENT,
    Parsed,
    Request,
    WebhookError,
    bad_request,
    check_timestamp,
    json_body,
    require_dict,
    sub_list,
    text_field,
    unauthorized,
)
from mailout.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)

# sns.<region>.amazonaws.com, the region spelled as AWS spells them (us-east-1,
# us-gov-west-1, cn-north-1): "[a-z0-9-]+" also took S3 bucket hosts such as
# sns.s3.amazonaws.com, which anyone can fill with a certificate of their own.
SNS_HOST = re.compile(r"sns\.[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d\.amazonaws\.com(\.cn)?")
SNS_SUBJECTS = re.compile(r"sns\.amazonaws\.com(\.cn)?|" + SNS_HOST.pattern)
CERT_RETRY = 60.0  # seconds a failed certificate fetch is remembered (not fetched again)
FETCH_TIMEOUT = 10.0
MAX_CERT_BYTES = 64 * 1024
CERT_CACHE = 16
NOTIFICATION_FIELDS = ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type")
SUBSCRIPTION_FIELDS = ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                       "TopicArn", "Type")
IGNORED = frozenset({"Send", "Open", "Click", "Rendering Failure", "RenderingFailure",
                     "Subscription", "AmazonSnsSubscriptionSucceeded"})
_HASHES = {"1": hashes.SHA1, "2": hashes.SHA256}


def string_to_sign(doc: dict[str, Any]) -> bytes:
    """The canonical text SNS signs: ``name\\nvalue\\n`` for each field present, in order."""
    names = NOTIFICATION_FIELDS if doc.get("Type") == "Notification" else SUBSCRIPTION_FIELDS
    return "".join(f"{n}\n{doc[n]}\n" for n in names if doc.get(n) is not None).encode()


class SesReceiver:
    provider = Provider.SES

    def __init__(self, settings: WebhookSettings) -> None:
        self._topics = settings.ses_topics
        self._tolerance = settings.sns_tolerance
        self._auto_confirm = settings.ses_auto_confirm
        self._test_origin = settings.sns_test_origin
        self._context = ssl.create_default_context()
        if settings.sns_test_origin and settings.sns_test_ca_file:
            self._test_context: ssl.SSLContext | None = ssl.create_default_context(
                cafile=settings.sns_test_ca_file)
        else:
            self._test_context = None
        self._certs: OrderedDict[str, x509.Certificate] = OrderedDict()
        self._failed: OrderedDict[str, float] = OrderedDict()  # url -> when a fetch failed
        self._lock = threading.Lock()

    def receive(self, request: Request, now: float) -> Parsed:
        doc = require_dict(json_body(request.body), "the body")
        kind = text_field(doc, "Type")
        declared = request.header("x-amz-sns-message-type")
        if declared is not None and declared != kind:
            raise bad_request("x-amz-sns-message-type does not match the body's Type")
        topic = text_field(doc, "TopicArn")
        if topic not in self._topics:
            raise WebhookError(403, FORBIDDEN_TOPIC,
                               "the topic is not in MAILOUT_WEBHOOK_SES_TOPICS")
        self._verify(doc, now)
        message_id = text_field(doc, "MessageId")
        assert message_id is not None
        if kind == "SubscriptionConfirmation":
            return Parsed(nonce=message_id, ignored=1, reply={"confirmed": self._confirm(doc)})
        if kind == "UnsubscribeConfirmation":
            return Parsed(nonce=message_id, ignored=1)
        if kind != "Notification":
            raise bad_request(f"unknown SNS message type {str(kind)[:40]!r}", UNKNOWN_EVENT)
        try:
            note = json.loads(str(doc["Message"]))
        except json.JSONDecodeError:
            raise bad_request("the SNS Message is not an SES notification (not JSON)"
                              ) from None
        events, ignored = _ses_events(require_dict(note, "the SES notification"), message_id)
        return Parsed(events=events, nonce=message_id, ignored=ignored)

    # -- signature --------------------------------------------------------------------

    def _verify(self, doc: dict[str, Any], now: float) -> None:
        signature = doc.get("Signature")
        url = doc.get("SigningCertURL")
        if not isinstance(signature, str) or not isinstance(url, str):
            raise unauthorized("the message carries no signature", MISSING_AUTH)
        stamp = text_field(doc, "Timestamp")
        assert stamp is not None
        version = str(doc.get("SignatureVersion", ""))
        algorithm = _HASHES.get(version)
        if algorithm is None:
            raise unauthorized(f"unsupported SignatureVersion {version[:8]!r}")
        self._check_url(url, "SigningCertURL", suffix=".pem")
        try:
            raw_signature = base64.b64decode(signature, validate=True)
        except (binascii.Error, ValueError):
            raise unauthorized("the signature is not base64") from None
        cert = self._certificate(url)
        moment = datetime.fromtimestamp(now, UTC)
        if not cert.not_valid_before_utc <= moment <= cert.not_valid_after_utc:
            raise unauthorized("the signing certificate is not valid now")
        key = cert.public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            raise unauthorized("the signing certificate has no RSA key")
        try:
            key.verify(raw_signature, string_to_sign(doc), padding.PKCS1v15(), algorithm())
        except InvalidSignature:
            raise unauthorized("the SNS signature does not verify") from None
        try:
            signed_at = parse_time(stamp).timestamp()
        except ValueError:
            raise bad_request("Timestamp is not an ISO 8601 time") from None
        check_timestamp(str(signed_at), now, self._tolerance)

    def _check_url(self, url: str, what: str, suffix: str = "") -> None:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if self._test_origin is not None and origin == self._test_origin:
            return
        if parts.scheme != "https" or not SNS_HOST.fullmatch(parts.hostname or "") or \
                parts.port not in (None, 443) or parts.username or \
                not parts.path.endswith(suffix):
            raise unauthorized(f"{what} is not an https://sns.<region>.amazonaws.com URL")

    def _context_for(self, url: str) -> ssl.SSLContext:
        parts = urlsplit(url)
        if self._test_context is not None and \
                f"{parts.scheme}://{parts.netloc}" == self._test_origin:
            return self._test_context
        return self._context

    def _certificate(self, url: str) -> x509.Certificate:
        with self._lock:
            cached = self._certs.get(url)
            if cached is not None:
                self._certs.move_to_end(url)
                return cached
            failed_at = self._failed.get(url)
        # A failed fetch is remembered: each unsigned request naming an allowed topic
        # would otherwise cost one outbound fetch.
        if failed_at is not None and time.monotonic() - failed_at < CERT_RETRY:
            raise WebhookError(503, "certificate_unavailable",
                               "the signing certificate could not be fetched")
        try:
            pem = _fetch(url, self._context_for(url), MAX_CERT_BYTES)
            cert = x509.load_pem_x509_certificate(pem)
        except (OSError, ValueError) as exc:
            with self._lock:
                self._failed[url] = time.monotonic()
                while len(self._failed) > CERT_CACHE:
                    self._failed.popitem(last=False)
            log.warning("SNS: fetching the signing certificate failed (%s)",
                        type(exc).__name__,
                        extra={"event": "sns_certificate_failed", "error": type(exc).__name__})
            raise WebhookError(503, "certificate_unavailable",
                               "the signing certificate could not be fetched") from None
        if not _issued_to_sns(cert):
            raise unauthorized("the signing certificate is not issued to sns.amazonaws.com")
        with self._lock:
            self._certs[url] = cert
            while len(self._certs) > CERT_CACHE:
                self._certs.popitem(last=False)
        return cert

    def _confirm(self, doc: dict[str, Any]) -> bool:
        url = text_field(doc, "SubscribeURL")
        assert url is not None
        self._check_url(url, "SubscribeURL")
        if not self._auto_confirm:
            log.warning("SNS subscription for %s awaits confirmation "
                        "(MAILOUT_WEBHOOK_SES_AUTO_CONFIRM is off)", doc.get("TopicArn"),
                        extra={"event": "sns_subscription_waiting", "topic": doc.get("TopicArn")})
            return False
        try:
            _fetch(url, self._context_for(url), MAX_CERT_BYTES)
        except OSError as exc:
            log.warning("SNS: confirming the subscription failed (%s)", type(exc).__name__,
                        extra={"event": "sns_confirmation_failed", "error": type(exc).__name__})
            raise WebhookError(503, "confirmation_failed",
                               "the subscription could not be confirmed; SNS will retry"
                               ) from None
        log.info("SNS subscription to %s confirmed", doc.get("TopicArn"),
                 extra={"event": "sns_subscription_confirmed", "topic": doc.get("TopicArn")})
        return True


def _issued_to_sns(cert: x509.Certificate) -> bool:
    names = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return any(isinstance(n, str) and SNS_SUBJECTS.fullmatch(n.lower()) for n in names)


def _fetch(url: str, context: ssl.SSLContext, limit: int) -> bytes:
    """GET ``url`` (already checked to be https on an allowed host), at most ``limit``."""
    request = urllib.request.Request(url, headers={"User-Agent": "mailout"})  # noqa: S310 - https to an allowed host, checked by the caller
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT, context=context) as resp:  # noqa: S310 - as above
        data: bytes = resp.read(limit + 1)
    if len(data) > limit:
        raise ValueError("response too large")
    return data


# -- the SES notification -----------------------------------------------------------------

def _ses_events(note: dict[str, Any], sns_id: str) -> tuple[tuple[Event, ...], int]:
    kind = note.get("notificationType") or note.get("eventType")
    if not isinstance(kind, str):
        raise bad_request("the SES notification has no notificationType or eventType")
    if kind in IGNORED:
        return (), 1
    mail = require_dict(note.get("mail"), "mail")
    base = functools.partial(_event, pid=text_field(mail, "messageId", required=False),
                             mid=_message_id(mail), payload=payload_text(note))
    handler = _KINDS.get(kind)
    if handler is None:
        raise bad_request(f"unknown SES notification type {kind[:40]!r}", UNKNOWN_EVENT)
    events = handler(note, mail, sns_id, base)
    if not events:
        raise bad_request(f"the SES {kind} notification names no recipient")
    return tuple(events), 0


def _event(etype: EventType, event_id: str, recipient: str, when: str | None,
           subtype: str | None = None, diagnostic: str | None = None, *,
           pid: str | None, mid: str | None, payload: str) -> Event:
    try:
        occurred = parse_time(when) if when else datetime.now(UTC)
    except ValueError:
        raise bad_request("a timestamp in the SES notification is not ISO 8601") from None
    return Event(provider=Provider.SES, event_id=event_id, type=etype, subtype=subtype,
                 recipient=normalize_address(recipient), occurred_at=occurred,
                 provider_message_id=pid, message_id=mid, diagnostic=clip(diagnostic),
                 payload=payload)


def _message_id(mail: dict[str, Any]) -> str | None:
    common = mail.get("commonHeaders")
    if isinstance(common, dict) and isinstance(common.get("messageId"), str):
        return normalize_message_id(common["messageId"])
    for header in mail.get("headers") or []:
        if isinstance(header, dict) and str(header.get("name", "")).lower() == "message-id":
            return normalize_message_id(str(header.get("value", "")))
    return None


def _people(block: dict[str, Any], name: str) -> list[dict[str, Any]]:
    people = block.get(name)
    if not isinstance(people, list):
        raise bad_request(f"{name} must be a list")
    return [p for p in people if isinstance(p, dict) and isinstance(p.get("emailAddress"), str)]


def _bounce(note: dict[str, Any], mail: dict[str, Any], sns_id: str, base: Any) -> list[Event]:
    b = require_dict(note.get("bounce"), "bounce")
    permanent = b.get("bounceType") == "Permanent"
    feedback = text_field(b, "feedbackId", required=False) or sns_id
    out = []
    for person in _people(b, "bouncedRecipients"):
        text = " ".join(str(person[k]) for k in ("status", "diagnosticCode") if person.get(k))
        kind = provider_bounce_kind(permanent, text)
        detail = f"{b.get('bounceType')}/{b.get('bounceSubType')} {text}".strip()
        out.append(base(EventType.BOUNCED, f"{feedback}:{person['emailAddress'].lower()}",
                        person["emailAddress"], b.get("timestamp"), kind.value, detail))
    return out


def _complaint(note: dict[str, Any], mail: dict[str, Any], sns_id: str,
               base: Any) -> list[Event]:
    c = require_dict(note.get("complaint"), "complaint")
    feedback = text_field(c, "feedbackId", required=False) or sns_id
    suppressed = c.get("complaintSubType") == "OnAccountSuppressionList"
    etype = EventType.REJECTED if suppressed else EventType.COMPLAINED
    subtype = str(c.get("complaintFeedbackType") or "abuse")[:32]
    return [base(etype, f"{feedback}:{p['emailAddress'].lower()}", p["emailAddress"],
                 c.get("timestamp"), None if suppressed else subtype,
                 f"complaint {c.get('complaintSubType') or subtype}")
            for p in _people(c, "complainedRecipients")]


def _delivery(note: dict[str, Any], mail: dict[str, Any], sns_id: str,
              base: Any) -> list[Event]:
    d = require_dict(note.get("delivery"), "delivery")
    recipients = sub_list(d, "recipients")
    return [base(EventType.DELIVERED, f"{sns_id}:{r.lower()}", r, d.get("timestamp"), None,
                 d.get("smtpResponse") if isinstance(d.get("smtpResponse"), str) else None)
            for r in recipients if isinstance(r, str)]


def _delay(note: dict[str, Any], mail: dict[str, Any], sns_id: str, base: Any) -> list[Event]:
    d = require_dict(note.get("deliveryDelay"), "deliveryDelay")
    return [base(EventType.DEFERRED, f"{sns_id}:{p['emailAddress'].lower()}",
                 p["emailAddress"], d.get("timestamp"), None,
                 f"{d.get('delayType')} {p.get('diagnosticCode') or ''}")
            for p in _people(d, "delayedRecipients")]


def _reject(note: dict[str, Any], mail: dict[str, Any], sns_id: str, base: Any) -> list[Event]:
    r = require_dict(note.get("reject"), "reject")
    targets = sub_list(mail, "destination")
    return [base(EventType.REJECTED, f"{sns_id}:{t.lower()}", t, mail.get("timestamp"),
                 None, f"rejected: {r.get('reason')}") for t in targets if isinstance(t, str)]


_KINDS = {"Bounce": _bounce, "Complaint": _complaint, "Delivery": _delivery,
          "DeliveryDelay": _delay, "Reject": _reject}
_ = BounceKind  # bounce subtypes come from provider_bounce_kind


def from_settings(settings: WebhookSettings) -> SesReceiver | None:
    """The receiver, when ``MAILOUT_WEBHOOK_SES_TOPICS`` names at least one topic."""
    return SesReceiver(settings) if settings.ses_topics else None
