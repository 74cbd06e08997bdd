"""The third-party test data beside the checkout (../shared/data), skipped cleanly when absent."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TOOLSCALE = ["bank", "basketball", "ecommerce", "medicine", "movie", "restaurant", "travel"]


def shared_or_skip(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"third-party test data {path} is absent (see ../shared/data/README.md)")
    return path
