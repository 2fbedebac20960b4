pytest_plugins = ["harness.plugin", "harness.targets.fixture"]  # the evidence and kv_target fixtures
