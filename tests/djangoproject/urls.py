"""The shop's URLs and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from tests.djangoproject.shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/<str:using>/", views.place_order),
]
