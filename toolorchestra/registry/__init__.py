"""Registry: the orchestrator as an MLflow model, the promotion gate, the model card.

`bundle` (transformers weights + catalog as artifacts), `pyfunc` (the whole agent loop as a pyfunc),
`store` (log, register, aliases, decisions, download), `gate` (the champion / challenger rule),
`card` (the model card), `policy` (a registered model as a policy: `load_policy`).
"""
