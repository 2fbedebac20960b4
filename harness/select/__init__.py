"""SELECT: the cards a run may use, loaded, validated and resolved before anything is planned.

- ``cards``: YAML cards -> frozen :class:`Card` (schema, refs and tests
  resolved with :mod:`ast`); ``load_cards``, ``select``.
- ``problems``: what can be wrong with a card's text (line index, schema
  problems worded by :mod:`harness.schemas`, semantic checks), each a
  :class:`Problem` naming file, line, field and value.
- ``refs``: ``file::Symbol`` refs and test node ids resolved statically
  (``csource``: a C file's functions and macros, in tree-sitter's C grammar);
  ``suggest``: "did you mean".
- ``selection``: the cards a run may use (``runnable`` refuses what
  ``validate`` refuses), the equivalence marks a mutate run reads.
- ``scaffold``: ``run_obligations.py new ID``; ``schemadoc``: docs/cards.md
  from the card schema.

The liar decorator and the liar index are :mod:`harness.liars` (witnesses
import it).
"""
