"""Template helpers for the model job section."""

from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    """{{ plan_item.predicted|get_item:"1.5x" }}: dict keys that are not identifiers."""
    return mapping.get(key) if hasattr(mapping, "get") else None


@register.simple_tag
def end_to_end_view(run):
    """{% end_to_end_view run as e2e %}: modeljobs.selectors.end_to_end_view."""
    from webapp.modeljobs.selectors import end_to_end_view as view

    return view(run)
