"""The example's URLs: include them in a project's, or use them as its ROOT_URLCONF."""

from __future__ import annotations

from django.urls import path
from examples.django_signup import views

urlpatterns = [path("signup/", views.signup)]
