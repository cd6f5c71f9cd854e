from django.contrib import admin

from webapp.jobs.models import Iteration, Job, Problem, Task


class ProblemInline(admin.TabularInline):
    model = Problem
    extra = 0


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("title", "team", "kind", "status", "gpu_minutes", "created_at")
    list_filter = ("status", "kind")
    inlines = [ProblemInline]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("id", "job", "problem", "queue", "status", "attempt", "heartbeat_at")
    list_filter = ("status", "queue")


@admin.register(Iteration)
class IterationAdmin(admin.ModelAdmin):
    list_display = ("job", "seq", "task", "index", "verdict", "speedup", "ranked", "interpreter")
    list_filter = ("verdict", "ranked", "interpreter", "implausible")
