"""The vendored third-party databases (`third_party/` at the repository root; see its README)."""

from __future__ import annotations

from pathlib import Path

THIRD_PARTY = Path(__file__).resolve().parents[2] / "third_party"
TOOLSCALE = ["bank", "basketball", "ecommerce", "medicine", "movie", "restaurant", "travel"]
"""The seven ToolScale domains under `third_party/toolscale/`."""


def third_party(*parts: str) -> Path:
    """`third_party/<parts...>`; a missing path is a broken checkout, so it fails (never skips)."""
    path = THIRD_PARTY.joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path}: vendored test data is missing (see third_party/README.md)")
    return path


def domain_folder(name: str) -> Path:
    """The folder of a vendored domain: `tau2-mock`, or one of `TOOLSCALE`."""
    return third_party("tau2-mock") if name == "tau2-mock" else third_party("toolscale", name)
