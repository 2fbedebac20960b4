"""EXECUTE: run each card's witness processes and bring back what they reported.

Read in this order:

- ``jobs``: :class:`Job` (one pytest process: a card's honest run, or its
  witnesses under one liar or mutant), :class:`RunConfig` (how every
  process of a run starts), :class:`JobResult` (what one came back with),
  and the builders of a card's jobs.
- ``schedule``: which job starts next (longest expected chain first, the
  liar-catching witness first) and when a card's liars may run.
- ``executor``: the executor interface (where a job runs) and its events;
  knows no implementation.
- ``local`` (``-j N`` processes on this machine), ``cluster`` (Ray tasks),
  ``factory`` (a spec -> one of them); ``shipping``: the weights and the
  oracle export shipped to the Ray nodes, checked by digest on arrival.
- ``watch``: one witness process, runner side: start it, watch its
  events and timeouts, kill it, read its result.
- ``ingress``: where what a witness process wrote enters the runner (its
  event stream, pytest's account, its log tail), checked and made safe
  (:mod:`harness.wire.safetext`) before anything is judged or shown.
- ``outcomes``: a card's job results -> its witness outcomes and liar runs,
  the input of the judge (:mod:`harness.verdict`).
- ``forkserver`` (the runner's end: fork server handle, child handle),
  ``launcher`` (which fork server starts each job) and ``zygote`` (the
  zygote's end: preload once, fork per job);
  ``warm`` (a mutate run's per-card server: the witnesses imported and
  collected once, a fork per mutant).
- ``pytest_main``: the entry point inside each witness process; ``reads``:
  what of the project that process read (the verdict is bound to it too).
- ``orphans``: no process outlives the run (watchdog pipe, process trees,
  owned temp folders); ``bytecode``: before a run, bytecode that may not match its
  source is dropped (the local executor calls it).

The witness process talks back only through :mod:`harness.wire.messages`.
"""
