"""Judges: was an episode's outcome right? The paper's protocol, on top of the shared scorer.

Correctness comes first from `toolorchestra.episodes.environment.score_rollout`, the one scorer training
and evaluation share:

- **tool-use tasks**: ToolScale's three criteria (execution correctness: database hash;
  process fidelity: communicated values; operation completeness: golden actions);
- **QA tasks**: the rule-based answer judge (`episodes.judge.judge_answer`): numeric tolerance
  when the gold answer is a number, else normalised exact match.

Only when that says *wrong* on a QA task that was answered, and an LLM judge is configured
(`LLMJudge` on a catalog model or any OpenAI-compatible endpoint), the judge model is asked
whether the answer is equivalent to the gold one (as HLE and FRAMES grade). Its verdict and raw
reply are part of the `Judgement`, stored with the trajectory in the per-task results.

>>> rule_method("391")
'numeric'
>>> rule_method("Canberra")
'exact'
>>> exact_match(" Canberra. ", "canberra"), numeric_match("3.91e2", "391")
(True, True)
>>> parse_verdict("Yes, the response matches.")
True
>>> parse_verdict("correct: no") is False
True
>>> parse_verdict("maybe") is None
True
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings
from toolorchestra.envs.evaluation import normalize
from toolorchestra.episodes.judge import judge_answer, parse_number
from toolorchestra.llm.base import LLM, LLMError
from toolorchestra.llm.config import LLMConfig, LocalEngine
from toolorchestra.tools.catalog import Catalog

__all__ = ["Judgement", "LLMJudge", "exact_match", "numeric_match", "parse_verdict", "rule_method"]

JUDGE_PROMPT = (
    "You grade answers. Decide whether the response gives the same final answer as the correct "
    "answer. Equivalent forms count as the same (units, formatting, rounding within the precision "
    "of the correct answer, synonyms, a full name for a surname). A response that hedges between "
    "several answers, or has no final answer, is wrong.\n\n"
    "Question: {question}\nCorrect answer: {gold}\nResponse: {answer}\n\n"
    "Reply with one word: yes (the response is correct) or no."
)
_PUNCT = ".,;:!?\"'`)( "
_FIELD = re.compile(r"\bcorrect\s*:\s*(yes|no)\b", re.I)
_VERDICT = re.compile(r"\b(yes|no|correct|incorrect)\b", re.I)


class Judgement(BaseModel):
    """How a task's outcome was judged; stored with its trajectory."""

    correct: bool
    method: Literal["toolscale", "numeric", "exact", "llm", "none"]
    details: dict[str, Any] = Field(default_factory=dict)
    rule_correct: bool = Field(description="the shared rule-based scorer's verdict")
    llm_reply: str | None = None
    error: str | None = None


def _normalised(value: Any) -> str:
    return normalize(str(value).strip()).strip(_PUNCT)


def exact_match(predicted: Any, gold: Any) -> bool:
    """Normalised exact match (case, Unicode form, spacing, thousands separators, trailing
    punctuation), the text branch of the shared judge."""
    if predicted is None or not str(predicted).strip():
        return False
    return _normalised(predicted) == _normalised(gold)


def numeric_match(predicted: Any, gold: Any, *, rel_tol: float = 1e-4) -> bool:
    """Both are numbers (the prediction may be a sentence with a single number) within `rel_tol`."""
    return parse_number(gold) is not None and judge_answer(predicted, gold, rel_tol=rel_tol)


def rule_method(gold: Any) -> Literal["numeric", "exact"]:
    """Which rule the shared QA judge applies to this gold answer."""
    return "numeric" if parse_number(gold) is not None else "exact"


def parse_verdict(text: str) -> bool | None:
    """The judge's verdict: HLE's `correct: yes|no` field when present, else the first yes/no (or
    correct/incorrect) word; None if there is none."""
    field = _FIELD.search(text or "")
    if field is not None:
        return field.group(1).lower() == "yes"
    match = _VERDICT.search(text or "")
    if match is None:
        return None
    return match.group(1).lower() in ("yes", "correct")


class LLMJudge:
    """An LLM asked whether an answer equals the gold one; used only after exact match failed."""

    def __init__(self, llm: LLM, *, max_tokens: int = 8, name: str | None = None) -> None:
        self.llm, self.max_tokens = llm, max_tokens
        self.name = name or llm.model

    def __call__(self, question: str, answer: str, gold: Any) -> tuple[bool, str, str | None]:
        """(correct, raw reply, error). An endpoint failure or an unreadable reply counts as wrong."""
        prompt = JUDGE_PROMPT.format(question=question, gold=gold, answer=answer)
        try:
            reply = self.llm.chat([{"role": "user", "content": prompt}], max_tokens=self.max_tokens, temperature=0.0)
        except LLMError as exc:
            return False, "", f"judge {self.name} failed: {exc}"
        verdict = parse_verdict(reply.text)
        if verdict is None:
            return False, reply.text, f"judge {self.name} gave no yes/no verdict"
        return verdict, reply.text, None


def judge_qa(question: str, answer: str | None, gold: Any, *, rule_correct: bool,
             llm_judge: LLMJudge | None) -> Judgement:
    """The protocol for one QA episode: the shared rule first, the LLM judge only when it failed
    on an answered task."""
    method = rule_method(gold)
    if rule_correct:
        return Judgement(correct=True, method=method, rule_correct=True, details={"gold": gold, "answer": answer})
    if not (answer or "").strip():
        return Judgement(correct=False, method="none", rule_correct=False, details={"gold": gold, "answer": answer})
    if llm_judge is None:
        return Judgement(correct=False, method=method, rule_correct=False, details={"gold": gold, "answer": answer})
    correct, reply, error = llm_judge(question, answer or "", gold)
    return Judgement(correct=correct, method="llm", rule_correct=False, llm_reply=reply, error=error,
                     details={"gold": gold, "answer": answer, "judge": llm_judge.name})


def judge_tool_use(correct: bool, details: dict[str, Any]) -> Judgement:
    """A tool-use episode's judgement from the shared scorer's three criteria."""
    return Judgement(correct=correct, method="toolscale", rule_correct=correct, details=details)


class JudgeConfig(BaseModel):
    """The LLM judge used when exact match fails: a catalog model alias or an explicit endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    backend: LLMConfig | None = None
    max_tokens: int = Field(8, ge=1, le=32_768)

    @model_validator(mode="after")
    def _one(self) -> JudgeConfig:
        if self.model and self.backend:
            raise ValueError("judge: give either `model` (a catalog alias) or `backend` (an endpoint), not both")
        return self


def build_judge(config: JudgeConfig, catalog: Catalog, settings: Settings, llm_for: Callable[[str], LLM], *,
                engine: LocalEngine | None = None) -> LLMJudge | None:
    """The configured LLM judge, or None (rules only); `engine` as in `llm.config.on_engine`."""
    from toolorchestra.llm.config import build_llm, on_engine

    if config.model:
        if config.model not in catalog.models:
            raise ConfigError(None, f"judge model {config.model!r} is not a catalog model alias; known: "
                              f"{sorted(catalog.models)}", key="evaluate.judge.model")
        return LLMJudge(llm_for(config.model), max_tokens=config.max_tokens, name=config.model)
    if config.backend is not None:
        return LLMJudge(build_llm(on_engine(config.backend, engine), settings), max_tokens=config.max_tokens)
    return None
