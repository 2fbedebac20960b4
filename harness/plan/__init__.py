"""PLAN: subjects and cells, binding, timings, the run plan; `status`."""
