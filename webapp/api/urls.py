from django.urls import path

from webapp.api import views
from webapp.api.api import api

urlpatterns = [
    path("api/", api.urls),
    path("settings/tokens/", views.tokens, name="api_tokens"),
    path("settings/tokens/<int:token_id>/revoke/", views.token_revoke, name="api_token_revoke"),
]
