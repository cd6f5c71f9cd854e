from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    # Browsers ask for /favicon.ico where a page names no icon (the API's JSON, say).
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/", include("webapp.accounts.urls")),
    path("admin/", admin.site.urls),
    path("", include("webapp.api.urls")),  # /api/ (REST, docs) and /settings/tokens/
    path("", include("webapp.jobs.urls")),
    path("", include("webapp.dashboard.urls")),
]
