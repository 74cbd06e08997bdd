"""envs layer: domain environments run from data.

`task` (tau2 Task model), `domain` + `layout` + `schema` (load a domain folder, infer its schema),
`toolspec` + `derive` (declarative tool specs and their derivation), `state` (copy-on-write state,
incremental hash), `engine` (the one engine that runs specs), `evaluation` (the three criteria),
`domain_tools` (a live environment's tools as agent `Tool`s).
"""
