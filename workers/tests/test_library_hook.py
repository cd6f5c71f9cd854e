"""A GPU worker builds its machine's kernel library in the background when it is ready."""

from harness import library
from workers import celery as worker_app


def test_a_gpu_worker_starts_the_library_build_unless_turned_off(monkeypatch):
    started = []
    monkeypatch.setattr(library, "start_background_build", lambda: started.append(1))
    monkeypatch.setattr("harness.device.gpu_visible", lambda: True)
    monkeypatch.delenv("KF_LIBRARY_BUILD", raising=False)
    worker_app._build_the_kernel_library()
    assert started == [1]
    monkeypatch.setenv("KF_LIBRARY_BUILD", "0")
    worker_app._build_the_kernel_library()
    assert started == [1]


def test_a_worker_without_a_gpu_builds_nothing(monkeypatch):
    started = []
    monkeypatch.setattr(library, "start_background_build", lambda: started.append(1))
    monkeypatch.setattr("harness.device.gpu_visible", lambda: False)
    monkeypatch.delenv("KF_LIBRARY_BUILD", raising=False)
    worker_app._build_the_kernel_library()
    assert started == []
