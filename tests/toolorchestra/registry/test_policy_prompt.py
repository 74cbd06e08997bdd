"""The prompt a registered policy is served with is the one it was trained with (`policy_prompt`)."""

from __future__ import annotations

from helpers.eval_fixtures import ScriptedLLM

from toolorchestra.agent.loop import PRICES_IN_TASK, SYSTEM_PROMPT, Orchestrator
from toolorchestra.registry.policy import policy_prompt
from toolorchestra.tools.catalog import load_embedded_catalog
from toolorchestra.tools.toolbox import Toolbox


def test_a_checkpoint_trained_with_prices_in_the_task_gets_them_in_the_user_turn():
    catalog = load_embedded_catalog()
    system, prices = policy_prompt(catalog, {"name": "orchestrator", "prompt_layout": PRICES_IN_TASK},
                                   ["code_interpreter"])
    assert system == SYSTEM_PROMPT and prices == "Prices of your tools (USD):\n- code_interpreter: $1e-05/call + $5e-05/s"
    llm = ScriptedLLM("42")
    Orchestrator(llm, Toolbox([]), system_prompt=system, prices=prices).run("What is 6 * 7?")
    assert [m["content"] for m in llm.prompts[0][:2]] == [SYSTEM_PROMPT, f"{prices}\n\nWhat is 6 * 7?"]


def test_a_checkpoint_from_before_the_layout_key_keeps_the_sheet_in_its_system_prompt():
    # checkpoints registered before 2026-12-04 were trained with the sheet closing the system prompt
    catalog = load_embedded_catalog()
    system, prices = policy_prompt(catalog, {"name": "orchestrator", "system_prompt": "Be brief."}, ["local_search"])
    assert prices is None and system == "Be brief.\n\nPrices of your tools (USD):\n- local_search: $1e-05/call"
    # a policy with no manifest at all (an endpoint, the prompted base) gets today's layout
    assert policy_prompt(catalog, {}, ["local_search"])[1] is not None
