"""ASGI entry: HTTP to Django, websockets to the job consumer behind auth and an origin check."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
# Django must be set up before the consumers (and their models) are imported.
django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from webapp.jobs.routing import websocket_urlpatterns  # noqa: E402

# Import every view now (the downloads builder brings torch), not on the first request: the
# server starts listening only once it can answer at once (`up` waits for the port).
get_resolver().url_patterns  # noqa: B018

http_application = (
    ASGIStaticFilesHandler(django_application) if settings.KF_SERVE_STATIC else django_application
)

application = ProtocolTypeRouter(
    {
        "http": http_application,
        # Websockets carry the user's cookies, so check the Origin (cross-site hijacking).
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
