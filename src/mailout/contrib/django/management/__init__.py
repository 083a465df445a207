"""Django management commands of mailout (``manage.py mailout``); imports mailout.cli."""
