from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "webapp.dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from webapp.dashboard import signals  # noqa: F401  (connects the board receiver)
