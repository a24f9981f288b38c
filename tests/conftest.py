"""Every shared fixture lives in tests/support/fixtures.py, registered here for the whole suite."""

pytest_plugins = ["tests.support.fixtures"]
