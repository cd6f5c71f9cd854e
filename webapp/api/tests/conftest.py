"""The API's test world: alice (team "Alice's team"), bob (his own team), tokens, and a way to
drive a job through webapp.jobs.services exactly as a worker does (claim, record, finish)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from webapp.api import services as api_services
from webapp.jobs import services as job_services


def evaluation(*, kind: str = "cuda", device: str = "NVIDIA H100 80GB HBM3", speedup: float = 1.5,
               regime: str = "offline", implausible: bool = False) -> dict[str, Any]:  # fmt: skip
    """An Evaluation.to_dict()-shaped record (webapp may not import harness/)."""
    return {
        "verdict": "passed",
        "implausible": implausible,
        "timings": {"regime": regime, "protocol": "kf-timing-v1", "speedups": {"torch": speedup}},
        "device": {"name": device, "kind": kind, "torch": "2.11.0", "triton": "3.6.0"},
    }


class FakeWorker:
    """Plays the worker's side through the same services workers/reporting.py calls."""

    def __init__(self, task_id: int) -> None:
        claim = job_services.task_claim(task_id=task_id, worker="test-worker")
        assert claim is not None, "the task should be queued"
        self.claim = claim
        self.index = 0

    def iterate(self, *, verdict: str = "reverted", speedup: float | None = None,
                source: str = "", beats_baselines: bool | None = None,
                **eval_kwargs: Any) -> None:  # fmt: skip
        data = job_services.IterationData(
            index=self.index,
            verdict=verdict,
            source=source or f"# candidate {self.index}\ndef run(*inputs, out):\n    pass\n",
            candidate_id=f"cand-{self.index}",
            speedup=speedup,
            evaluation=evaluation(speedup=speedup or 1.0, **eval_kwargs) if speedup else None,
            gpu_s=30.0,
            # The harness's call on these timings (one baseline, no interval, no noise), which
            # the real worker passes along (harness/judge/wins.py; webapp may not import it).
            beats_baselines=(speedup is not None and speedup > 1.0)
            if beats_baselines is None
            else beats_baselines,
        )
        saved = job_services.iteration_record(
            task_id=self.claim.task_id, attempt=self.claim.attempt, data=data
        )
        assert saved is not None
        self.index += 1

    def finish(self) -> None:
        assert job_services.task_finish(
            task_id=self.claim.task_id, attempt=self.claim.attempt, stop_reason="budget spent"
        )

    def fail(self, error: str = "boom") -> None:
        assert job_services.task_fail(
            task_id=self.claim.task_id, attempt=self.claim.attempt, error=error
        )


@pytest.fixture
def bob_team(bob):
    from webapp.accounts.services import team_create

    return team_create(user=bob, name="Bob's team")


@pytest.fixture
def make_token():
    def make(user, teams=None) -> str:
        return api_services.token_create(user=user, name="test", teams=teams)[1]

    return make


def client_for(raw_token: str) -> Client:
    return Client(headers={"Authorization": f"Bearer {raw_token}"})


@pytest.fixture
def alice_api(alice, team, make_token) -> Client:
    return client_for(make_token(alice))


@pytest.fixture
def bob_api(bob, bob_team, make_token) -> Client:
    return client_for(make_token(bob))


SHAPES_YAML = (
    "- {op: rmsnorm, shape: 8x64, dtype: fp32}\n- {op: matmul, shape: 64x48x32, dtype: fp16}\n"
)


@pytest.fixture
def submit(django_capture_on_commit_callbacks):
    """POST /api/v1/jobs without enqueuing (no worker in these tests)."""

    def post(client: Client, **body: Any):
        payload = {"team": "alices-team", "shapes": SHAPES_YAML, "format": "yaml", **body}
        with django_capture_on_commit_callbacks(execute=False):
            return client.post("/api/v1/jobs", payload, content_type="application/json")

    return post
