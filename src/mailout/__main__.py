"""``python -m mailout`` runs the command line."""

from mailout.cli.main import main

main()
