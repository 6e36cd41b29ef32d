"""Tests against real serving engines (run last: see tests/conftest.py)."""
