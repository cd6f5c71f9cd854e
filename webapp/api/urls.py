from django.urls import path, re_path

from webapp.api import views
from webapp.api.api import api

urlpatterns = [
    path("api/", api.urls),
    # Anything else under /api/ answers in the API's error envelope, not the site's HTML 404.
    re_path(r"^api/", views.api_not_found),
    path("settings/tokens/", views.tokens, name="api_tokens"),
    path("settings/tokens/<int:token_id>/revoke/", views.token_revoke, name="api_token_revoke"),
]
