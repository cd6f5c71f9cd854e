from django.apps import AppConfig


class EmbeddedConfig(AppConfig):
    """`manage.py up`: the whole product on one machine (SQLite, Redis, workers, ASGI server)."""

    name = "webapp.embedded"
    label = "embedded"
