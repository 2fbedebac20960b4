"""THE WIRE: what crosses the boundary between the runner and each witness process, and the witness side of it.

- ``messages``: every type that crosses the process boundary: the job plan a
  witness process reads, the events it streams back, pytest's own account.
- ``evidence``: what a witness measured (:class:`Evidence`: record, observe,
  count), the object behind the ``evidence`` fixture.
- ``safetext``: every text that reaches a report, the ledger or the terminal
  made safe (escapes, limits); guarded standard streams.
- ``linecov``: the lines of the claimed files each node runs (a mutate run's
  reachability).
- ``property_runs``: the examples each Hypothesis property ran, and its
  settings.

With :mod:`harness.plugin`, :mod:`harness.statuses` and :mod:`harness.errors`
this is all of the harness a witness process imports
(tests/test_architecture.py checks it).
"""
