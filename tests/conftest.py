from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.support.fixtures", "tests.support.db_fixtures",
                  "tests.support.django_fixtures", "mailout.testing.plugin"]

# Hypothesis' deadline (200 ms an example) and its too_slow health check are timings:
# on a loaded machine they fail tests that are right (test_render failed its deadline
# at 297 ms in a full suite). Examples are judged by what they return, not how fast.
settings.register_profile("mailout", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("mailout")
