"""How far fp32-as-TF32 GEMMs (cuBLAS, the Triton families' starting points) land from the op's
reference and from the products of inputs truncated (rz) or rounded to nearest (rn) to TF32, on
the op's random and adversarial inputs (device probe; benchmarks/results/tf32_rounding_h100.json):

    python benchmarks/tf32_probe.py OUT.json
"""

import json
import sys

import torch

from kernels import all_ops
from kernels.checking import compare, run_candidate
from kernels.ops.matmul.op import to_tf32
from kernels.problem import Problem


def rz(x):
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


op = all_ops()["matmul"]
fam = {f.name: f for f in op.families()}
rows = []
for shape in [(8, 4096, 4096), (1000, 1024, 768), (17, 33, 65)]:
    for layout in ["NT+tf32", "NT+bias+gelu+tf32"]:
        p = Problem("matmul", shape, "fp32", layout)
        tol = op.tolerance(p)
        starts = [
            (f, q)
            for f, q in op.starting_points(p)
            if fam[f].backend == "triton" and fam[f].check(p, q) is None
        ][:3]
        for case, inputs in {
            "random": op.make_inputs(p, seed=0, device="cuda"),
            **op.adversarial_inputs(p, seed=0, device="cuda"),
        }.items():
            outs = {}
            spec = op.output_spec(p)
            o = torch.empty(spec.shape, dtype=spec.dtype, device="cuda")
            outs["cublas"] = op.baseline_output(p, *(t.clone() for t in inputs), out=o)
            for f, q in starts:
                outs[f"{f}"] = run_candidate(
                    op, p, fam[f].render(p, q), tuple(t.clone() for t in inputs)
                )
            refs = {"fp32": op.reference(p, *inputs)}
            for name, fn in (("rz", rz), ("rn", to_tf32)):
                r = list(inputs)
                r[0] = fn(inputs[0].contiguous())
                r[1] = fn(inputs[1].contiguous())
                refs[name] = op.reference(p, *r)
            for who, out in outs.items():
                row = {"shape": shape, "layout": layout, "case": case, "who": who}
                row.update(
                    {
                        f"vs_{k}": round(compare(out, ref, tol).worst_error, 3)
                        for k, ref in refs.items()
                    }
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
with open(sys.argv[1], "w") as f:
    json.dump(rows, f, indent=0)
