import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.support.fixtures", "tests.support.db_fixtures",
                  "tests.support.django_fixtures", "mailout.testing.plugin"]

# Hypothesis' deadline (200 ms an example) and its too_slow health check are timings:
# on a loaded machine they fail tests that are right (test_render failed its deadline
# at 297 ms in a full suite). Examples are judged by what they return, not how fast.
settings.register_profile("mailout", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mailout")

# pytest-timeout's limit (pyproject: 300 s) guards against a hang. A test marked slow
# (seconds of processes and servers unloaded) can take minutes on a loaded machine
# (test_bounces: 149 s at load 12), so its guard is longer; a test's own timeout
# marker still wins.
SLOW_TIMEOUT = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


# The console keeps a made secret and ended sessions in a state directory (default
# ~/.local/state/mailout): the tests', and the processes they start, use their own.
os.environ.setdefault("MAILOUT_WEB_STATE_DIR", tempfile.mkdtemp(prefix="mailout-web-state-"))
