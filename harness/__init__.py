"""harness: loads theorem cards, runs their witnesses, decides verdicts."""
