"""A GPU worker builds its machine's kernel library in the background when it is ready."""

import pytest

from harness import library
from workers import celery as worker_app


@pytest.mark.parametrize(
    ("gpu", "setting", "starts"),
    [(True, None, True), (True, "0", False), (False, None, False)],
    ids=["gpu worker", "turned off", "no gpu"],
)
def test_a_gpu_worker_starts_the_library_build_unless_turned_off(monkeypatch, gpu, setting, starts):
    started = []
    monkeypatch.setattr(library, "start_background_build", lambda: started.append(1))
    monkeypatch.setattr("harness.device.gpu_visible", lambda: gpu)
    if setting is None:
        monkeypatch.delenv("KF_LIBRARY_BUILD", raising=False)
    else:
        monkeypatch.setenv("KF_LIBRARY_BUILD", setting)
    worker_app._build_the_kernel_library()
    assert started == ([1] if starts else [])
