"""Importable test helpers (not fixtures: those stay in the `conftest.py` files).

pytest puts `tests/` on `sys.path` (`pythonpath` in pyproject.toml), so a test imports these as
`from helpers.third_party import third_party`, from any folder, without touching `sys.path`.
"""
