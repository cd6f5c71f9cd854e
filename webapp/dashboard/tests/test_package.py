"""The download is a package a user can pip install, and its own tests pass (Triton interpreter)."""

from __future__ import annotations

import importlib.util
import io
import json
import zipfile
from importlib.machinery import SourceFileLoader

import pytest
import torch

import kernels
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
}


@pytest.mark.parametrize("op_name", sorted(kernels.all_ops()))
def test_each_fallback_computes_what_the_ops_reference_computes(op_name):
    fallbacks = load_fallbacks()
    op = kernels.get_op(op_name)
    assert set(SMALL) == set(kernels.all_ops()), "a new op needs a fallback in the package"
    for layout in op.layouts:
        for shape in SMALL[op_name]:
            dtype = "fp32" if "fp32" in op.dtypes else "fp16"
            problem = kernels.parse_problem(op_name, shape, dtype, layout)
            inputs = op.make_inputs(problem, seed=0, device="cpu")
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
    assert {k["gpu"] for k in provenance["kernels"]} == {"NVIDIA H100 80GB HBM3"}
    assert provenance["kernels"][0]["driver"] and provenance["kernels"][0]["triton"] == "3.6.0"
    bench = json.loads(archive.read(f"{root}/{name}/benchmark.json"))
    assert all(r["timings"]["baselines"]["torch"]["median_us"] > 0 for r in bench["results"])
    cases = json.loads(archive.read(f"{root}/{name}/tests/cases.json"))
    assert len(cases) >= 4

    path = tmp_path / response["Content-Disposition"].split('filename="')[1].rstrip('"')
    path.write_bytes(response.content)
    run = install_and_test(path, name, tmp_path)
    assert run.returncode == 0, run.output
    assert f"{len(cases) + 1 + min(3, len(cases))} passed" in run.output, run.output
