from django.urls import path

from webapp.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path("jobs/<uuid:job_id>/iterations/<int:seq>/", views.iteration_detail, name="iteration"),
    path("jobs/<uuid:job_id>/iterations/<int:seq>/ncu-rep/", views.ncu_report, name="ncu_report"),
    path(
        "jobs/<uuid:job_id>/iterations/<int:seq>/package.zip",
        views.problem_package,
        name="problem_package",
    ),
    path("jobs/<uuid:job_id>/package.zip", views.job_package, name="job_package"),
    path("compare/", views.compare, name="compare"),
    path("leaderboards/", views.leaderboard, name="leaderboard"),
    path("leaderboards/teams/<slug:slug>/", views.team_board, name="team"),
]
