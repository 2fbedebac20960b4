"""`run_obligations.py new ID`: scaffold a card and a witness that fails until written.

The scaffolded witness calls pytest.fail, so a new card is FAILED, never
PROVEN, until someone writes its check.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from harness.errors import UsageError
from harness.select.cards import SCHEMA_PATH, display_path, find_card_files, load_card, valid_card_id

CARD_TEMPLATE = """\
# yaml-language-server: $schema={schema}
id: {id}
title: TODO one line saying what is claimed
module: impl                # the module under proof, e.g. impl.kv
regime: N                   # N numerical, A algebraic/structural, C integrity, D decision soundness
theorem: >
  TODO: state the claim so that it could be false.
proof: >
  TODO: why it holds, citing the mechanism by symbol (list the symbols in refs).
refs: []                    # e.g. [impl/kv.py::KVCache.evict]
witnesses:
  - id: claim
    test: {test}
    # bounds: {{max_abs_delta: {{le: 0}}}}   # a tolerance above zero needs `reason:`
controls: []                # witnesses that must show a difference, e.g. bounds {{max_abs_delta: {{gt: 0}}}}
liars: []                   # wrong variants the witnesses must catch (witnesses/liars/)
version: 1
"""

WITNESS_TEMPLATE = '''\
"""Witnesses for {id} ({card}).

Record what you measure: evidence.record(key, value) once per test,
evidence.observe(key, value) once per Hypothesis example (the worst value
for each bound counts), evidence.count(key) for tallies. The card puts
bounds on those keys.
"""
import pytest


def test_claim(evidence):
    pytest.fail("{id}: witness not written yet; write {test} so it checks the theorem")
'''


def scaffold(root: Path, folder: Path, card_id: str) -> tuple[Path, str]:
    """Write the card and its witness module; returns (card path, witness path relative to root).

    Raises UsageError for a bad or taken id, or when either file exists.
    """

    if not valid_card_id(card_id):
        raise UsageError(f"id={card_id!r}: expected a letter then letters, digits, '.', '_' or '-' (e.g. KV-T9)")
    for path in find_card_files(folder):
        _, _, existing = load_card(path, root)
        if existing == card_id:
            raise UsageError(f"id={card_id!r} is already used by {display_path(path, root)}; pick another id")
    slug = re.sub(r"[^a-z0-9]+", "_", card_id.lower()).strip("_")
    card_path = folder / f"{card_id}.yaml"  # like every shipped card: KV-T2.yaml
    witness_rel = f"witnesses/test_{slug}.py"
    witness_path = root / witness_rel
    for path in (card_path, witness_path):
        if path.exists():
            raise UsageError(f"{display_path(path, root)} already exists; remove it or pick another id")
    folder.mkdir(parents=True, exist_ok=True)
    witness_path.parent.mkdir(parents=True, exist_ok=True)
    test = f"{witness_rel}::test_claim"
    schema = os.path.relpath(SCHEMA_PATH, folder)
    card_path.write_text(CARD_TEMPLATE.format(id=card_id, test=test, schema=schema), encoding="utf-8")
    witness_path.write_text(
        WITNESS_TEMPLATE.format(id=card_id, test=test, card=display_path(card_path, root)), encoding="utf-8"
    )
    return card_path, witness_rel
