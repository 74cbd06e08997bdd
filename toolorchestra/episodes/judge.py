"""Rule-based answer judges: normalised exact match, numeric tolerance, and answer containment.

One small scorer shared by the `describe` stage (accuracy of an expert per task category), the
trainers (QA correctness) and evaluation (the paper's protocol tries exact match first and asks an
LLM judge only when it fails). No LLM here: a judgement is a pure function of the two strings.

- `judge_answer(predicted, gold)`: True when both parse as numbers that agree within a relative
  tolerance (so `391`, `391.0`, `3.91e2` and `1,000` vs `1000` match), otherwise when their
  normalised texts are equal (case, Unicode form, whitespace, thousands separators and trailing
  punctuation ignored). A number written with a unit or in a sentence (`"391 apples"`,
  `"The answer is 391."`) matches when it is the only number in the prediction.
- `contains_answer(text, gold)`: the gold answer appears in a longer text (a retrieved passage or
  a program's output), numbers as whole tokens.

>>> judge_answer("391", 391)
True
>>> judge_answer("The answer is 391.", "391")
True
>>> judge_answer("3.1416", "3.14159", rel_tol=1e-4)
True
>>> judge_answer("  Canberra. ", "canberra")
True
>>> judge_answer("42", "391")
False
>>> contains_answer("Canberra is the capital of Australia.", "Canberra")
True
>>> contains_answer("ids 13910 and 7", "391")
False
"""

from __future__ import annotations

import math
import re
from typing import Any

from toolorchestra.envs.evaluation import communicated, normalize

__all__ = ["contains_answer", "judge_answer", "parse_number"]

_NUMBER_TOKEN = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_TRAILING_PUNCT = ".,;:!?\"'`)( "


def parse_number(value: Any) -> float | None:
    """`value` as a finite float when it is exactly one number (thousands separators allowed)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(float(value)) else None
    text = str(value).strip().strip(_TRAILING_PUNCT).replace("$", "").replace("%", "")
    if not _NUMBER_TOKEN.fullmatch(text):
        return None
    try:
        out = float(text.replace(",", ""))
    except ValueError:
        return None
    return out if math.isfinite(out) else None


def _only_number(text: str) -> float | None:
    """The single number in a short free-text answer; None when there are zero or several."""
    found = _NUMBER_TOKEN.findall(text)
    return parse_number(found[0]) if len(found) == 1 else None


def _numbers_close(a: float, b: float, rel_tol: float, abs_tol: float) -> bool:
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


def judge_answer(predicted: Any, gold: Any, *, rel_tol: float = 1e-4, abs_tol: float = 1e-9) -> bool:
    """Whether `predicted` states the `gold` answer (numeric tolerance, else normalised equality)."""
    if predicted is None:
        return False
    pred_text = str(predicted).strip()
    if not pred_text:
        return False
    gold_number = parse_number(gold)
    if gold_number is not None:
        pred_number = parse_number(pred_text)
        if pred_number is None:
            pred_number = _only_number(pred_text)
        if pred_number is not None:
            return _numbers_close(pred_number, gold_number, rel_tol, abs_tol)
    return normalize(pred_text).strip(_TRAILING_PUNCT) == normalize(str(gold)).strip(_TRAILING_PUNCT)


def contains_answer(text: Any, gold: Any) -> bool:
    """Whether `gold` appears in `text` (normalised; a number only as a whole token)."""
    if text is None or str(gold).strip() == "":
        return False
    gold_number = parse_number(gold)
    said = normalize(str(text))
    if gold_number is not None and gold_number.is_integer():
        return communicated(str(int(gold_number)), said)
    return communicated(str(gold), said)
