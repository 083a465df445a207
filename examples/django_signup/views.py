"""A sign-up view: the account and its welcome mail commit together.

Add ``path("signup/", views.signup)`` to your URLs (``urls.py`` here) and set
``EMAIL_BACKEND = "mailout.contrib.django.EmailBackend"``: ``send_mail`` then writes an
outbox row in the view's transaction, and ``manage.py mailout worker`` sends it. With
OpenTelemetry (``opentelemetry-instrumentation-django`` and an SDK), the request's span
holds the enqueue, and the worker's ``send`` span links to it: nothing else to add.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.core.mail import send_mail
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST


@csrf_exempt  # an example API endpoint; a form view would keep CSRF protection
@require_POST
def signup(request: HttpRequest) -> HttpResponse:
    email = request.POST["email"]
    with transaction.atomic():  # no account without its mail, no mail without the account
        user = User.objects.create_user(username=email, email=email)
        send_mail("Welcome to the shop", "Your account is ready.", None, [email],
                  fail_silently=False)
    return HttpResponse(str(user.pk), status=201)
