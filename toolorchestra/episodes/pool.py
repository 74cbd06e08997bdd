"""The pool of validated tasks that `describe` samples from and the training set is built on.

Two task shapes (DESIGN.md):
- **tool use**: tau2 Task JSON in a domain folder's `tasks.json`, beside the domain's `db.json`
  (and optional `tools.json`, `policy.md`);
- **QA**: JSONL rows `{id, question, answer, answer_type, category}`.

`load_pool(root)` walks a folder (e.g. `data/validated`): every `tasks.json` is a domain's task
list and every `*.jsonl` whose rows are QA items is a QA file. When the validated folder holds
only `tasks.json` and the domain's database lives elsewhere (the synthesized `data/toolscale/`),
pass that folder as `domains_root`; a domain is then found by its folder name. Every problem is a
`ConfigError` naming the file (and line for JSONL).

QA items fall into the categories the describe stage measures: `qa_arithmetic` (a calculation
stated in the question: code solves it), `qa_numeric` (a number computed over records) and
`qa_lookup` (a fact to find), from the item's `category`, else its `answer_type`, else whether
the answer is a number.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.task import Task, dump_task, load_tasks
from toolorchestra.episodes.judge import parse_number

if TYPE_CHECKING:
    from toolorchestra.envs.domain import Domain

Category = Literal["qa_arithmetic", "qa_numeric", "qa_lookup", "tool_use"]
CATEGORIES: tuple[Category, ...] = ("qa_arithmetic", "qa_numeric", "qa_lookup", "tool_use")
_NUMERIC_TYPES = {"number", "numeric", "int", "integer", "float", "decimal"}
_NUMERIC_WORDS = ("numeric", "number", "math", "arith", "compute", "calc", "aggregate", "count", "sum")
_LOOKUP_WORDS = ("lookup", "look-up", "fact", "retriev", "search", "exactmatch", "string")


class QAItem(BaseModel):
    """A QA task (HLE / FRAMES shape); unknown fields are kept."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answer: str | int | float
    answer_type: str | None = None
    category: str | None = None

    @property
    def qa_category(self) -> Category:
        return qa_category(self)

    @property
    def family(self) -> str:
        """A QA item is a family of its own (no evolution)."""
        return self.id

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def qa_category(item: QAItem) -> Category:
    """`qa_arithmetic`, `qa_numeric` or `qa_lookup`: by `category`, else `answer_type`, else the
    answer's form."""
    if (item.category or "").lower() in ("arithmetic", "calculation"):
        return "qa_arithmetic"
    for label in (item.category, item.answer_type):
        text = (label or "").lower()
        if any(w in text for w in _LOOKUP_WORDS):
            return "qa_lookup"
        if text in _NUMERIC_TYPES or any(w in text for w in _NUMERIC_WORDS):
            return "qa_numeric"
    return "qa_numeric" if parse_number(item.answer) is not None else "qa_lookup"


@dataclass(frozen=True)
class DomainRef:
    """Where a domain lives; the database is loaded on first use."""

    name: str
    folder: Path

    @cached_property
    def domain(self) -> Domain:
        from toolorchestra.envs.domain import load_domain

        return load_domain(self.folder, name=self.name)

    @property
    def policy(self) -> str | None:
        path = self.folder / "policy.md"
        return path.read_text(encoding="utf-8") if path.is_file() else None


@dataclass(frozen=True)
class ToolUseTask:
    task: Task
    domain: DomainRef

    @property
    def id(self) -> str:
        return f"{self.domain.name}/{self.task.id}"

    @property
    def family(self) -> str:
        """`<domain>/<base task id>`: the task and every task evolved from the same base task
        (`Task.family`). Splits keep a family on one side."""
        return f"{self.domain.name}/{self.task.family}"

    @property
    def required_tools(self) -> list[str]:
        """Tool names the golden actions call (the instance must offer them)."""
        return sorted({a.name for a in self.task.actions})

    def dump(self) -> dict[str, Any]:
        return dump_task(self.task)


def task_domain(item: QAItem | ToolUseTask) -> str | None:
    """The domain a task belongs to: a tool-use task's, or the `domain` a synthesized QA item names."""
    return item.domain.name if isinstance(item, ToolUseTask) else getattr(item, "domain", None)


def fits_actions(task: Task, max_actions: int | None) -> bool:
    """Whether a tool-use task can be played whole in an episode of at most `max_actions` golden
    calls (any task when None). Training and evaluation keep the same tasks by this rule."""
    return max_actions is None or len(task.actions) <= max_actions


def task_prompt(task: Task) -> str:
    """What the orchestrator is told about a tool-use task: the ticket, else the user's
    instructions (no user simulator in this project; the task is given up front)."""
    if task.ticket:
        return task.ticket
    return task.user_scenario.instructions_text()


@dataclass
class TaskPool:
    qa: list[QAItem]
    tool_use: list[ToolUseTask]

    def by_category(self) -> dict[Category, list[Any]]:
        out: dict[Category, list[Any]] = {c: [] for c in CATEGORIES}
        for item in self.qa:
            out[item.qa_category].append(item)
        out["tool_use"] = list(self.tool_use)
        return out

    def sample(self, per_category: int, seed: int) -> dict[Category, list[Any]]:
        """Up to `per_category` tasks of each category, drawn reproducibly (sorted, then sampled)."""
        rng = random.Random(seed)
        out: dict[Category, list[Any]] = {}
        for category, items in self.by_category().items():
            items = sorted(items, key=lambda x: x.id)
            out[category] = items if len(items) <= per_category else rng.sample(items, per_category)
        return out

    def __len__(self) -> int:
        return len(self.qa) + len(self.tool_use)


def load_qa_file(path: Path) -> list[QAItem]:
    items = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(path, f"line {lineno}: not JSON: {exc.msg}") from None
            try:
                items.append(QAItem.model_validate(row))
            except ValidationError as exc:
                err = exc.errors()[0]
                loc = ".".join(map(str, err["loc"])) or "<row>"
                raise ConfigError(path, f"line {lineno}: {loc}: {err['msg']} (a QA row needs id, question, answer)") from None
    return items


def _looks_like_qa(path: Path) -> bool:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    return True  # let load_qa_file report the broken line
                return isinstance(row, dict) and "question" in row and "answer" in row
    return False


def _domain_folder(tasks_file: Path, domains_root: Path | None) -> Path:
    here = tasks_file.parent
    if (here / "db.json").is_file():
        return here
    if domains_root is not None and (domains_root / here.name / "db.json").is_file():
        return domains_root / here.name
    where = f" or {domains_root / here.name}" if domains_root is not None else ""
    raise ConfigError(tasks_file, f"no db.json for this task list in {here}{where}; "
                      "pass the synthesized domains folder as domains_root")


def load_pool(root: str | Path, *, domains_root: str | Path | None = None, required: bool = False) -> TaskPool:
    """All QA items and tool-use tasks under `root` (see the module docstring); `required`: an
    empty pool is a ConfigError (a stage that samples tasks cannot run without any)."""
    root = Path(root)
    if not root.exists():
        raise ConfigError(root, "task folder does not exist (run the synthesize and validate stages first)")
    domains = Path(domains_root) if domains_root is not None else None
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    qa: list[QAItem] = []
    tool_use: list[ToolUseTask] = []
    seen: dict[str, Path] = {}
    for path in files:
        if any(part.startswith(".") for part in path.relative_to(root.parent if root.is_file() else root).parts):
            continue  # staging folders and hidden files
        if path.suffix == ".jsonl" and _looks_like_qa(path):
            for item in load_qa_file(path):
                if item.id in seen:
                    raise ConfigError(path, f"QA id {item.id!r} also appears in {seen[item.id]}; ids must be unique")
                seen[item.id] = path
                qa.append(item)
        elif path.name == "tasks.json":
            folder = _domain_folder(path, domains)
            ref = DomainRef(name=folder.name, folder=folder)
            tool_use.extend(ToolUseTask(task=t, domain=ref) for t in load_tasks(path))
    dupes = sorted(i for i, n in Counter(t.id for t in tool_use).items() if n > 1)
    if dupes:
        raise ConfigError(root, f"duplicate tool-use task ids {dupes[:5]}: each domain's task ids must be unique")
    if required and not qa and not tool_use:
        raise ConfigError(root, "no tasks found: expected domain folders with tasks.json and/or QA .jsonl "
                          "files (run the synthesize and validate stages first)")
    return TaskPool(qa=qa, tool_use=tool_use)
