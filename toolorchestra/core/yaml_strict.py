"""YAML that refuses a key written twice in one mapping.

PyYAML's `safe_load` keeps the last of duplicate keys silently, so `db_size: 40` further down a
section would quietly win over an earlier value; `strict_load` raises a `yaml.MarkedYAMLError`
naming the key and its line instead (callers report it like any other YAML error).
"""

from __future__ import annotations

from typing import Any

import yaml


class _StrictLoader(yaml.SafeLoader):
    pass


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark,
                f"duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})", key_node.start_mark)
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def strict_load(text: str) -> Any:
    """`yaml.safe_load`, except that a duplicate key in a mapping is an error."""
    return yaml.load(text, Loader=_StrictLoader)
