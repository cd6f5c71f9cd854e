"""Record realistic finished runs (or a live stream of iterations) as a worker would.

    manage.py demo_results --username demo --team demo-team
    manage.py demo_results --username demo --team demo-team --stream 200 --rate 20

For screenshots and the browser test, where the stand-in agent reports no timings. Prints one
JSON line with the jobs it made. See webapp/dashboard/demo.py for what the numbers are.
"""

from __future__ import annotations

import json
import sys
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from webapp.accounts.models import Membership, Team
from webapp.dashboard import demo

SHAPES = [("rmsnorm", "2048x4096", "fp16"), ("softmax", "1024x8192", "fp32")]


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
        user = get_user_model().objects.get(username=username)
        home = Team.objects.get(slug=team)
        if stream:
            job = demo.stream_job(user=user, team=home, steps=stream, rate=rate, wait_s=wait,
                                  announce=lambda j: self._print({"stream_job": str(j.id)}))  # fmt: skip
            self._print({"stream_done": str(job.id), "at": time.time()})
            return
        rival, _ = Team.objects.get_or_create(slug="vector-crew", defaults={"name": "Vector Crew"})
        Membership.objects.get_or_create(team=rival, user=user, defaults={"role": "member"})
        ours = demo.seed_job(
            user=user, team=home, title="Norms on H100 (demo data)", shapes=SHAPES, seed=1
        )
        theirs = demo.seed_job(user=user, team=rival, title="Vector Crew norms (demo data)", shapes=SHAPES,
                               seed=2)  # fmt: skip
        self._print({"jobs": [str(ours.job.id), str(theirs.job.id)]})

    def _print(self, document: dict) -> None:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()
