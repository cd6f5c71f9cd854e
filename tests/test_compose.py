"""docker/compose.yml is accepted by `docker compose config` and has one pinned worker per GPU."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker" / "compose.yml"


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]  # Debian's package; `make test` installs it when neither exists
    pytest.fail(
        "neither `docker compose` nor `docker-compose` is installed (make test installs docker-compose)"
    )


def test_it_is_accepted_by_docker_compose_config(tmp_path):
    result = subprocess.run(
        [*compose_command(), "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    services = config["services"]
    assert {"postgres", "redis", "web", "beat", "worker-control"} <= set(services)
    gpu_workers = {name: s for name, s in services.items() if name.startswith("worker-gpu")}
    assert len(gpu_workers) >= 2
    pinned = [s["environment"]["CUDA_VISIBLE_DEVICES"] for s in gpu_workers.values()]
    assert len(set(pinned)) == len(pinned), "each GPU worker pins a different GPU"
    for service in gpu_workers.values():
        assert service["environment"]["KF_GPU_QUEUE"].startswith("gpu.")
        assert service["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == [
            "gpu"
        ]
    assert services["web"]["environment"]["DATABASE_URL"].startswith("postgres://")


def test_it_ships_the_dockerfiles_the_compose_file_builds():
    for name in ("Dockerfile", "Dockerfile.gpu"):
        text = (ROOT / "docker" / name).read_text()
        assert "requirements.txt" in text
    assert "-c 1" in (ROOT / "docker" / "Dockerfile.gpu").read_text(), (
        "GPU workers run one task at a time"
    )
