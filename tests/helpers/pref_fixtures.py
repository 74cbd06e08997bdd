"""Test data and model doubles for the preferences tests (also used by the pipeline and CLI tests).

The doubles are `LLM` subclasses with deterministic but genuinely different behaviour, standing in
for expert models of different quality; everything around them (toolbox, experts, agent loop,
judges, ToolScale evaluation) is the real code path.
"""

from __future__ import annotations

import ast
import json
import operator
import re
import time
from pathlib import Path
from typing import Any

from toolorchestra.llm.base import LLM, Completion, Usage
from toolorchestra.llm.hermes import format_tool_call

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
FACTS = {"capital of australia": "Canberra", "capital of canada": "Ottawa", "who introduced grpo": "DeepSeekMath"}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    raise ValueError("not arithmetic")


def arithmetic(text: str) -> str | None:
    match = re.search(r"What is ([\d\s.+\-*/()]+)\?", text)
    if not match:
        return None
    try:
        value = _eval(ast.parse(match.group(1).strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None
    return str(int(value)) if float(value).is_integer() else str(value)


def _usage(messages: list[dict[str, Any]], reply: str) -> Usage:
    words = sum(len(str(m.get("content") or "").split()) for m in messages)
    return Usage(prompt_tokens=words, completion_tokens=len(reply.split()))


class _Double(LLM):
    delay_s = 0.0

    def __init__(self, model: str) -> None:
        self.model = model
        self.calls = 0

    def reply(self, messages: list[dict[str, Any]]) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        self.calls += 1
        started = time.perf_counter()
        if self.delay_s:
            time.sleep(self.delay_s)
        text = self.reply(messages)
        return Completion(text=text, usage=_usage(messages, text), latency_s=time.perf_counter() - started,
                          model=self.model)


class SmartExpert(_Double):
    """Computes arithmetic, knows a few facts, and acts in the shop domain as an agent."""

    def reply(self, messages):
        system = str(messages[0].get("content", ""))
        user = next(str(m["content"]) for m in messages if m["role"] == "user")
        if "orchestrator" in system.lower():  # used as the agent policy of a tool-use episode
            return self._agent(messages)
        answer = arithmetic(user)
        if "Python" in system:
            expr = re.search(r"What is ([\d\s.+\-*/()]+)\?", user)
            return f"```python\nprint({expr.group(1).strip()})\n```" if expr else "I cannot write code for this."
        if answer is None:
            lowered = user.lower()
            answer = next((v for k, v in FACTS.items() if k in lowered), "I do not know")
        return answer

    def _agent(self, messages):
        tool_msgs = [m for m in messages if m["role"] == "tool"]
        user = next(str(m["content"]) for m in messages if m["role"] == "user")
        if not tool_msgs:
            cid = re.search(r"\b(C\d+)\b", user)
            return format_tool_call("get_customer_details", {"id": cid.group(1) if cid else "?"})
        try:
            record = json.loads(tool_msgs[-1]["content"])
            return f"Your balance is {record['balance']}."
        except (ValueError, KeyError, TypeError):
            return "Sorry, I could not find your record."


class ConstantExpert(_Double):
    """Always says 42 (prints 42 when asked for code); never calls a tool."""

    delay_s = 0.002

    def reply(self, messages):
        system = str(messages[0].get("content", ""))
        return "```python\nprint(42)\n```" if "Python" in system else "42"


SHOP_DB = {
    "customers": {
        f"C{i}": {"id": f"C{i}", "name": f"Customer {i}", "balance": 10.5 * i, "status": "active" if i % 2 else "closed"}
        for i in range(1, 9)
    }
}


def shop_task(i: int) -> dict[str, Any]:
    return {
        "id": f"shop_{i}",
        "user_scenario": {"instructions": {
            "domain": "shop", "reason_for_call": "You want to know your balance.",
            "known_info": f"Your customer id is C{i}.", "task_instructions": "Ask for your balance."}},
        "evaluation_criteria": {
            "actions": [{"action_id": f"a{i}", "name": "get_customer_details", "arguments": {"id": f"C{i}"}}],
            "communicate_info": [str(10.5 * i)],
            "reward_basis": ["DB", "COMMUNICATE", "ACTION"],
        },
    }


QA_ROWS = [
    {"id": "qa-n1", "question": "What is 17 * 23?", "answer": "391", "answer_type": "numeric", "category": "aggregate"},
    {"id": "qa-n2", "question": "What is 12 + 30?", "answer": "42", "answer_type": "numeric", "category": "count"},
    {"id": "qa-n3", "question": "What is 100 - 1?", "answer": "99", "answer_type": "numeric", "category": "aggregate"},
    {"id": "qa-n4", "question": "What is 6 * 7 * 2?", "answer": "84", "answer_type": "numeric", "category": "count"},
    {"id": "qa-l1", "question": "What is the capital of Australia?", "answer": "Canberra",
     "answer_type": "exactMatch", "category": "lookup"},
    {"id": "qa-l2", "question": "What is the capital of Canada?", "answer": "Ottawa",
     "answer_type": "exactMatch", "category": "lookup"},
    {"id": "qa-l3", "question": "Which paper introduced GRPO? Who introduced GRPO?", "answer": "DeepSeekMath",
     "answer_type": "exactMatch", "category": "lookup"},
    {"id": "qa-l4", "question": "What is the capital of Peru?", "answer": "Lima",
     "answer_type": "exactMatch", "category": "lookup"},
]


def write_validated(root: Path, n_tasks: int = 6) -> Path:
    """A validated-data folder: `shop/{db.json,policy.md,tasks.json}` and `qa/qa.jsonl`."""
    shop = root / "shop"
    shop.mkdir(parents=True)
    (shop / "db.json").write_text(json.dumps(SHOP_DB))
    (shop / "policy.md").write_text("Only tell customers their own balance.")
    (shop / "tasks.json").write_text(json.dumps([shop_task(i) for i in range(1, n_tasks + 1)]))
    (shop / "docs.jsonl").write_text(json.dumps({"id": "d1", "title": "t", "text": "not a QA row"}) + "\n")
    (root / "qa").mkdir()
    (root / "qa" / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in QA_ROWS))
    return root


def expert_catalog_data(models: tuple[str, ...] = ("smart", "constant")) -> dict[str, Any]:
    prices = {"smart": (1.0, 4.0), "constant": (0.1, 0.1)}
    return {
        "policy": models[0],
        "models": {m: {"backend": {"kind": "local", "model": m},
                       "price": {"input_per_mtok": prices.get(m, (0.5, 0.5))[0],
                                 "output_per_mtok": prices.get(m, (0.5, 0.5))[1]},
                       "description": f"The {m} expert."} for m in models},
        "tools": [
            {"name": "code_interpreter", "kind": "code", "description": "Run Python.",
             "backend": {"type": "code_interpreter", "wall_time_s": 10}, "price": {"per_call": 0.00001}},
            {"name": "web_search", "kind": "search", "description": "Search the web.",
             "backend": {"type": "web_search"}, "price": {"per_call": 0.008}},
            {"name": "enhance_reasoning", "kind": "llm", "description": "Ask an expert to write and run code.",
             "backend": {"type": "expert", "role": "reason", "models": list(models)}},
            {"name": "answer", "kind": "llm", "description": "Ask an expert for the final answer.",
             "backend": {"type": "expert", "role": "answer", "models": list(models)}},
        ],
    }


class Scripted(LLM):
    def __init__(self, replies, model="scripted"):
        self.replies, self.model, self.seen = list(replies), model, []

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        self.seen.append(messages)
        reply = self.replies.pop(0) if self.replies else "[]"
        if isinstance(reply, Exception):
            raise reply
        return Completion(text=reply, usage=Usage(prompt_tokens=10, completion_tokens=5))


class KeywordVerifier(LLM):
    """Says YES only when an instruction with 'not'/'avoid' has a negative calls weight, or one about
    cost has a positive cost weight: a stand-in for a model that reads both."""

    model = "verifier"

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        text = messages[-1]["content"]
        instruction = text.split("Instruction: ")[1].split("\n")[0].lower()
        vector = json.loads(text.split("Weights: ")[1].split("\n")[0])
        ok = True
        if "not" in instruction or "avoid" in instruction:
            ok = any(k.startswith("calls/") and w < 0 for k, w in vector.items())
        if "cost" in instruction or "cheap" in instruction:
            ok = ok and vector.get("cost", 0) > 0
        return Completion(text="YES" if ok else "NO, the signs are wrong")


GOOD = [
    {"instruction": "Please do not use web search.", "vector": {"accuracy": 1, "calls/web_search": -1}},
    {"instruction": "Keep the cost low.", "vector": {"accuracy": 1, "cost": 0.8}},
]
BAD_SIGN = {"instruction": "Avoid the code interpreter.", "vector": {"accuracy": 1, "calls/code_interpreter": 1}}
UNKNOWN_KEY = {"instruction": "Use the calculator.", "vector": {"calls/calculator": 1}}
NOT_FINITE = {"instruction": "Be fast.", "vector": {"latency": "fast"}}
