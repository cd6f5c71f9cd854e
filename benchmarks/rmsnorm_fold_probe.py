"""What folding an RMSNorm into the GEMMs after it could save, measured before it is built.

    python -m benchmarks.rmsnorm_fold_probe --out F.json

Folded (issue 25 item 1), the norm's weight goes into the next GEMM's weight at load time and
its per-row scale rsqrt(mean(h^2) + eps) into the GEMM's epilogue; what stays in the graph is
the scale, which Inductor computes in the residual add's kernel. So the fold saves what the
compiled model's norm kernel does beyond that: writing the normalized rows (and reading them
again is the GEMM's either way). This times, with torch.compile and triton.testing.do_bench
(median, L2 cleared), the compiled model's kernel (residual add + RMSNorm: h and n) against
the folded graph's (residual add + the scale: h and a float per row), and the same without the
add (where a residual GEMM epilogue already wrote h), at the example models' norm shapes. A
trusted probe: no candidate code runs here.
"""

from __future__ import annotations

import argparse
import functools
import sys

from benchmarks import results_record

EPS = 1e-6
# name, rows (tokens), width: llama_block, Qwen2-7B's prefill, Llama-2-7B's 8-token decode.
SHAPES = (("llama_block", 16384, 1024), ("qwen2", 2048, 3584), ("llama_decode", 8, 4096))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    import torch
    from triton.testing import do_bench

    def scale(h):
        return torch.rsqrt(h.float().pow(2).mean(-1) + EPS)

    def norm(h, weight):  # HF's LlamaRMSNorm / Qwen2RMSNorm
        hf = h.float()
        return weight * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)).to(h.dtype)

    graphs = {
        "add_norm": lambda x, o, w: (x + o, norm(x + o, w)),
        "add_scale": lambda x, o, w: (x + o, scale(x + o)),
        "norm": lambda x, o, w: norm(x, w),
        "scale": lambda x, o, w: scale(x),
    }
    compiled = {name: torch.compile(fn, dynamic=False) for name, fn in graphs.items()}
    rows = []
    for name, m, k in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        x, o = (torch.randn(m, k, device="cuda", generator=gen).bfloat16() for _ in range(2))
        w = torch.rand(k, device="cuda", generator=gen).bfloat16() + 0.5
        row = {"shape": name, "rows": m, "width": k}
        for label, fn in compiled.items():
            call = functools.partial(fn, x, o, w)
            call()  # compiled for this shape now, not inside the timing
            row[f"{label}_us"] = 1000.0 * do_bench(call, return_mode="median")
        row["saved_with_add_us"] = row["add_norm_us"] - row["add_scale_us"]
        row["saved_alone_us"] = row["norm_us"] - row["scale_us"]
        rows.append(row)
        print(
            f"{name:13} add+norm {row['add_norm_us']:.1f} us, add+scale {row['add_scale_us']:.1f}"
            f" (saves {row['saved_with_add_us']:.1f}); norm {row['norm_us']:.1f}, scale"
            f" {row['scale_us']:.1f} (saves {row['saved_alone_us']:.1f})",
            flush=True,
        )
    record = results_record.stamp("benchmarks.rmsnorm_fold_probe", argv) | {"rows": rows}
    results_record.write(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
