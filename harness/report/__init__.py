"""PUBLISH: reports of one run, all rendered from the document of :mod:`harness.record.build`.

- ``data``: verdicts -> the run document (``verdicts.json``, ``--json``)
- ``view``: document + ledger history + ref sources -> the report view
- ``terminal`` (rich), ``jsonfile``, ``markdown``, ``junit``, ``html``
  (+ ``templates/``), ``svg`` (the history and trend strips): renderers;
  they compute nothing
- ``changes``: the comparison of two runs (:mod:`harness.compare.diff`) as
  terminal, Markdown and HTML
- ``folder``: writes ``reports/<UTC date-time>/`` whole, records the run in
  the ledger, points ``reports/latest`` at it
"""
