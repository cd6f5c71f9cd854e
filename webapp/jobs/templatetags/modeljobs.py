"""Template helpers for the model job section."""

from django import template

from webapp.jobs import selectors

register = template.Library()


@register.filter
def get_item(mapping, key):
    """{{ plan_item.predicted|get_item:"1.5x" }}: dict keys that are not identifiers."""
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.filter
def percent(fraction) -> str:
    """{{ 0.0234|percent }} -> "2.3 %"; "" for none (a plan stored before it had the value)."""
    return f"{100 * fraction:.1f} %" if fraction else ""


@register.simple_tag
def end_to_end_view(run):
    """{% end_to_end_view run as e2e %}: jobs.selectors.end_to_end_view."""
    return selectors.end_to_end_view(run)
