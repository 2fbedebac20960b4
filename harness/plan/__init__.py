"""PLAN: what will run, under which subjects, bound to which inputs, in which order.

- ``subjects``: configurations (``obligations/configurations.yaml``) probed
  into subjects; a cell is ``CARD@SUBJECT``.
- ``cells``: the subjects of a ``--matrix`` / ``--target`` run; each card
  under each subject as a cell.
- ``binding``: what each verdict is bound to: files (sha256), settings,
  environment, every file its processes read.
- ``timings``: expected process times (the ledger, else the hints file
  ``obligations/timings.json``, read and written here) for the scheduler.
- ``planning``: every output proven writable first; each cell bound, with
  the ledger's replays and times: :class:`RunPlan`.
- ``status``: ``run_obligations.py status``: each cell's last verdict, or
  STALE when a bound input changed.
- ``watching``: ``run --watch``: each card's bound files and their state
  (mtime, size); which cards a change touches.
"""
