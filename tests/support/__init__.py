"""Helpers shared by several test modules (kept out of conftest and out of other test modules)."""
