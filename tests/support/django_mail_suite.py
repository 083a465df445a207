"""Django's own ``BaseEmailBackendTests``, run through the outbox (issue 31, item 2).

Run in a process of its own, with the Django under test first on ``PYTHONPATH``::

    python -m tests.support.django_mail_suite DJANGO_MAIL_TESTS_PY DATABASE_URL OUT.json

``DJANGO_MAIL_TESTS_PY`` is ``tests/mail/tests.py`` of that Django's sdist (see
:mod:`tests.support.django_sdist`). Django is configured with its default mail settings
(``DEFAULT_FROM_EMAIL`` ``webmaster@localhost``, ``SERVER_EMAIL`` ``root@localhost``)
and ``EMAIL_BACKEND = "mailout.contrib.django.EmailBackend"`` on ``DATABASE_URL``
(SQLite or PostgreSQL), migrated with ``migrate``. The mixin's two hooks are where the
outbox differs from a synchronous backend: ``get_mailbox_content()`` runs mailout's
real worker until nothing is due, sending over TCP to an SMTP sink run by Django's
own ``SMTPHandler`` (the one of Django's SMTP backend tests, from the same file),
and returns what the sink received; ``flush_mailbox()`` empties the sink.

Writes ``{"django": version, "results": {test: outcome}, "details": {test: why}}``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import sys
import unittest
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from sqlalchemy.engine import make_url

PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
WORKER_MAIL_FROM = "worker@example.com"  # MAIL_FROM the worker needs; Django's messages
# carry their own sender, so no message goes out from it.


def django_databases(url: str) -> dict[str, Any]:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": parsed.database}}
    return {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": parsed.database,
                        "USER": parsed.username or "", "PASSWORD": parsed.password or "",
                        "HOST": parsed.host or "", "PORT": str(parsed.port or "")}}


def configure(url: str) -> None:
    import django
    from django.conf import settings

    # Nothing about mail but the backend: Django's defaults are what is measured.
    settings.configure(DATABASES=django_databases(url),
                       INSTALLED_APPS=["mailout.contrib.django"],
                       EMAIL_BACKEND="mailout.contrib.django.EmailBackend",
                       USE_TZ=True, DEFAULT_AUTO_FIELD="django.db.models.BigAutoField")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def load(path: Path) -> ModuleType:
    """Django's ``tests/mail/tests.py`` as a module of its own name (not ``tests.mail``:
    mailout's own ``tests`` package is on the path too)."""
    spec = importlib.util.spec_from_file_location("django_mail_tests", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def drain(url: str, port: int) -> None:
    """mailout's worker, in this process, until nothing is due."""
    from mailout.worker import config
    from mailout.worker.build import build_worker

    settings = config.load(env={
        "MAILOUT_DATABASE_URL": url, "MAIL_FROM": WORKER_MAIL_FROM,
        "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_TLS": "none",
        "SMTP_TIMEOUT": "10", "MAILOUT_LISTEN": "0", "MAILOUT_POLL_SECONDS": "0.05",
        "MAILOUT_RETRY_BASE_SECONDS": "0.05", "MAILOUT_RETRY_CAP_SECONDS": "0.05",
        "MAILOUT_MAX_ATTEMPTS": "2"})
    worker = build_worker(settings, until_idle=True)
    try:
        asyncio.run(worker.run())
    finally:
        worker.alerts.close()
        worker.engine.dispose()


def outbox_tests(module: ModuleType, url: str) -> type[unittest.TestCase]:
    from aiosmtpd.controller import Controller
    from django.test import SimpleTestCase

    class OutboxBackendTests(module.BaseEmailBackendTests, SimpleTestCase):  # type: ignore[misc,name-defined]
        email_backend = "mailout.contrib.django.EmailBackend"
        databases: ClassVar = {"default"}  # the backend writes outbox rows

        @classmethod
        def setUpClass(cls) -> None:
            super().setUpClass()
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            cls.smtp_handler = module.SMTPHandler()
            cls.smtp_controller = Controller(cls.smtp_handler, hostname="127.0.0.1",
                                             port=port)
            cls.smtp_controller.start()
            cls.addClassCleanup(cls.smtp_controller.stop)

        def setUp(self) -> None:
            super().setUp()
            self.smtp_handler.flush_mailbox()

        def flush_mailbox(self) -> None:
            self.smtp_handler.flush_mailbox()

        def get_mailbox_content(self) -> list[Any]:
            drain(url, self.smtp_controller.port)
            return list(self.smtp_handler.mailbox)

    return OutboxBackendTests


class _Recorder(unittest.TextTestResult):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: dict[str, str] = {}
        self.details: dict[str, str] = {}

    def _name(self, test: unittest.TestCase) -> str:
        name = test.id().rpartition(".")[2]
        return name.split(" ")[0]  # a subtest's id names its parameters after a space

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self.outcomes.setdefault(self._name(test), PASSED)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._bad(test, FAILED, err)

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._bad(test, ERROR, err)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self.outcomes[self._name(test)] = SKIPPED

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._bad(test, FAILED if failed else ERROR, err)

    def _bad(self, test: unittest.TestCase, outcome: str, err: Any) -> None:
        name = self._name(test)
        if self.outcomes.get(name) not in (FAILED, ERROR):
            self.outcomes[name] = outcome
            self.details[name] = f"{err[0].__name__}: {str(err[1])[:500]}"


def main(argv: list[str]) -> int:
    mail_tests, url, out = argv
    configure(url)
    from django.test.utils import setup_test_environment

    setup_test_environment()
    module = load(Path(mail_tests))
    suite = unittest.TestLoader().loadTestsFromTestCase(outbox_tests(module, url))
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=2,
                                     resultclass=_Recorder).run(suite)
    assert isinstance(result, _Recorder)
    import django

    Path(out).write_text(json.dumps({"django": django.get_version(),
                                     "results": result.outcomes, "details": result.details},
                                    indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
