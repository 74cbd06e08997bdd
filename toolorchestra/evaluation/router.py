"""A trained embedding router in the style of RouteLLM: a classifier over sentence embeddings of the
task text picks which handler (a fixed expert route, or a learned policy) runs the episode.

- `EmbeddingRouter.fit(texts, labels, embedder)`: L2-normalised embeddings (MiniLM by default,
  `tools.embeddings`) of the training tasks' text, and a multinomial logistic regression over them
  (scikit-learn). With one label only, it always answers that label (nothing to learn).
- `RoutedPolicy(router, handlers)`: a `BatchLLM` that classifies each episode by its task (the
  first user message) once, then lets that label's handler write every turn of the episode. Rows
  of one batch routed to the same handler go to it as one batch, so a local policy still batches.

The router learns only *which* handler; the handlers are what an evaluation already has
(`methods.FixedRoutePolicy` over one expert, or an orchestrator checkpoint for tasks that need
domain-tool arguments no fixed route can fill).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from toolorchestra.core.errors import ConfigError
from toolorchestra.llm.base import LLM, BatchLLM, Completion, Message, tools_by_row
from toolorchestra.tools.embeddings import Embedder


def task_text(messages: list[Message]) -> str:
    """The task an episode is about: its first user message."""
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


class EmbeddingRouter:
    """Task text -> handler label (see the module docstring)."""

    def __init__(self, embedder: Embedder, classifier: Any, labels: list[str]) -> None:
        self.embedder, self.classifier, self.labels = embedder, classifier, list(labels)

    @classmethod
    def fit(cls, texts: Sequence[str], labels: Sequence[str], embedder: Embedder, *, seed: int = 0,
            c: float = 10.0) -> EmbeddingRouter:
        """`c`: inverse regularisation; unit-norm embeddings of short texts lie close together, and
        with sklearn's default of 1 a few dozen examples collapse onto the majority label. Classes
        are weighted by their inverse frequency for the same reason (arithmetic is a minority)."""
        if len(texts) != len(labels):
            raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
        if not texts:
            raise ConfigError(None, "the embedding router needs at least one training task", key="router")
        distinct = sorted(set(labels))
        if len(distinct) == 1:  # logistic regression needs two classes; one label is a constant router
            return cls(embedder, None, distinct)
        from sklearn.linear_model import LogisticRegression

        classifier = LogisticRegression(C=c, class_weight="balanced", max_iter=1000, random_state=seed)
        classifier.fit(embedder.embed(list(texts)), list(labels))
        return cls(embedder, classifier, [str(x) for x in classifier.classes_])

    def predict(self, texts: Sequence[str]) -> list[str]:
        if not texts:
            return []
        if self.classifier is None:
            return [self.labels[0]] * len(texts)
        return [str(x) for x in self.classifier.predict(self.embedder.embed(list(texts)))]

    def accuracy(self, texts: Sequence[str], labels: Sequence[str]) -> float:
        """Share of `texts` routed to their label (e.g. on the training set: how separable it is)."""
        predicted = self.predict(texts)
        return sum(p == y for p, y in zip(predicted, labels, strict=True)) / len(predicted) if predicted else 0.0


class RoutedPolicy(BatchLLM):
    """Each episode handled by the handler its task was routed to (module docstring)."""

    def __init__(self, router: EmbeddingRouter, handlers: dict[str, LLM], *, name: str = "embedding-router") -> None:
        missing = sorted(set(router.labels) - set(handlers))
        if missing:
            raise ConfigError(None, f"the router can answer {missing} but no handler has that name; "
                              f"handlers: {sorted(handlers)}", key="router")
        self.model, self.router, self.handlers = name, router, dict(handlers)
        self.routes: dict[str, str] = {}
        """task text -> label, decided on an episode's first turn and kept for the rest of it."""

    def route(self, messages: list[Message]) -> str:
        return self.route_all([messages])[0]

    def route_all(self, batch: list[list[Message]]) -> list[str]:
        texts = [task_text(m) for m in batch]
        new = sorted({t for t in texts if t not in self.routes})
        self.routes.update(zip(new, self.router.predict(new), strict=True))
        return [self.routes[t] for t in texts]

    def count_prompt_tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
        return self.handlers[self.route(messages)].count_prompt_tokens(messages, tools)

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None, stop=None) -> list[Completion]:
        row_tools = tools_by_row(batch, tools, tools_per_row)
        rows: dict[str, list[int]] = defaultdict(list)
        for index, label in enumerate(self.route_all(batch)):
            rows[label].append(index)
        out: list[Completion | None] = [None] * len(batch)
        for label, indices in rows.items():
            replies = self.handlers[label].chat_batch([batch[i] for i in indices],
                                                      tools_per_row=[row_tools[i] for i in indices],
                                                      max_tokens=max_tokens, temperature=temperature, seed=seed,
                                                      stop=stop)
            for i, reply in zip(indices, replies, strict=True):
                out[i] = reply
        return [c for c in out if c is not None]

    def shares(self) -> dict[str, float]:
        """Share of the routed tasks each label received so far."""
        counts: dict[str, int] = defaultdict(int)
        for label in self.routes.values():
            counts[label] += 1
        total = sum(counts.values())
        return {k: v / total for k, v in sorted(counts.items())} if total else {}
