from django.urls import path

from webapp.jobs.consumers import JobConsumer

websocket_urlpatterns = [path("ws/jobs/<uuid:job_id>/", JobConsumer.as_asgi())]
