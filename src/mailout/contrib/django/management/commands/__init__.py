"""``manage.py mailout <command>``: mailout's CLI on Django's database; imports mailout.cli."""
