"""The examples' tests run on the suite's fixtures (databases, SMTP server, the test
Django project's set-up), also when examples/ is run alone."""

pytest_plugins = ["tests.support.fixtures", "tests.support.db_fixtures",
                  "tests.support.django_fixtures"]
