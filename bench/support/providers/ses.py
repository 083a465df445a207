"""SES v2 for tests: moto's real ``SendEmail`` server behind a fault gate.

moto (in server mode, on a free loopback port) implements SES v2 ``SendEmail`` and
``GetAccount``: it checks the sender is a verified identity, parses the raw message
and records it. moto neither checks signatures nor fails on demand, so a small gate
in front of it (the same server as the other fakes) first checks the SigV4 signature
against the known key (403 ``UnrecognizedClientException`` or
``SignatureDoesNotMatch`` as SES answers), then applies the test's faults with SES's
own error answers (``MessageRejected``, ``TooManyRequestsException``), and forwards
everything else to moto unchanged. moto lacks ``GetAccount`` (what ``mailout check``
reads), so the gate answers that one itself, in SES's documented shape.
"""

from __future__ import annotations

import http.client
import re
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from moto.core import DEFAULT_ACCOUNT_ID
from moto.server import ThreadedMotoServer
from moto.ses.models import ses_backends

from bench.common import free_port
from bench.support.providers.server import DROP, Delivery, FakeProvider, Reply, Request

ACCESS_KEY = "AKIDEXAMPLE"
REGION = "us-east-1"
SENDERS = ("shop@example.com",)
_CREDENTIAL = re.compile(r"Credential=([^/]+)/(\d{8})/([^/]+)/ses/aws4_request, "
                         r"SignedHeaders=([^,]+), Signature=([0-9a-f]+)")


def error(status: int, kind: str, message: str, **headers: str) -> Reply:
    return Reply(status, {"message": message}, {"x-amzn-ErrorType": kind, **headers})


class MotoSes:
    """moto's server on a free loopback port, started once per test process."""

    _server: ThreadedMotoServer | None = None
    port = 0

    @classmethod
    def start(cls) -> int:
        if cls._server is None:
            cls.port = free_port()
            cls._server = ThreadedMotoServer(ip_address="127.0.0.1", port=cls.port,
                                             verbose=False)
            cls._server.start()
        return cls.port

    @classmethod
    def sent(cls) -> list[Any]:
        return list(ses_backends[DEFAULT_ACCOUNT_ID][REGION].sent_messages)

    @classmethod
    def reset(cls) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", cls.port, timeout=10)
        conn.request("POST", "/moto-api/reset")
        conn.getresponse().read()
        conn.close()


class FakeSes(FakeProvider):
    """The gate in front of moto; ``delivered`` is filled from moto's record."""

    name = "ses"

    def __init__(self, secret: str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY") -> None:
        super().__init__(secret)
        self.moto_port = MotoSes.start()
        MotoSes.reset()
        self._verify_senders()

    def _verify_senders(self) -> None:
        import boto3

        client = boto3.client("sesv2", region_name=REGION, aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key=self.secret,
                              endpoint_url=f"http://127.0.0.1:{self.moto_port}")
        for sender in SENDERS:
            client.create_email_identity(EmailIdentity=sender)

    def handle(self, request: Request) -> Reply | object:
        problem = self._signature_problem(request)
        if problem:
            return problem
        if (request.method, request.path) == ("GET", "/v2/email/account"):
            # moto has no GetAccount: the gate answers it as SES documents it.
            return Reply(200, {"SendingEnabled": True, "ProductionAccessEnabled": True,
                               "SendQuota": {"Max24HourSend": 50000.0,
                                             "MaxSendRate": 14.0, "SentLast24Hours": 0.0}})
        if (request.method, request.path) == ("POST", "/v2/email/outbound-emails"):
            body = request.json()
            if set(body) - {"FromEmailAddress", "Destination", "ReplyToAddresses", "Content"}:
                self.violation(f"unexpected fields {sorted(body)}")
            recipients = tuple(_bare(a) for f in ("ToAddresses", "CcAddresses", "BccAddresses")
                               for a in body["Destination"].get(f, []))
            fault = self.fault(recipients)
            if fault == "refuse":
                return error(400, "MessageRejected", "Email address is on the suppression list")
            if fault == "defer":
                return error(429, "TooManyRequestsException", "Maximum sending rate exceeded.",
                             **{"Retry-After": "1"})
            reply = self._forward(request)
            if reply.status == 200:
                self._record(recipients, reply)
            return DROP if fault == "lose" else reply
        return self._forward(request)

    def _record(self, recipients: tuple[str, ...], reply: Reply) -> None:
        import email
        import json

        raw = MotoSes.sent()[-1].raw_data
        parsed = email.message_from_string(raw)
        provider_id = json.loads(reply.body)["MessageId"]
        headers = {k: str(v) for k, v in parsed.items()}
        self.accept(Delivery(parsed["Message-ID"], recipients, None, headers,
                             {"raw": raw}, provider_id))

    def _forward(self, request: Request) -> Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.moto_port, timeout=10)
        path = request.path + (f"?{request.query}" if request.query else "")
        conn.request(request.method, path, body=request.body, headers={
            k: v for k, v in request.headers.items() if k not in ("connection",)})
        response = conn.getresponse()
        body = response.read()
        headers = {k: v for k, v in response.getheaders()
                   if k.lower() in ("content-type", "x-amzn-errortype", "x-amzn-requestid")}
        conn.close()
        return Reply(response.status, body, headers)

    def _signature_problem(self, request: Request) -> Reply | None:
        found = _CREDENTIAL.search(request.headers.get("authorization", ""))
        if not found:
            return error(403, "MissingAuthenticationTokenException", "Missing Authentication")
        access, _day, region, signed, signature = found.groups()
        if access != ACCESS_KEY:
            return error(403, "UnrecognizedClientException",
                         "The security token included in the request is invalid.")
        aws = AWSRequest(method=request.method,
                         url=f"http://{request.headers['host']}{request.path}"
                             + (f"?{request.query}" if request.query else ""),
                         data=request.body,
                         headers={h: request.headers[h] for h in signed.split(";")
                                  if h != "host"})
        aws.context["timestamp"] = request.headers["x-amz-date"]
        auth = SigV4Auth(Credentials(access, self.secret), "ses", region)
        expected = auth.signature(auth.string_to_sign(aws, auth.canonical_request(aws)), aws)
        if expected != signature:
            return error(403, "SignatureDoesNotMatch", "The request signature we calculated "
                         "does not match the signature you provided.")
        return None


def _bare(mailbox: str) -> str:
    return mailbox.rsplit("<", 1)[-1].rstrip(">").strip().lower()
