from django.core.management.base import BaseCommand

from webapp.dashboard.services import board_rebuild


class Command(BaseCommand):
    help = "Recompute the leaderboard rows from the recorded iterations."

    def handle(self, *args, **options) -> None:
        self.stdout.write(f"{board_rebuild()} leaderboard entries")
