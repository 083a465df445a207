"""A fake of Mailgun's ``POST /v3/DOMAIN/messages`` and ``GET /v3/domains/DOMAIN``.

Checks basic auth as ``api`` with the key (401 ``Forbidden`` otherwise), the domain in
the path (404 for another), form fields with documented names only (``h:`` and
``v:`` prefixes allowed), ``from``, ``to``, ``subject`` and ``text`` or ``html``.
"""

from __future__ import annotations

import base64
from urllib.parse import parse_qsl

from bench.support.providers.server import DROP, Delivery, FakeProvider, Reply, Request

FIELDS = {"from", "to", "cc", "bcc", "subject", "text", "html", "amp-html", "template",
          "o:tag", "o:testmode", "o:tracking", "recipient-variables"}
DOMAIN = "mg.example.com"


class FakeMailgun(FakeProvider):
    name = "mailgun"

    def __init__(self, secret: str = "key-0123456789abcdef0123456789abcdef") -> None:
        super().__init__(secret)
        self.files: list[list[tuple[str, str, bytes, str]]] = []

    def handle(self, request: Request) -> Reply | object:
        expected = "Basic " + base64.b64encode(f"api:{self.secret}".encode()).decode()
        if request.headers.get("authorization") != expected:
            return Reply(401, b"Forbidden")
        if (request.method, request.path) == ("GET", f"/v3/domains/{DOMAIN}"):
            return Reply(200, {"domain": {"name": DOMAIN, "state": "active"}})
        if request.method != "POST" or not request.path.endswith("/messages"):
            return Reply(404, {"message": "not found"})
        if request.path != f"/v3/{DOMAIN}/messages":
            return Reply(404, {"message": "Domain not found"})
        fields, files = self._parse(request)
        problem = self._check(fields, files)
        if problem:
            self.violation(problem)
            return Reply(400, {"message": problem})
        recipients = tuple(_bare(v) for n, v in fields if n in ("to", "cc", "bcc"))
        fault = self.fault(recipients)
        if fault == "refuse":
            return Reply(400, {"message": f"to parameter is not a valid address: {recipients[0]}"})
        if fault == "defer":
            return Reply(429, {"message": "Too many requests"}, {"Retry-After": "6"})
        provider_id = f"<{self.next_id()}@{DOMAIN}>"
        headers = {n[2:]: v for n, v in fields if n.startswith("h:")}
        variables = {n[2:]: v for n, v in fields if n.startswith("v:")}
        self.files.append(files)
        self.accept(Delivery(headers.get("Message-Id"), recipients, None, headers,
                             {"fields": fields, "variables": variables}, provider_id))
        return DROP if fault == "lose" else Reply(200, {"id": provider_id,
                                                       "message": "Queued. Thank you."})

    @staticmethod
    def _parse(request: Request) -> tuple[list[tuple[str, str]],
                                          list[tuple[str, str, bytes, str]]]:
        kind = request.headers.get("content-type", "")
        if kind.startswith("multipart/form-data"):
            return request.form()
        if kind.startswith("application/x-www-form-urlencoded"):
            return parse_qsl(request.body.decode(), keep_blank_values=True), []
        return [], []

    @staticmethod
    def _check(fields: list[tuple[str, str]], files: list[tuple[str, str, bytes, str]]
               ) -> str | None:
        names = {n for n, _ in fields}
        unknown = {n for n in names - FIELDS if not n.startswith(("h:", "v:"))}
        if unknown:
            return f"unknown fields {sorted(unknown)}"
        for required in ("from", "to", "subject"):
            if required not in names:
                return f"{required} parameter is missing"
        if not names & {"text", "html", "template"}:
            return "Need at least one of 'text', 'html' or 'template' parameters specified"
        if any(f[0] not in ("attachment", "inline") for f in files):
            return "files must be attachment or inline"
        return None


def _bare(mailbox: str) -> str:
    return mailbox.rsplit("<", 1)[-1].rstrip(">").strip().lower()
