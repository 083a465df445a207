"""Integrations with application frameworks, one subpackage each (``contrib.django``).

May import anything of mailout's public API and the framework it integrates;
nothing of mailout's core imports this package.
"""
