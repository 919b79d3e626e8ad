"""Alembic migrations (a package so that ``pip install .`` ships them)."""
