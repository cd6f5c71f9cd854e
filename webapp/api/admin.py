from django.contrib import admin

from webapp.api.models import ApiToken, JobSubmission


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "user",
        "prefix",
        "all_teams",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("all_teams",)
    # The digest is useless to a reader and the token itself is never stored.
    exclude = ("digest",)
    readonly_fields = ("prefix", "created_at", "last_used_at")


@admin.register(JobSubmission)
class JobSubmissionAdmin(admin.ModelAdmin):
    list_display = ("job", "token")
