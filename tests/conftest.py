pytest_plugins = ["tests.support.fixtures", "tests.support.db_fixtures",
                  "tests.support.django_fixtures", "mailout.testing.plugin"]

