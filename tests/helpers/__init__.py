"""Helpers shared by tests of every area."""
