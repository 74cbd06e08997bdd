"""Atomic file and folder writes.

A crash never leaves a half-written file that looks complete: content goes to a temporary
sibling first and is renamed into place (rename is atomic on one filesystem).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def json_text(obj: Any, *, indent: int | None = None) -> str:
    """JSON that is always valid UTF-8: readable non-ASCII text, except when a string holds a lone
    surrogate (model output can), which UTF-8 cannot encode: then that document is written with
    `\\uXXXX` escapes instead (still the same JSON value)."""
    text = json.dumps(obj, indent=indent, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(obj, indent=indent, ensure_ascii=True)
    return text


def atomic_write_json(path: str | Path, obj: Any, *, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json_text(obj, indent=indent) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Any) -> Path:
    return atomic_write_text(path, "".join(json_text(r) + "\n" for r in rows))


def replace_path(staged: str | Path, final: str | Path) -> Path:
    """Move a finished file or folder into place, replacing what was there.

    A folder cannot be swapped in one rename over a non-empty folder, so the old one is first
    renamed aside (one rename) and deleted only after the new one is in place.
    """
    staged, final = Path(staged), Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.is_dir() and not final.is_symlink():
        aside = final.with_name(f".{final.name}.old-{os.getpid()}")
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(final, aside)
        os.replace(staged, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(staged, final)
    return final


@contextlib.contextmanager
def staged_dir(final: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; on success it replaces `final`.

    On an exception the temporary folder is removed and `final` is left untouched.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".staging", dir=final.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_path(tmp, final)
