"""Template helpers for the model job section."""

from django import template

register = template.Library()


@register.filter
def get_item(mapping, key):
    """{{ plan_item.predicted|get_item:"1.5x" }}: dict keys that are not identifiers."""
    return mapping.get(key) if hasattr(mapping, "get") else None
