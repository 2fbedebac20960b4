"""Mutation analysis: of the plausible slips in the code a card claims, how many would its witnesses catch?

- ``keys``: a mutant's key (``path:line:col:operator``) and change, shared by both languages.
- ``generate``: Python mutants, one small :mod:`ast` change to one function each,
  named by a reproducible key; ``cgen``: C mutants, one token change to one C
  function or function-like macro each (tree-sitter's C grammar).
- ``cbuild``: C mutants built before they run, through the project's build
  hook: one that does not compile is error, one that compiles to the unchanged
  bytes equivalent; neither runs.
- ``swap``: applying one in a running witness process, as a liar is applied.
- ``marks``: equivalence marks (``obligations/equivalent-mutants.yaml``).
- ``score``: what a card claims, its sample of mutants, each mutant's job and
  classification, the card's score, and what no card claims.
- ``sample``: what a score was measured on (which mutants were drawn, how they
  were judged); only a score on the floor's own sample judges a ``min_score``.
- ``reach``: the honest run's line coverage -> mutants no witness reaches
  (never run), the witnesses that can tell each mutant apart, who to try first.
- ``pool``: running them in the worker pool: witnesses killer-first as each
  job starts, results and follow-ups as each ends.
- ``stage``: the mutate stage of a run (``run_obligations.py mutate``):
  runs the mutants in the worker pool, each forked from its card's warm
  server (:mod:`harness.execute.warm`) when a fork can stand for a fresh
  process.
- ``recall``: each card's score read back from the ledger and judged for the
  card as it is now (what planning a plain run reads instead).
"""
