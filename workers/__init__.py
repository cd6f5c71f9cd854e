"""workers/: where it runs. Celery tasks; the only place Django meets agents/."""

from workers.celery import app

__all__ = ["app"]
