"""The LLM client library is the one we pinned, with a hash, and carries no start-up hook."""

import importlib.metadata
import re
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPROMISED = {"1.82.7", "1.82.8"}


def pinned(path: Path) -> str:
    match = re.search(r"^litellm==([\w.]+)", path.read_text(), re.M)
    assert match, f"{path.name} does not pin litellm exactly"
    return match.group(1)


def test_it_pins_one_known_good_litellm_everywhere():
    lock = (ROOT / "agents" / "litellm.lock").read_text()
    assert re.search(r"^litellm==[\w.]+ --hash=sha256:[0-9a-f]{64}$", lock, re.M)
    versions = {pinned(ROOT / "requirements.txt"), pinned(ROOT / "agents" / "litellm.lock")}
    assert len(versions) == 1 and not versions & COMPROMISED
    assert importlib.metadata.version("litellm") in versions


def test_it_has_no_python_startup_hook_from_litellm():
    site = Path(sysconfig.get_paths()["purelib"])
    hooks = [
        p.name
        for p in site.glob("*.pth")
        if "litellm" in p.name or "litellm" in p.read_text(errors="ignore")
    ]
    assert hooks == []


def test_it_imports_litellm_in_one_module_only():
    importers = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "agents").rglob("*.py")
        if re.search(r"^\s*(import litellm|from litellm)", p.read_text(), re.M)
    ]
    assert importers == ["agents/llm.py"]


def test_it_imports_without_reaching_the_network():
    import os
    import subprocess
    import sys

    # Every proxy points at a closed port: a network fetch at import would fail or hang.
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    env.pop("LITELLM_LOCAL_MODEL_COST_MAP", None)
    code = "import agents.llm, litellm, os; print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'], len(litellm.model_cost) > 100)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]
