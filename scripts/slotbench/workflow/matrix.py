"""A target matrix: many targets from one base and the settings that vary.

    matrix:
      - base: {name: emb, backend: llamacpp, managed: true}
        vary:
          server.cpus: {a: [0], b: [1]}     # label -> value: the label goes in the name
          server.parallel: [1, 2, 4]        # a list: each value names itself

expands to the product of the varied settings, in the order given: emb-a-parallel1,
emb-a-parallel2, emb-a-parallel4, emb-b-parallel1, … A name is the base's name, then one part
per varied key: the label of a mapping, or the key's last component and the value (characters a
file name cannot hold become "_"). The same matrix always expands to the same names, so a rep's
files stay where they were when another value is added.
"""

from __future__ import annotations

import copy
import itertools
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def _label(key: str, value) -> str:
    leaf = key.rsplit(".", 1)[-1]
    if isinstance(value, bool):
        return f"{leaf}-{'on' if value else 'off'}"
    if isinstance(value, (list, tuple)):
        value = "_".join(map(str, value))
    text = re.sub(r"^https?://", "", str(value))
    return f"{leaf}{_UNSAFE.sub('_', text).strip('_')}"


def _choices(key: str, values) -> list[tuple[str, object]]:
    """(label, value) pairs of one varied key."""
    if isinstance(values, dict):
        return [(_UNSAFE.sub("_", str(label)), value) for label, value in values.items()]
    return [(_label(key, value), value) for value in values]


def _set(target: dict, key: str, value) -> None:
    *path, leaf = key.split(".")
    node = target
    for part in path:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"{key}: {part} is not a mapping in the base target")
    node[leaf] = copy.deepcopy(value)


def expand(matrix: list[dict]) -> list[dict]:
    """The targets a (schema-valid) matrix stands for, in order."""
    targets = []
    for entry in matrix:
        vary = entry.get("vary") or {}
        keys = list(vary)
        for combo in itertools.product(*(_choices(k, vary[k]) for k in keys)):
            target = copy.deepcopy(entry["base"])
            for key, (_, value) in zip(keys, combo):
                _set(target, key, value)
            target["name"] = "-".join([entry["base"]["name"], *(label for label, _ in combo)])
            targets.append(target)
    return targets


def problems(matrix: list[dict]) -> list[str]:
    """What the schema cannot say: a varied key with no values, a label used twice."""
    found = []
    for i, entry in enumerate(matrix):
        for key, values in (entry.get("vary") or {}).items():
            where = f"config key `matrix[{i}].vary.{key}`"
            if key == "name" or key.startswith("name."):
                found.append(f"{where}: the name is made from the other keys; vary those")
            elif not values:
                found.append(f"{where}: give at least one value")
            else:
                labels = [label for label, _ in _choices(key, values)]
                dup = next((x for x in labels if labels.count(x) > 1), None)
                if dup:
                    found.append(f"{where}: two values give the same name part {dup!r}; give "
                                 "them labels (a mapping from label to value)")
    return found
