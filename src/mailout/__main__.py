"""``python -m mailout`` runs the command line."""

from mailout.cli import main

main()
