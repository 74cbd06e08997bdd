"""synthesis layer: ToolScale task and QA synthesis, evolution, filtering and validation.

`procedural` + `chain` (seeded goal-directed tasks), `evolve` (harder variants), `qa` (QA items),
`llm_synthesis` (the paper's LLM method, validated), `filters` + `expectations` + `validation`
(the `validate` stage's logic), `build` (one domain end to end), `domains/` (embedded domains).
"""
