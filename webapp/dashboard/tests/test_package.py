"""The download is a package a user can pip install, and its own tests pass (Triton interpreter)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import zipfile
from importlib.machinery import SourceFileLoader

import pytest
import torch

import kernels
from kernels.ops.matmul.op import to_tf32
from webapp.dashboard.tests.venv_support import install_and_test
from webapp.downloads.builder import TEMPLATE_DIR, package_name

pytestmark = pytest.mark.django_db


def load_fallbacks():
    loader = SourceFileLoader("kf_fallbacks", str(TEMPLATE_DIR / "fallbacks.py.tmpl"))
    spec = importlib.util.spec_from_loader("kf_fallbacks", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


SMALL = {
    "matmul": ["3x5x7", "17x9x33"],
    "rmsnorm": ["5x100"],
    "layernorm": ["5x100"],
    "softmax": ["5x100"],
    "sum": ["5x100"],
    "swiglu": ["3x24x40"],
    "rotary": ["3x5x6"],
    "cross_entropy": ["5x100"],
    "attention": ["1x2x7x16"],
    "swiglu_gate": ["3x24x40"],
    "qkv_rotary": ["3x4x2x6x40"],
    "decode_attention": ["1x2x3x7x16", "2x3x1x5x16"],
}
# Layouts beyond op.layouts (free-form ones): each must reach its fallback too, at SMALL's
# shapes or at its own (qkv_rotary's interleave takes whole 16-row groups of a head).
MORE_LAYOUTS: dict[str, dict[str, list[str] | None]] = {
    "rmsnorm": {"eps=1e-05": None},
    "layernorm": {"eps=1e-06": None},
    "decode_attention": {"kv_heads=1": None},
    "attention": {"kv_heads=1": None, "causal+kv_heads=1": None},
    "qkv_rotary": {
        "i8+kv_heads=2": ["3x4x2x16x40"],
        "i8+bias+kv_heads=1": ["5x3x1x32x24"],
        "i8+rowscale+kv_heads=2": ["3x4x2x16x40"],
        "i8+bias+rowscale+kv_heads=1": ["5x3x1x32x24"],
        "pairs+rot=16+head_dim=32+kv_heads=2": ["3x4x2x32x40"],
    },
}


@pytest.mark.parametrize("op_name", sorted(kernels.all_ops()))
def test_each_fallback_computes_what_the_ops_reference_computes(op_name):
    fallbacks = load_fallbacks()
    op = kernels.get_op(op_name)
    assert set(SMALL) == set(kernels.all_ops()), "a new op needs a fallback in the package"
    layouts = dict.fromkeys(op.layouts) | MORE_LAYOUTS.get(op_name, {})
    for layout, shapes in layouts.items():
        for shape in shapes or SMALL[op_name]:
            dtype = "fp32" if "fp32" in op.dtypes else "fp16"
            if op_name == "matmul":  # an fp32 matmul is a TF32 one (kernels/ops/matmul)
                layout = layout.removesuffix("+tf32") + "+tf32"
            problem = kernels.parse_problem(op_name, shape, dtype, layout)
            inputs = op.make_inputs(problem, seed=0, device="cpu")
            if layout.endswith("+tf32"):  # on a GPU, cuBLAS rounds them so (the CPU cannot)
                inputs = (to_tf32(inputs[0]), to_tf32(inputs[1]), *inputs[2:])
            wide = [t.double() if t.is_floating_point() else t for t in inputs]
            got = fallbacks.call(op_name, layout, *wide)
            want = op.reference(problem, *inputs)
            torch.testing.assert_close(got.double(), want.double(), rtol=1e-6, atol=1e-6)
            assert fallbacks.schema(op_name, layout).count("Tensor ") == len(inputs)


def test_the_winners_download_installs_and_its_tests_pass(alice_client, runs, tmp_path):
    job, _ = runs
    response = alice_client.get(f"/jobs/{job.id}/package.zip")
    assert response.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    name = package_name(job.title)
    root = name.replace("_", "-")
    table = json.loads(archive.read(f"{root}/{name}/dispatch.json"))
    assert {e["name"] for e in table["entries"]} == {"rmsnorm", "softmax"}
    provenance = json.loads(archive.read(f"{root}/{name}/provenance.json"))
    assert provenance["job"]["url"] == f"http://testserver/jobs/{job.id}/"
    assert {k["gpu"] for k in provenance["kernels"]} == {"NVIDIA H100 80GB HBM3 (demo data)"}
    assert provenance["kernels"][0]["driver"] and provenance["kernels"][0]["triton"] == "3.6.0"
    bench = json.loads(archive.read(f"{root}/{name}/benchmark.json"))
    assert all(r["timings"]["baselines"]["torch"]["median_us"] > 0 for r in bench["results"])
    cases = json.loads(archive.read(f"{root}/{name}/tests/cases.json"))
    assert len(cases) >= 4

    path = tmp_path / response["Content-Disposition"].split('filename="')[1].rstrip('"')
    path.write_bytes(response.content)
    run = install_and_test(path, name, tmp_path, pytest_args=("-rA",))
    assert run.returncode == 0, run.output
    passed = {line.split("::")[-1] for line in run.output.splitlines() if line.startswith("PASSED")}
    assert {f"test_kernel_matches_pytorch[{c['id']}]" for c in cases} <= passed, run.output
    # import replaced F.rms_norm and F.softmax / torch.softmax: at the won shapes they reach the
    # kernels (routing checked everywhere; the real won-shape runs are too big for the
    # interpreter, so the package's tests leave those to a GPU, and one is run below).
    for module, calls in (("k_rmsnorm_2048x4096_fp16", 2), ("k_softmax_1024x8192_fp32", 2)):
        for i in range(calls):
            assert f"test_a_public_call_at_the_won_shape_goes_to_the_kernel[{module}-{i}]" in passed
    assert "test_import_replaced_the_public_functions" in passed
    assert sum(p.startswith("test_every_other_call_runs_pytorch_unchanged") for p in passed) >= 14

    # A user's call of F.softmax at the won shape runs the kernel (Triton's interpreter here).
    script = (
        f"import torch, torch.nn.functional as F, {name} as pkg\n"
        "x = torch.randn(1024, 8192, generator=torch.Generator().manual_seed(0))\n"
        "y = F.softmax(x, dim=-1)\n"
        "print(pkg.stats(), (y - torch.softmax(x.double(), -1)).abs().max().item())\n"
        "print(pkg.stats()['kernel'] == {'k_softmax_1024x8192_fp32': 1})\n"
        "pkg.reset_stats()\n"
        "F.softmax(x[:-1], dim=-1)\n"
        "print(pkg.stats()['fallback'] == {'torch.nn.functional.softmax': 1})\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "PYTHONPATH"))}
    env["TRITON_INTERPRET"] = "1"
    user = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", script],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)  # fmt: skip
    assert user.returncode == 0, user.stderr
    lines = user.stdout.strip().splitlines()
    assert lines[-2:] == ["True", "True"], user.stdout
    assert float(lines[0].rsplit(" ", 1)[1]) < 1e-5, user.stdout


@pytest.mark.django_db
def test_a_norm_won_at_the_models_eps_is_called_at_that_eps(alice, team, alice_client, tmp_path):
    # A model's RMSNorm at eps 1e-5 is its own problem ("eps=1e-05"): the package must send
    # F.rms_norm(..., eps=1e-5) to that kernel, and a call at any other eps to PyTorch.
    from webapp.dashboard.demo import seed_job

    seeded = seed_job(
        user=alice,
        team=team,
        title="eps norms",
        shapes=[("rmsnorm", "64x256", "fp32", "eps=1e-05")],
    )
    response = alice_client.get(f"/jobs/{seeded.job.id}/package.zip")
    assert response.status_code == 200
    zipfile.ZipFile(io.BytesIO(response.content)).extractall(tmp_path)
    name = package_name(seeded.job.title)
    table = json.loads((tmp_path / name.replace("_", "-") / name / "dispatch.json").read_text())
    assert table["ops"]["rmsnorm_eps_1e_05"]["eps"] == 1e-5
    script = (
        f"import torch, torch.nn.functional as F, {name} as pkg\n"
        "g = torch.Generator().manual_seed(0)\n"
        "x, w = torch.randn(64, 256, generator=g), torch.randn(256, generator=g)\n"
        "y = F.rms_norm(x, (256,), w, eps=1e-5)\n"
        "want = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-5) * w\n"
        "assert (y - want).abs().max().item() < 1e-4\n"
        "assert sum(pkg.stats()['kernel'].values()) == 1, pkg.stats()\n"
        "pkg.reset_stats()\n"
        "F.rms_norm(x, (256,), w, eps=1e-6)\n"
        "F.rms_norm(x, (256,), w)\n"
        "assert not pkg.stats()['kernel'], pkg.stats()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "PYTHONPATH"))}
    env.update(TRITON_INTERPRET="1", PYTHONPATH=str(tmp_path / name.replace("_", "-")))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
