"""The wire between the runner and each witness process, and the witness side of it."""
