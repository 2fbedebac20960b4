"""The ledger: SQLite history of runs, its schema and migrations, the file as opened."""
