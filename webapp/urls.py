from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/", include("webapp.accounts.urls")),
    path("admin/", admin.site.urls),
    path("", include("webapp.api.urls")),  # /api/ (REST, docs) and /settings/tokens/
    path("", include("webapp.jobs.urls")),
    path("", include("webapp.dashboard.urls")),
]
