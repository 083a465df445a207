"""A small Django project for the tests: a shop that mails order confirmations.

Two databases, so every test runs on both: ``default`` is SQLite (a file, so that a
worker in another process can read it) and ``postgres`` is PostgreSQL (filled in
from MAILOUT_TEST_POSTGRES_URL, or by tests/support/django_fixtures.py with the
embedded server).
Each test picks one with ``MAILOUT_DATABASE``.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

from sqlalchemy.engine import make_url

SECRET_KEY = "test-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "tests.djangoproject.urls"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "mailout.contrib.django",
    "tests.djangoproject.shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

EMAIL_BACKEND = "mailout.contrib.django.EmailBackend"
DEFAULT_FROM_EMAIL = "Shop <shop@example.com>"

# Test databases of concurrent runs never collide. A manage.py process started by a
# test is told the names of that test's databases (MAILOUT_DJANGO_*_NAME).
_RUN = uuid.uuid4().hex[:10]
_SQLITE = Path(tempfile.gettempdir()) / f"mailout-django-{_RUN}.sqlite3"
_PG = make_url(os.environ.get("MAILOUT_TEST_POSTGRES_URL")
               or "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("MAILOUT_DJANGO_SQLITE_NAME", str(_SQLITE)),
        "ATOMIC_REQUESTS": True,
        "TEST": {"NAME": str(_SQLITE.with_suffix(".test.sqlite3"))},
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("MAILOUT_DJANGO_POSTGRES_NAME", f"mailout_django_{_RUN}"),
        "USER": _PG.username or "postgres",
        "PASSWORD": _PG.password or "",
        "HOST": _PG.host or "127.0.0.1",
        "PORT": str(_PG.port or 5432),
        "ATOMIC_REQUESTS": True,
        "TEST": {"NAME": f"test_mailout_django_{_RUN}"},
    },
}

# MariaDB, when the suite has one (MAILOUT_TEST_MYSQL_URL): Django on a database mailout
# has no store for yet, where the backend must refuse by name.
_MYSQL = os.environ.get("MAILOUT_TEST_MYSQL_URL")
if _MYSQL:
    _my = make_url(_MYSQL)
    DATABASES["mariadb"] = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": os.environ.get("MAILOUT_DJANGO_MARIADB_NAME", f"mailout_django_{_RUN}"),
        "USER": _my.username or "root",
        "PASSWORD": _my.password or "",
        "HOST": _my.host or "127.0.0.1",
        "PORT": str(_my.port or 3306),
        "ATOMIC_REQUESTS": True,
        "TEST": {"NAME": f"test_mailout_django_{_RUN}"},
    }
