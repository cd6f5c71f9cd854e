from django.urls import path

from webapp.jobs import views

app_name = "jobs"

urlpatterns = [
    path("", views.job_list, name="list"),
    path("jobs/new/", views.job_new, name="new"),
    path("jobs/<uuid:job_id>/", views.job_detail, name="detail"),
    path("jobs/<uuid:job_id>/cancel/", views.job_cancel, name="cancel"),
    path("jobs/<uuid:job_id>/events/", views.job_events, name="events"),
]
