"""The business row that a confirmation mail goes with."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    number = models.CharField(max_length=32, unique=True)
    email = models.EmailField()

    def __str__(self) -> str:
        return self.number
