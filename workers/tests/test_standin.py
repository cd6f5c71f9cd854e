"""The stand-in agent emits honest, resumable, cancellable Reporter traffic."""

import kernels
from agents.reporting import AttemptVerdict
from agents.standin import STANDIN_NOTE, run_standin


class RecordingReporter:
    def __init__(self, cancel_after=None):
        self.events, self.calls, self.cancel_after = [], [], cancel_after

    def started(self, *, problem, budget):
        self.calls.append(("started", budget["agent"]))

    def iteration(self, event):
        self.events.append(event)

    def search(self, stats):
        self.calls.append(("search", stats.outcome))

    def profile(self, *, index, profile):
        self.calls.append(("profile", index))

    def finished(self, *, best, stop_reason):
        self.calls.append(("finished", stop_reason))

    def failed(self, *, error):
        self.calls.append(("failed", error))

    def cancel_requested(self):
        return self.cancel_after is not None and len(self.events) >= self.cancel_after


PROBLEM = kernels.parse_problem("rmsnorm", "8x64", "fp16")


def test_it_labels_every_event_as_a_stand_in_and_claims_no_speedup():
    reporter = RecordingReporter()
    run_standin(PROBLEM, reporter, iterations=3, pause_s=0)
    assert [e.index for e in reporter.events] == [0, 1, 2]
    assert reporter.events[0].verdict is AttemptVerdict.BASELINE
    assert all(e.speedup is None and e.best_speedup is None for e in reporter.events)
    assert all(e.reason == STANDIN_NOTE and "[stand-in]" in e.hypothesis for e in reporter.events)
    assert reporter.calls == [("started", "stand-in"), ("finished", "stand-in finished 3 steps")]


def test_it_resumes_after_the_events_already_saved():
    reporter = RecordingReporter()
    run_standin(PROBLEM, reporter, iterations=5, pause_s=0, resume_from=3)
    assert [e.index for e in reporter.events] == [3, 4]


def test_it_stops_cleanly_when_cancelled():
    reporter = RecordingReporter(cancel_after=2)
    run_standin(PROBLEM, reporter, iterations=10, pause_s=0)
    assert len(reporter.events) == 2
    assert reporter.calls[-1] == ("finished", "cancelled")
