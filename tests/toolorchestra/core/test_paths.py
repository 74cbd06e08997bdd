"""Containment of user-named paths (core/paths.py): outputs never escape the workspace or hit its
state, inputs come from the workspace or a read-only root, existing paths a stage did not write are
never replaced."""

from __future__ import annotations

import pytest

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.paths import (
    check_input,
    check_output,
    check_output_folder,
    check_replaceable,
    check_stage_paths,
    package_root,
    record_outputs,
)


@pytest.mark.parametrize("value", ["/etc", "../elsewhere", "data/../../x", "~/x"])
def test_outputs_outside_the_workspace_are_refused(tmp_path, value):
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(ConfigError, match=r"params.yaml: synth.outs.toolscale: output path .* outside the workspace"):
        check_output(value, ws, file="params.yaml", key="synth.outs.toolscale")


def test_a_symlink_pointing_out_of_the_workspace_is_refused(tmp_path):
    ws, victim = tmp_path / "ws", tmp_path / "victim"
    ws.mkdir()
    victim.mkdir()
    (ws / "data").symlink_to(victim)
    with pytest.raises(ConfigError, match="outside the workspace"):
        check_output("data/toolscale", ws, file=None, key="k")


@pytest.mark.parametrize("value", [".", ".git", ".git/hooks", ".dvc", ".dvc/cache", ".orchestra"])
def test_outputs_on_the_workspace_or_its_state_are_refused(tmp_path, value):
    with pytest.raises(ConfigError, match="workspace itself|overlaps the state folder"):
        check_output(value, tmp_path, file=None, key="k")


def test_inside_paths_pass_and_resolve(tmp_path):
    assert check_output("data/x", tmp_path, file=None, key="k") == tmp_path.resolve() / "data/x"
    # below the state folder: where ad-hoc commands (orchestra evaluate) keep their outputs
    assert check_output(".orchestra/cli/evaluate", tmp_path, file=None, key="k") == tmp_path.resolve() / ".orchestra/cli/evaluate"
    assert check_input("data/x", tmp_path, file=None, key="k") == tmp_path.resolve() / "data/x"


def test_inputs_from_read_only_roots_only(tmp_path):
    ws, shared = tmp_path / "ws", tmp_path / "shared"
    ws.mkdir()
    shared.mkdir()
    with pytest.raises(ConfigError, match="p.yaml: s.deps.domain: input path .* ORCHESTRA_READ_ONLY_ROOTS"):
        check_input(str(shared / "tau2"), ws, file="p.yaml", key="s.deps.domain")
    assert check_input(str(shared / "tau2"), ws, read_only_roots=[shared], file=None, key="k") == shared / "tau2"
    embedded = package_root() / "tools" / "catalogs" / "embedded.yaml"
    assert check_input(str(embedded), ws, file=None, key="k") == embedded


def test_overlapping_outputs_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="outputs a and b overlap"):
        check_stage_paths("s", {}, {"a": "data/x", "b": "data/x/y"}, tmp_path)


def test_a_file_is_no_output_folder(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ConfigError, match="--out: f.txt is a file; expected a folder"):
        check_output_folder("f.txt", tmp_path, key="--out")


def test_only_paths_the_stage_wrote_may_be_replaced(tmp_path):
    state = tmp_path / ".orchestra"
    mine, foreign = tmp_path / "data/mine", tmp_path / "pipelines"
    mine.mkdir(parents=True)
    foreign.mkdir()
    with pytest.raises(ConfigError, match="exists and was not written by stage 's'"):
        check_replaceable("s", {"x": mine}, tmp_path, state)
    record_outputs("s", [mine], state)
    record_outputs("s", [tmp_path / "data/other"], state)  # another run's paths add to the record
    check_replaceable("s", {"x": mine}, tmp_path, state)
    with pytest.raises(ConfigError, match="s.outs.y: output path .*pipelines exists"):
        check_replaceable("s", {"y": foreign}, tmp_path, state)
    # What DVC restored (dvc.lock lists it as the stage's out) is the stage's too.
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages:\n  s:\n    cmd: x\n    outs:\n    - path: pipelines\n")
    check_replaceable("s", {"y": foreign}, tmp_path, state)
    check_replaceable("s", {"z": tmp_path / "data/new"}, tmp_path, state)  # absent: nothing replaced


def test_an_ad_hoc_run_does_not_disown_the_pipelines_outputs(tmp_path):
    """`orchestra evaluate --bench qa` writes reports/eval-adhoc: reports/eval stays the stage's."""
    from toolorchestra.core.paths import owned_outputs, record_outputs

    state = tmp_path / ".orchestra"
    record_outputs("evaluate", [tmp_path / "reports" / "eval"], state)
    record_outputs("evaluate", [tmp_path / "reports" / "eval-adhoc"], state)
    assert owned_outputs("evaluate", tmp_path, state) == {tmp_path / "reports" / "eval",
                                                         tmp_path / "reports" / "eval-adhoc"}


def test_staging_leftovers_of_dead_stages_are_removed_live_ones_kept(tmp_path):
    import os
    import subprocess

    from toolorchestra.core.paths import remove_stale_staging

    gone = subprocess.Popen(["true"])
    gone.wait()
    final = tmp_path / "toolscale"
    (tmp_path / f".toolscale.staging-{gone.pid}").mkdir()
    (tmp_path / f".toolscale.staging-{gone.pid}" / "part.json").write_text("{}")
    (tmp_path / f".toolscale.staging-{os.getpid()}").mkdir()  # a stage writing right now
    (tmp_path / ".other.staging-1").mkdir()  # another output's: not ours to judge
    removed = remove_stale_staging(final)
    assert [p.name for p in removed] == [f".toolscale.staging-{gone.pid}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f".toolscale.staging-{os.getpid()}", ".other.staging-1"])
