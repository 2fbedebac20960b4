"""RECORD: the typed run document, its builder, the run's provenance."""
