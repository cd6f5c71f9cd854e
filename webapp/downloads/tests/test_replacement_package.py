"""`import <package>` of a download replaces the PyTorch functions at the shapes that won.

A job with small winners of every op that has a public PyTorch function (Triton's CPU
interpreter runs them in seconds) is downloaded as a user would, pip-installed into a fresh
venv, and then (1) its own tests run there, and (2) a user's script calls F.rms_norm, F.linear,
torch.matmul, ... at the won shapes and at others, and reads which calls the kernels served.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import zipfile

import pytest

from webapp.dashboard.demo import seed_job
from webapp.dashboard.tests.venv_support import install_and_test
from webapp.downloads.builder import package_name
from webapp.downloads.manifest import kernel_module
from webapp.jobs.selectors import job_winners

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

# Small enough for the interpreter; fp16/fp32 only (it computes bf16 wrongly).
SMALL_WINNERS = [
    ("rmsnorm", "64x256", "fp16"),
    ("layernorm", "48x200", "fp32"),
    ("softmax", "32x1000", "fp32"),
    ("cross_entropy", "16x100", "fp16"),
    ("sum", "16x300", "fp32"),
    ("matmul", "64x48x32", "fp16", "NT+bias"),
    ("matmul", "32x16x64", "fp16", "TN"),
    ("attention", "1x2x16x32", "fp16", "causal"),
    ("rotary", "8x2x16", "fp32"),
]

# A user's script: calls at the won shapes, then at other shapes, grads and arguments.
USER_SCRIPT = """
import json, sys, torch, torch.nn.functional as F
import PKG as pkg

def served(fn):
    pkg.reset_stats()
    out = fn()
    return {"kernel": pkg.stats()["kernel"], "fallback": pkg.stats()["fallback"],
            "shape": list(out.shape), "dtype": str(out.dtype)}

g = torch.Generator().manual_seed(0)
h = lambda *s: torch.randn(*s, generator=g).half()
f = lambda *s: torch.randn(*s, generator=g)
x16, w16 = h(64, 256), h(256)
linear = torch.nn.Linear(32, 48).half()
a_t, b = h(64, 32), h(64, 16)  # matmul TN: a stored (K, M) = (64, 32), b (K, N) = (64, 16)
q, k, v = h(1, 2, 16, 32), h(1, 2, 16, 32), h(1, 2, 16, 32)
logits, targets = h(16, 100), torch.randint(0, 100, (16,), generator=g)
calls = {
    "rms_norm": lambda: F.rms_norm(x16, (256,), w16, eps=1e-6),
    "rms_norm_module": lambda: torch.nn.RMSNorm(256, eps=1e-6).half().requires_grad_(False)(x16),
    "rms_norm_3d": lambda: F.rms_norm(x16.view(4, 16, 256), (256,), w16, eps=1e-6),
    "layer_norm": lambda: F.layer_norm(f(48, 200), (200,), f(200), f(200)),
    "softmax": lambda: F.softmax(f(32, 1000), dim=-1),
    "torch_softmax": lambda: torch.softmax(f(32, 1000), -1),
    "cross_entropy": lambda: F.cross_entropy(logits, targets),
    "sum": lambda: torch.sum(f(16, 300), dim=-1),
    "linear_module": lambda: linear(h(64, 32)),
    "matmul_tn": lambda: torch.matmul(a_t.T, b),
    "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "rms_norm_other_shape": lambda: F.rms_norm(h(65, 256), (256,), w16, eps=1e-6),
    "rms_norm_other_eps": lambda: F.rms_norm(x16, (256,), w16, eps=1e-5),
    "rms_norm_grad": lambda: F.rms_norm(x16.clone().requires_grad_(), (256,), w16, eps=1e-6),
    "linear_grad": lambda: linear.requires_grad_(True)(h(64, 32)),
    "sdpa_not_causal": lambda: F.scaled_dot_product_attention(q, k, v),
    "matmul_nn": lambda: torch.matmul(a_t.T.contiguous(), b),
}
with torch.no_grad():
    linear.requires_grad_(False)
    results = {name: served(fn) for name, fn in calls.items() if not name.endswith("_grad")}
results.update({n: served(fn) for n, fn in calls.items() if n.endswith("_grad")})
pkg.disable()
results["rms_norm_disabled"] = served(calls["rms_norm"])
results["restored"] = not hasattr(F.rms_norm, "__kernelforge__")
json.dump(results, sys.stdout)
"""


def served_by_kernel(result: dict) -> bool:
    return sum(result["kernel"].values()) == 1 and not result["fallback"]


def test_import_replaces_the_pytorch_ops_at_won_shapes(client, alice, team, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    job = seed_job(user=alice, team=team, title="Small winners", shapes=SMALL_WINNERS,
                   seed=1, reports=False).job  # fmt: skip
    client.force_login(alice)
    response = client.get(f"/jobs/{job.id}/package.zip")
    assert response.status_code == 200
    name = package_name(job.title)
    root = name.replace("_", "-")
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    table = json.loads(archive.read(f"{root}/{name}/dispatch.json"))
    assert len(table["entries"]) == len(SMALL_WINNERS)
    # The shipped sources are the evaluated ones, byte for byte.
    for winner in job_winners(job_id=job.id):
        shipped = archive.read(f"{root}/{name}/kernels/{kernel_module(winner.task.problem)}.py")
        assert shipped.decode() == winner.iteration.source
    path = tmp_path / f"{root}.zip"
    path.write_bytes(response.content)

    run = install_and_test(path, name, tmp_path, pytest_args=("-rA",))
    assert run.returncode == 0, run.output
    passed = {line.split("::")[-1] for line in run.output.splitlines() if line.startswith("PASSED")}
    # Every public call at a won shape ran the real kernel in the interpreter and matched.
    calls = {("rmsnorm", ""): 2, ("layernorm", ""): 1, ("softmax", ""): 2, ("cross_entropy", ""): 2,
             ("sum", ""): 2, ("matmul", "NT+bias"): 1, ("matmul", "TN"): 2,
             ("attention", "causal"): 1, ("rotary", ""): 0}  # fmt: skip
    for entry in table["entries"]:
        for i in range(calls[entry["op"], entry["layout"]]):
            for test in ("goes_to_the_kernel", "runs_the_kernel_and_matches"):
                assert (
                    f"test_a_public_call_at_the_won_shape_{test}[{entry['module']}-{i}]" in passed
                )
        assert (
            f"test_the_registered_op_at_the_won_shape_runs_the_kernel[{entry['module']}]" in passed
        )
    assert sum(calls.values()) == sum(
        1 for p in passed if p.startswith("test_a_public_call_at_the_won_shape_runs")
    ), sorted(passed)
    assert "test_import_replaced_the_public_functions" in passed
    assert "test_an_environment_variable_imports_it_without_replacing_anything" in passed
    unchanged = [p for p in passed if p.startswith("test_every_other_call_runs_pytorch_unchanged")]
    assert len(unchanged) >= 6 * (len(table["entries"]) - 1), sorted(passed)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "PYTHONPATH"))}
    env["TRITON_INTERPRET"] = "1"
    script = USER_SCRIPT.replace("PKG", name)
    user = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", script],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)  # fmt: skip
    assert user.returncode == 0, user.stderr
    results = json.loads(user.stdout)
    hits = [n for n in results if n != "restored" and served_by_kernel(results[n])]
    assert sorted(hits) == sorted(
        ["rms_norm", "rms_norm_module", "rms_norm_3d", "layer_norm", "softmax", "torch_softmax",
         "cross_entropy", "sum", "linear_module", "matmul_tn", "sdpa"]
    ), results  # fmt: skip
    assert results["rms_norm_3d"]["shape"] == [4, 16, 256]
    assert results["cross_entropy"]["dtype"] == "torch.float16"  # as PyTorch returns it
    assert results["cross_entropy"]["shape"] == []  # reduction="mean"
    for miss in ("rms_norm_other_shape", "rms_norm_other_eps", "rms_norm_grad", "linear_grad",
                 "sdpa_not_causal", "matmul_nn", "rms_norm_disabled"):  # fmt: skip
        assert results[miss]["kernel"] == {}, (miss, results[miss])
    assert results["restored"] is True
