"""Every reason the agents stop a search for has words on the job page (webapp may not import
agents/, so the page keeps its own table: this keeps the two in step)."""

from agents.state import StopReason


def test_every_stop_reason_reads_as_words_on_the_job_page():
    from webapp.jobs.status import STOP_REASONS

    assert set(STOP_REASONS) == {reason.value for reason in StopReason}
