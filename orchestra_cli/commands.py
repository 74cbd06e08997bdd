"""Imports every command module so each registers its commands on the app."""

from orchestra_cli import ask, audit, descpref, doctor, evalpromote, run, stage, toolscale, train  # noqa: F401
