"""A content hash of a model checkpoint's weight files (equal hashes: the same model)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from toolorchestra.core.errors import ConfigError


def weights_sha256(checkpoint: str | Path) -> str:
    """A hash of a checkpoint's weight files: equal hashes mean the same model."""
    folder = Path(checkpoint)
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    if not files:
        raise ConfigError(folder, "no weight files (*.safetensors) in the checkpoint")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
