"""Record realistic finished runs (or a live stream of iterations) as a worker would.

    manage.py demo_results --username demo --team demo-team
    manage.py demo_results --username demo --team demo-team --stream 200 --rate 20

For screenshots, the browser test, and a user without a GPU who wants to see a winner and its
package: the stand-in agent and the CPU interpreter report no GPU timings. Prints one JSON line
with the demo jobs; run again, it finds them and makes nothing. See webapp/dashboard/demo.py
for what the numbers are.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from webapp.accounts.models import Membership, Team
from webapp.dashboard import demo
from webapp.jobs.models import Job
from webapp.jobs.quotas import QuotaExceeded

SHAPES = [("rmsnorm", "2048x4096", "fp16"), ("softmax", "1024x8192", "fp32")]
OURS, THEIRS = "Norms on H100 (demo data)", "Vector Crew norms (demo data)"


class Command(BaseCommand):
    help = "Record realistic results through the worker's services (demo data)."

    def add_arguments(self, parser) -> None:  # noqa: ANN001
        parser.add_argument("--username", required=True)
        parser.add_argument("--team", required=True, help="the team's slug")
        parser.add_argument("--stream", type=int, default=0, help="iterations to stream live")
        parser.add_argument("--rate", type=float, default=20.0, help="events per second")
        parser.add_argument("--wait", type=float, default=3.0, help="seconds before streaming")

    def handle(self, *args, username: str, team: str, stream: int, rate: float, wait: float,
               **options) -> None:  # fmt: skip
        user = get_user_model().objects.filter(username=username).first()
        home = Team.objects.filter(slug=team, memberships__user=user).first()
        if user is None or home is None:
            raise CommandError(f"No user {username!r} in a team with the slug {team!r}.")
        if stream:
            job = demo.stream_job(user=user, team=home, steps=stream, rate=rate, wait_s=wait,
                                  announce=lambda j: self._print({"stream_job": str(j.id)}))  # fmt: skip
            self._print({"stream_done": str(job.id), "at": time.time()})
            return
        try:
            jobs = _seed(user, home)
        except QuotaExceeded as exc:
            raise CommandError(f"{exc.message} Nothing was recorded.") from None
        self._print({"jobs": [str(job.id) for job in jobs]})

    def _print(self, document: dict) -> None:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()


def _seed(user: Any, home: Team) -> list[Job]:
    """The two teams' demo jobs, made once: a second run finds them and makes nothing, and a
    run that cannot finish (a team at its quota) leaves nothing behind, not even the rival
    team."""
    with transaction.atomic():
        rival, _ = Team.objects.get_or_create(slug="vector-crew", defaults={"name": "Vector Crew"})
        Membership.objects.get_or_create(team=rival, user=user, defaults={"role": "member"})
        jobs = []
        for team, title, seed in ((home, OURS, 1), (rival, THEIRS, 2)):
            job = Job.objects.filter(team=team, title=title).order_by("created_at").first()
            if job is None:
                job = demo.seed_job(user=user, team=team, title=title, shapes=SHAPES, seed=seed).job
            jobs.append(job)
        return jobs
