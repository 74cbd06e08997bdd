"""The embedding router: a classifier over task embeddings, and the policy that hands each episode to
the handler its task was routed to (a bag-of-words embedder stands in for MiniLM)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.eval_fixtures import ScriptedLLM

from toolorchestra.core.errors import ConfigError
from toolorchestra.evaluation.router import EmbeddingRouter, RoutedPolicy
from toolorchestra.tools.embeddings import Embedder

VOCAB = ["sum", "total", "add", "member", "loan", "book", "email"]


class WordsEmbedder(Embedder):
    """Counts of a few words: separable enough for a linear classifier, and no model to load."""

    texts_embedded = 0

    @property
    def identity(self) -> str:
        return "words"

    @property
    def batch_size(self) -> int:
        return 8

    def _embed_batch(self, texts):
        return np.array([[t.lower().count(w) + 0.01 for w in VOCAB] for t in texts], dtype=np.float32)


TRAIN = [("What is the sum of 3 and 4?", "code"), ("Add up the total of 10 and 12.", "code"),
         ("What is the total sum of 7 and 8?", "code"), ("Renew the loan of member M1's book.", "policy"),
         ("Update the email of member M2.", "policy"), ("Return the book on loan for member M3.", "policy")]


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "you route"}, {"role": "user", "content": text}]


def test_the_router_learns_which_handler_a_task_needs():
    router = EmbeddingRouter.fit([t for t, _ in TRAIN], [y for _, y in TRAIN], WordsEmbedder())
    assert router.labels == ["code", "policy"]
    assert router.accuracy([t for t, _ in TRAIN], [y for _, y in TRAIN]) == 1.0
    assert router.predict(["What is the sum of 1 and 2?", "Change the email of member M9."]) == ["code", "policy"]


def test_one_label_is_a_constant_router_and_empty_input_is_an_error():
    router = EmbeddingRouter.fit(["a", "b"], ["policy", "policy"], WordsEmbedder())
    assert router.predict(["anything"]) == ["policy"]
    with pytest.raises(ConfigError):
        EmbeddingRouter.fit([], [], WordsEmbedder())


def test_the_routed_policy_sends_each_episode_to_its_handler_for_every_turn():
    router = EmbeddingRouter.fit([t for t, _ in TRAIN], [y for _, y in TRAIN], WordsEmbedder())
    code, policy = ScriptedLLM("from code"), ScriptedLLM("from policy")
    routed = RoutedPolicy(router, {"code": code, "policy": policy})
    batch = [_user("What is the sum of 2 and 2?"), _user("Update the email of member M4."),
             _user("Add the total of 5 and 6.")]
    replies = routed.chat_batch(batch, tools=[{"type": "function", "function": {"name": "x"}}])
    assert [r.text for r in replies] == ["from code", "from policy", "from code"]
    later = [*batch[1], {"role": "assistant", "content": "a call"}, {"role": "tool", "content": "sum total add"}]
    assert routed.chat_batch([later])[0].text == "from policy"  # routed by its task, not by the latest turn
    assert routed.shares() == pytest.approx({"code": 2 / 3, "policy": 1 / 3})
    assert code.calls == 2 and policy.calls == 2


def test_a_label_without_a_handler_is_refused():
    router = EmbeddingRouter.fit([t for t, _ in TRAIN], [y for _, y in TRAIN], WordsEmbedder())
    with pytest.raises(ConfigError, match="no handler"):
        RoutedPolicy(router, {"code": ScriptedLLM()})
