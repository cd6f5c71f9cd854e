from django.apps import AppConfig


class ModelJobsConfig(AppConfig):
    name = "webapp.modeljobs"
    label = "modeljobs"
