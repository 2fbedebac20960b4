"""Reports of one run, all rendered from the document of :mod:`harness.report.data`.

- ``data``: verdicts -> the verdicts document (``verdicts.json``, ``--json``)
- ``view``: document + ledger history + ref sources -> the report view
- ``terminal`` (rich), ``jsonfile``, ``markdown``, ``junit``, ``html``
  (+ ``templates/``): renderers; they compute nothing
- ``folder``: writes ``reports/<UTC date-time>/`` whole, records the run in
  the ledger, points ``reports/latest`` at it
"""
