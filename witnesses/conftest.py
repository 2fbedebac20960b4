pytest_plugins = ["harness.plugin", "harness.oracle.fixtures"]
