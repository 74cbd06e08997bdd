"""The stage framework: what a stage is and how one runs, apart from the stages themselves.

- `contract`: `StageParams` (a stage's validated `params.yaml` section) and `StagePaths`;
- `runner`: `run_stage(name)`, what `orchestra stage NAME` (and so `dvc.yaml`) calls: validate the
  parameters, stage the outputs, run `pipelines/<name>.py`, move the outputs into place, log to MLflow;
- `tracking`: the MLflow side of a stage run (parent/child runs, lineage tags);
- `graph`: the DVC stage graph (`dvc.yaml`) in dependency order, reproduced one stage at a time;
- `lineage`: model version -> run -> flow run -> git commit -> data versions, for auditors.

The stages live in `pipelines/`; the runner finds `pipelines.<name>` by name (importlib), so this
package imports no stage statically.
"""
