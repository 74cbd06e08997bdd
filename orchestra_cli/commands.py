"""Imports every command module so each registers its commands on the app."""

from orchestra_cli import (  # noqa: F401
    ask,
    audit,
    calibrate,
    descpref,
    doctor,
    evalpromote,
    run,
    serve_model,
    stage,
    toolscale,
    train,
)
