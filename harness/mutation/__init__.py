"""Mutation analysis: of the plausible slips in the code a card claims, how many would its witnesses catch?

- ``generate``: mutants, one small :mod:`ast` change to one function each,
  named by a reproducible key; also compiles one into a running process.
- ``marks``: equivalence marks (``obligations/equivalent-mutants.yaml``).
- ``score``: what a card claims, its sample of mutants, each mutant's job and
  classification, the card's score, and what no card claims.
- ``stage``: the mutate stage of a run (``run_obligations.py mutate``):
  runs the mutants in the worker pool; :func:`~harness.mutation.stage.recall`
  is what a plain run reads back instead.
"""
