import json
import os

import pytest

from toolorchestra.core.fs import atomic_write_json, atomic_write_text, replace_path, staged_dir


def test_atomic_write_leaves_no_temporaries(tmp_path):
    path = atomic_write_json(tmp_path / "a" / "x.json", {"k": [1, 2]})
    assert json.loads(path.read_text()) == {"k": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = atomic_write_text(tmp_path / "x.txt", "old")

    def boom(*a):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    monkeypatch.undo()
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_staged_dir_replaces_on_success_and_keeps_old_on_error(tmp_path):
    final = tmp_path / "out"
    with staged_dir(final) as tmp:
        (tmp / "a").write_text("1")
    assert (final / "a").read_text() == "1"
    with pytest.raises(RuntimeError), staged_dir(final) as tmp:
        (tmp / "b").write_text("2")
        raise RuntimeError("crash")
    assert sorted(p.name for p in final.iterdir()) == ["a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_path_swaps_a_non_empty_folder(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "f").write_text("old")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "g").write_text("new")
    replace_path(tmp_path / "new", tmp_path / "old")
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["g"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]


def test_a_lone_surrogate_is_written_as_an_escape_not_a_crash(tmp_path):
    import json

    from toolorchestra.core.fs import atomic_write_json, atomic_write_jsonl, json_text

    value = {"note": "bad \ud800 surrogate", "ok": "café"}
    path = atomic_write_json(tmp_path / "a.json", value)
    assert json.loads(path.read_bytes().decode("utf-8")) == value  # strict UTF-8 on disk
    assert json.loads(atomic_write_jsonl(tmp_path / "a.jsonl", [value]).read_text(encoding="utf-8")) == value
    assert json_text({"ok": "café"}) == '{"ok": "café"}'  # readable when it can be
