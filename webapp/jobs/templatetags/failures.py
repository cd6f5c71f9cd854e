"""{{ text|scrubbed }}: a message or log with the server's paths taken out (jobs/failures.py)."""

from django import template

from webapp.jobs.failures import scrub_paths

register = template.Library()


@register.filter
def scrubbed(text: str | None) -> str:
    return scrub_paths(text or "")
