"""Helpers the test suites share (servers started for real, like PostgreSQL)."""
