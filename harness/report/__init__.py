"""PUBLISH: reports of one run, all rendered from the document of :mod:`harness.record.build`.

- ``view``: document + ledger history + ref sources -> the report view
- ``terminal`` (rich; also the ``timings`` table), ``jsonfile``, ``markdown``, ``junit``, ``html``
  (+ ``templates/``), ``svg`` (the history and trend strips): renderers;
  they compute nothing
- ``folder``: writes ``reports/<UTC date-time>/`` whole, records the run in
  the ledger, points ``reports/latest`` at it
"""
