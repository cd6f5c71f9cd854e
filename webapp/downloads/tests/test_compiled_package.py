"""A downloaded package composes with torch.compile: its ops have fake implementations, so a
compiled function that calls F.rms_norm / F.linear at a won shape traces them as
torch.ops.<pkg>.<op> (not a graph break, not PyTorch's own op), AOTAutograd runs the fake to
trace through, and the compiled result matches PyTorch. Triton's CPU interpreter runs the
kernels (fp16: it computes bf16 wrongly)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile

import pytest

from webapp.dashboard.demo import seed_job
from webapp.downloads.builder import package_name

pytestmark = [pytest.mark.django_db]

WINNERS = [("rmsnorm", "64x256", "fp16"), ("matmul", "64x48x32", "fp16", "NT+bias")]

SCRIPT = """
import json, torch, torch.nn.functional as F
import PKG as pkg

g = torch.Generator().manual_seed(0)
x, w = torch.randn(64, 256, generator=g).half(), torch.randn(256, generator=g).half()
a = torch.randn(64, 32, generator=g).half()
linear = torch.nn.Linear(32, 48).half().requires_grad_(False)

def norm(x, w):
    return F.rms_norm(x, (256,), w, eps=1e-6) * 2

def layer(a):
    return torch.relu(linear(a))

seen = []
def backend(gm, example_inputs):
    seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
    return gm.forward

result = {}
with torch.no_grad():
    for name, fn, args in (("norm", norm, (x, w)), ("layer", layer, (a,))):
        pkg.reset_stats()
        got = torch.compile(fn, backend="aot_eager", dynamic=False)(*args)
        kernel_runs = sum(pkg.stats()["kernel"].values())
        torch.compile(fn, backend=backend, dynamic=False)(*args)
        pkg.disable()
        want = fn(*args)
        pkg.enable()
        result[name] = {
            "kernel_runs": kernel_runs,
            "max_err": float((got.float() - want.float()).abs().max()),
        }
    other = torch.compile(norm, backend=backend, dynamic=False)(torch.randn(65, 256).half(), w)
result["graph"] = seen
json.dump(result, open("result.json", "w"))
"""


def test_a_compiled_model_calls_the_packages_ops_at_won_shapes(client, alice, team, tmp_path):
    job = seed_job(user=alice, team=team, title="Compiled", shapes=WINNERS, seed=1,
                   reports=False).job  # fmt: skip
    client.force_login(alice)
    response = client.get(f"/jobs/{job.id}/package.zip")
    assert response.status_code == 200
    name = package_name(job.title)
    zipfile.ZipFile(io.BytesIO(response.content)).extractall(tmp_path)
    root = tmp_path / name.replace("_", "-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO")}
    env |= {"TRITON_INTERPRET": "1", "PYTHONPATH": str(root)}
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("PKG", name)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    ops = [t for t in result["graph"] if t.startswith(f"{name}.")]
    assert {f"{name}.rmsnorm", f"{name}.matmul_nt_bias"} <= {
        t.removesuffix(".default") for t in ops
    }
    for case in ("norm", "layer"):
        assert result[case]["kernel_runs"] >= 1, result  # the compiled graph ran the kernel
        assert result[case]["max_err"] < 0.05, result
    # At a shape that did not win the compiled graph keeps PyTorch's own op.
    assert "torch.rms_norm" in result["graph"] or any("rms_norm" in t for t in result["graph"])
