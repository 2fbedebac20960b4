"""SELECT: cards loaded and validated, refs resolved, the runnable selection."""
