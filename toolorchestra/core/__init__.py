"""Shared foundations with no dependencies on other layers: errors, atomic file I/O, settings."""
