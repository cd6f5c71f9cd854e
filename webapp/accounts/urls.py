from django.urls import path

from webapp.accounts import views

app_name = "accounts"

urlpatterns = [
    path("signup/", views.signup, name="signup"),
    path("teams/", views.teams, name="teams"),
    path("teams/<slug:slug>/", views.team_detail, name="team"),
    path("teams/<slug:slug>/invite/", views.invitation_new, name="invite"),
    path("invitations/<str:token>/", views.invitation, name="invitation"),
]
