"""ToolScale synthesis with an LLM (the paper's method), every output parsed and validated.

Stages, each one prompt (in our own words) and a strict check of the answer:
1. `schema`   domain description -> tables, id fields, field types, enumerations;
2. `records`  per table -> records, each validated with jsonschema against the drafted schema;
              the assembled database must pass the same checks as any `db.json`;
3. `tools`    -> declarative tool specs (never code): parsed as `ToolSpec`s, bound to the database
              by the engine and smoke-tested; when none survives, tools derived from the schema
              are used instead (counted);
4. `tasks`    -> user instructions + golden calls + communicate values: the calls must replay on a
              fresh copy and every communicate value must appear in what the reads returned;
5. `evolve`   -> a harder variant of an accepted task, validated the same way and required to have
              more golden calls.

A failure (LLM error, unparsable JSON, invalid schema/record/spec/task) is counted in
`LLMSynthesisStats.failures` under `stage:reason` and never raised, so a weak model (the local
SmolLM2) runs to the end with most outputs rejected, and the statistics say so.

Usage: `result = LLMSynthesizer(llm).synthesize("a bike rental shop", name="bikes")`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolorchestra.core.errors import ConfigError, OrchestraError
from toolorchestra.envs.domain import Domain
from toolorchestra.envs.engine import Engine, ReplayError, ToolCallError
from toolorchestra.envs.evaluation import golden_state
from toolorchestra.envs.state import BaseDb
from toolorchestra.envs.task import Task
from toolorchestra.envs.toolspec import KINDS, ToolSpec, parse_spec
from toolorchestra.llm.base import LLM, LLMError

STAGES = ("schema", "records", "tools", "tasks", "evolve")
FieldType = Literal["string", "integer", "number", "boolean"]


class DraftTable(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id_field: str
    fields: dict[str, FieldType] = Field(min_length=1, max_length=30)
    enums: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("enums")
    @classmethod
    def _small(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, values in value.items():
            if not 2 <= len(values) <= 15:
                raise ValueError(f"enum {name!r} needs 2-15 values")
        return value

    def record_schema(self) -> dict[str, Any]:
        props: dict[str, Any] = {name: {"type": t} for name, t in self.fields.items()}
        for name, values in self.enums.items():
            if name in props:
                props[name]["enum"] = values
        return {"type": "object", "properties": props, "required": [self.id_field], "additionalProperties": False}


class DraftSchema(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tables: dict[str, DraftTable] = Field(min_length=1, max_length=6)

    @field_validator("tables")
    @classmethod
    def _ids(cls, value: dict[str, DraftTable]) -> dict[str, DraftTable]:
        for name, table in value.items():
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", name):
                raise ValueError(f"table name {name!r} must be snake_case")
            if table.id_field not in table.fields or table.fields[table.id_field] not in ("string", "integer"):
                raise ValueError(f"table {name!r}: id_field must be a string or integer field")
        return value


class DraftTask(BaseModel):
    model_config = ConfigDict(extra="ignore")

    reason_for_call: str = Field(min_length=5)
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str = Field(min_length=5)
    actions: list[dict[str, Any]] = Field(min_length=1, max_length=20)
    communicate_info: list[str] = Field(default_factory=list)


class LLMSynthesisStats(BaseModel):
    calls: int = 0
    accepted: dict[str, int] = Field(default_factory=dict)
    failures: dict[str, int] = Field(default_factory=dict)

    def fail(self, stage: str, reason: str) -> None:
        key = f"{stage}:{reason}"
        self.failures[key] = self.failures.get(key, 0) + 1

    def ok(self, stage: str, n: int = 1) -> None:
        self.accepted[stage] = self.accepted.get(stage, 0) + n

    def rejected(self) -> int:
        return sum(self.failures.values())


class LLMSynthesisResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    domain: Domain | None = None
    specs: list[Any] = Field(default_factory=list)
    tasks: list[Task] = Field(default_factory=list)
    stats: LLMSynthesisStats = Field(default_factory=LLMSynthesisStats)


def extract_json(text: str) -> Any:
    """The first JSON value in `text` (a fenced ```json block first); ValueError when none parses."""
    fenced = re.findall(r"```(?:json)?\s*(.*?)```", text, flags=re.S)
    for candidate in [*fenced, text]:
        decoder = json.JSONDecoder()
        for match in re.finditer(r"[\[{]", candidate):
            try:
                value, _ = decoder.raw_decode(candidate[match.start():])
                return value
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON value found")


_SPEC_HELP = (
    "Each tool is a JSON object with: name (snake_case), description, parameters (a JSON schema of "
    "type object), kind, table, and by kind: get {id_param}; find {path (list of keys), param, match: "
    "exact|contains}; list_by_ref {path, param}; update {id_param, path, value_param}; set_status "
    "{id_param, path, value, allowed_from}; create {fields: {param: path}, defaults, parent}; delete "
    "{id_param}. Every argument the operation uses must be declared in parameters."
)


class LLMSynthesizer:
    def __init__(self, llm: LLM, *, seed: int = 0, records_per_table: int = 6, tasks: int = 4,
                 evolve: int = 1, max_tokens: int = 1500, temperature: float = 0.7) -> None:
        self.llm = llm
        self.seed = seed
        self.records_per_table = records_per_table
        self.n_tasks = tasks
        self.n_evolve = evolve
        self.max_tokens = max_tokens
        self.temperature = temperature

    def _ask(self, stats: LLMSynthesisStats, stage: str, prompt: str) -> Any:
        """One call; the parsed JSON answer, or None (failure counted)."""
        messages = [
            {"role": "system", "content": f"[stage: {stage}] You design data for a customer-service "
             "simulator. Answer with one JSON value only, no prose."},
            {"role": "user", "content": prompt},
        ]
        stats.calls += 1
        try:
            completion = self.llm.chat(messages, max_tokens=self.max_tokens, temperature=self.temperature,
                                       seed=self.seed + stats.calls)
        except LLMError:
            stats.fail(stage, "llm_error")
            return None
        try:
            return extract_json(completion.text)
        except ValueError:
            stats.fail(stage, "not_json")
            return None

    # -- stages
    def draft_schema(self, stats: LLMSynthesisStats, description: str) -> DraftSchema | None:
        data = self._ask(stats, "schema", (
            f"Invent the database of this business: {description}. Give 2-4 tables as "
            '{"tables": {"<snake_case_table>": {"id_field": "<field>", "fields": {"<field>": '
            '"string|integer|number|boolean"}, "enums": {"<field>": ["<value>", ...]}}}}. Include a '
            "status field with an enumeration in at least one table and a field that holds the id of "
            "a record of another table."))
        if data is None:
            return None
        try:
            schema = DraftSchema.model_validate(data)
        except ValidationError as exc:
            stats.fail("schema", "invalid:" + str(exc.errors()[0]["loc"][:1]).strip("(),'"))
            return None
        stats.ok("schema")
        return schema

    def draft_records(self, stats: LLMSynthesisStats, schema: DraftSchema, description: str) -> dict[str, Any]:
        db: dict[str, Any] = {}
        for name, table in schema.tables.items():
            data = self._ask(stats, "records", (
                f"Business: {description}. Write {self.records_per_table} realistic records of table "
                f"{name!r} as a JSON list. Fields and types: {json.dumps(table.fields)}; allowed values: "
                f"{json.dumps(table.enums)}; {table.id_field!r} is a unique id. Other tables and their "
                f"ids: {json.dumps({t: list(v)[:5] for t, v in db.items()})}."))
            if not isinstance(data, list):
                if data is not None:
                    stats.fail("records", "not_a_list")
                continue
            validator = Draft202012Validator(table.record_schema())
            records: dict[Any, Any] = {}
            for rec in data:
                if not isinstance(rec, dict) or next(validator.iter_errors(rec), None) is not None:
                    stats.fail("records", "invalid_record")
                elif rec[table.id_field] in records:
                    stats.fail("records", "duplicate_id")
                else:
                    records[rec[table.id_field]] = rec
            if len(records) >= 2:
                db[name] = {str(k): v for k, v in records.items()}
                stats.ok("records", len(records))
            else:
                stats.fail("records", "too_few_records")
        return db

    def draft_tools(self, stats: LLMSynthesisStats, domain: Domain, description: str) -> list[ToolSpec]:
        data = self._ask(stats, "tools", (
            f"Business: {description}. Database tables and one sample record each: "
            f"{json.dumps({t: next(iter(v.values())) for t, v in domain.db.items()}, default=str)[:3000]}. "
            f"Write 4-10 tools a support agent needs, as a JSON list. Allowed kinds: {list(KINDS)}. "
            + _SPEC_HELP))
        specs: list[ToolSpec] = []
        if isinstance(data, list):
            for item in data:
                try:
                    spec = parse_spec(item, source="llm:tools")
                    engine = Engine([spec], domain.layouts)
                except ConfigError:
                    stats.fail("tools", "invalid_spec")
                    continue
                if spec.name in {s.name for s in specs}:
                    stats.fail("tools", "duplicate_name")
                    continue
                if spec.kind == "get" and not self._smoke(engine, domain, spec):
                    stats.fail("tools", "smoke_test")
                    continue
                specs.append(spec)
        elif data is not None:
            stats.fail("tools", "not_a_list")
        if specs:
            stats.ok("tools", len(specs))
            return specs
        stats.fail("tools", "fallback_derived")
        return domain.tool_specs()

    @staticmethod
    def _smoke(engine: Engine, domain: Domain, spec: Any) -> bool:
        rid = next(iter(domain.db[spec.table]), None)
        try:
            engine.call(engine.fresh_state(domain.db), spec.name, {spec.id_param: rid})
            return True
        except ToolCallError:
            return False

    def _task(self, stats: LLMSynthesisStats, stage: str, data: Any, engine: Engine, base: BaseDb,
              domain: str, task_id: str) -> Task | None:
        if data is None:
            return None
        try:
            draft = DraftTask.model_validate(data)
            task = Task.model_validate({
                "id": task_id,
                "description": {"purpose": f"ToolScale task synthesized by an LLM ({stage})"},
                "user_scenario": {"instructions": {
                    "domain": domain, "reason_for_call": draft.reason_for_call, "known_info": draft.known_info,
                    "unknown_info": draft.unknown_info, "task_instructions": draft.task_instructions}},
                "evaluation_criteria": {
                    "actions": [{"action_id": f"a{i}", "name": a.get("name"), "arguments": a.get("arguments", {})}
                                for i, a in enumerate(draft.actions)],
                    "communicate_info": [str(c) for c in draft.communicate_info],
                    "reward_basis": ["DB", "ACTION", "COMMUNICATE"] if draft.communicate_info else ["DB", "ACTION"]},
            })
        except ValidationError:
            stats.fail(stage, "invalid_task")
            return None
        try:
            _, results = golden_state(engine, base, task)
        except ReplayError:
            stats.fail(stage, "replay_error")
            return None
        seen = json.dumps(results, default=str).casefold()
        if any(c.casefold() not in seen for c in task.communicate_info):
            stats.fail(stage, "communicate_not_in_reads")
            return None
        return task

    def synthesize(self, description: str, *, name: str) -> LLMSynthesisResult:
        result = LLMSynthesisResult(name=name)
        stats = result.stats
        schema = self.draft_schema(stats, description)
        if schema is None:
            return result
        db = self.draft_records(stats, schema, description)
        if not db:
            stats.fail("records", "empty_database")
            return result
        try:
            domain = Domain(name, db, policy=f"# {name}\n\n{description}\n")
            _ = domain.schema
        except (ConfigError, OrchestraError):
            stats.fail("records", "invalid_database")
            return result
        result.domain = domain
        specs = self.draft_tools(stats, domain, description)
        result.specs = specs
        engine = Engine(specs, domain.layouts)
        base = BaseDb(domain.db, domain.layouts)
        tool_list = [{"name": s.name, "description": s.description, "parameters": s.parameters.get("properties", {})}
                     for s in specs]
        for i in range(self.n_tasks):
            data = self._ask(stats, "tasks", (
                f"Business: {description}. Tools: {json.dumps(tool_list)[:3000]}. Records: "
                f"{json.dumps(db, default=str)[:2500]}. Write one support task as {{\"reason_for_call\", "
                '"known_info", "unknown_info", "task_instructions", "actions": [{"name", "arguments"}], '
                '"communicate_info": [values the agent must tell the user, copied from what the tools return]}. '
                "Use only these tools and ids that exist."))
            task = self._task(stats, "tasks", data, engine, base, name, f"{name}-llm-{i:04d}")
            if task is not None:
                result.tasks.append(task)
                stats.ok("tasks")
        for task in list(result.tasks)[: self.n_evolve]:
            data = self._ask(stats, "evolve", (
                "Make this support task harder: add a step, a condition or another value to report, "
                "keeping it solvable with the same tools. Same JSON shape as the input. Task: "
                + json.dumps({**task.user_scenario.instructions.model_dump(exclude={"domain"}),  # type: ignore[union-attr]
                              "actions": [{"name": a.name, "arguments": a.arguments} for a in task.actions],
                              "communicate_info": task.communicate_info})))
            harder = self._task(stats, "evolve", data, engine, base, name, f"{task.id}-e1")
            if harder is not None and len(harder.actions) <= len(task.actions):
                stats.fail("evolve", "not_harder")
            elif harder is not None:
                result.tasks.append(harder)
                stats.ok("evolve")
        return result
