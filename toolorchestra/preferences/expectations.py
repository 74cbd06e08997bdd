"""Great Expectations suite on preference pairs: the gate before a split is written.

Two tables are checked, built from raw pair rows (dicts as generated, proposed or read from a
file, before any model validation, so a broken row is reported rather than rejected silently):

- **pairs** (one row per pair): ids unique and present; instruction non-empty and at most
  `max_instruction_chars` long; the normalised instruction (case and spacing ignored) unique, so
  there are no duplicates; at least one weight per vector; a known kind.
- **weights** (one row per pair and key): every key is `accuracy`, `cost`, `latency`,
  `calls/<tool>` for a tool or `models/<alias>` for a model of the catalog in use; every weight present and finite (within
  +-`max_abs_weight`; NaN reads as missing, infinity as out of range).

`validate_pair_rows(rows, tools, models=...)` returns a `SuiteReport`; `raise_on_failure` turns failing
expectations into one `OrchestraError` listing them with examples. great_expectations is imported
lazily (it costs seconds) and runs in an ephemeral context: nothing is written to the repository.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from toolorchestra.core.errors import OrchestraError
from toolorchestra.preferences.pairs import known_keys, normalise_instruction


class PreferenceSuiteError(OrchestraError):
    """The preference pairs failed their Great Expectations suite."""


class SuiteReport(BaseModel):
    success: bool
    evaluated: int
    failures: list[str] = Field(default_factory=list)


def _weight(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # a string or null weight: reported as missing
    return float(value)


def tables(rows: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(pairs table, weights table) from raw pair rows."""
    pairs, weights = [], []
    for row in rows:
        instruction = row.get("instruction")
        text = instruction if isinstance(instruction, str) else ""
        vector = row.get("vector") if isinstance(row.get("vector"), dict) else {}
        pairs.append({
            "id": row.get("id"),
            "instruction": text,
            "instruction_norm": normalise_instruction(text) if text.strip() else None,
            "n_keys": len(vector),
            "kind": row.get("kind"),
        })
        weights.extend({"pair_id": row.get("id"), "key": str(k), "weight": _weight(w)} for k, w in vector.items())
    return pairs, weights


def _failure(result: Any, table: str) -> str:
    config = result.expectation_config
    column = config.kwargs.get("column", "")
    examples = result.result.get("partial_unexpected_list") or []
    shown = ", ".join(repr(None if isinstance(x, float) and math.isnan(x) else x) for x in examples[:5])
    count = result.result.get("unexpected_count")
    return f"{table}.{column}: {config.type} failed ({count} unexpected; e.g. {shown})"


def validate_pair_rows(rows: list[dict[str, Any]], tools: Iterable[str], *, kinds: Iterable[str],
                       models: Iterable[str] = (), max_instruction_chars: int = 500,
                       max_abs_weight: float = 1e3) -> SuiteReport:
    """Run the suite on raw pair rows for a catalog with `tools` and `models` (aliases); see the
    module docstring."""
    import great_expectations as gx
    import pandas as pd
    from great_expectations.data_context.types.base import ProgressBarsConfig

    pairs, weights = tables(rows)
    allowed = sorted(known_keys(tools, models))
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_pandas("preferences")
    E = gx.expectations
    suites = {
        "pairs": (pd.DataFrame(pairs, columns=["id", "instruction", "instruction_norm", "n_keys", "kind"]), [
            E.ExpectColumnValuesToNotBeNull(column="id"),
            E.ExpectColumnValuesToBeUnique(column="id"),
            E.ExpectColumnValuesToNotBeNull(column="instruction_norm"),
            E.ExpectColumnValueLengthsToBeBetween(column="instruction", min_value=1, max_value=max_instruction_chars),
            E.ExpectColumnValuesToBeUnique(column="instruction_norm"),
            E.ExpectColumnValuesToBeBetween(column="n_keys", min_value=1),
            E.ExpectColumnValuesToBeInSet(column="kind", value_set=sorted(set(kinds))),
        ]),
        "weights": (pd.DataFrame(weights, columns=["pair_id", "key", "weight"]).astype({"weight": "float64"}), [
            E.ExpectColumnValuesToBeInSet(column="key", value_set=allowed),
            E.ExpectColumnValuesToNotBeNull(column="weight"),
            E.ExpectColumnValuesToBeBetween(column="weight", min_value=-max_abs_weight, max_value=max_abs_weight),
        ]),
    }
    failures: list[str] = []
    evaluated = 0
    for name, (frame, expectations) in suites.items():
        asset = source.add_dataframe_asset(name)
        batch = asset.add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": frame})
        suite = gx.ExpectationSuite(name=f"preferences_{name}")
        for expectation in expectations:
            suite.add_expectation(expectation)
        result = batch.validate(suite, result_format="SUMMARY")
        evaluated += len(result.results)
        failures.extend(_failure(r, name) for r in result.results if not r.success)
    return SuiteReport(success=not failures, evaluated=evaluated, failures=failures)


def raise_on_failure(report: SuiteReport) -> None:
    if not report.success:
        raise PreferenceSuiteError(
            f"preference pairs failed {len(report.failures)} of {report.evaluated} expectations: "
            + "; ".join(report.failures))
