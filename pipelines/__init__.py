"""Versioned pipeline stages, one module each, run by dvc.yaml as `orchestra stage NAME`.

The stage contract: a module `pipelines/<name>.py` defines `Params` (a `StageParams` model for its
`params.yaml` section) and `run(params, paths) -> dict[str, float]` (the metrics). `paths.deps` are
absolute input paths; `paths.outs` are absolute *staging* paths that the runner moves into place
only after `run` returns, so a crash never leaves a half-written output that looks complete.
"""
