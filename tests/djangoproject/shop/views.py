"""A view under ATOMIC_REQUESTS: the order and its confirmation commit together."""

from __future__ import annotations

from django.core.mail import send_mail
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.views.decorators.csrf import csrf_exempt

from tests.djangoproject.shop.models import Order


@csrf_exempt
def place_order(request: HttpRequest, using: str) -> HttpResponse:
    """Create an order and mail its confirmation; ``?fail=1`` raises after both."""
    order = Order.objects.using(using).create(number=request.POST["number"],
                                              email=request.POST["email"])
    with override_settings(MAILOUT_DATABASE=using):
        send_mail(f"Order {order.number}", "Thanks!", None, [order.email],
                  fail_silently=False)
    if request.GET.get("fail"):
        raise RuntimeError("payment failed after the order was written")
    return HttpResponse(order.number, status=201)
