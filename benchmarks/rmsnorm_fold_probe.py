"""What folding an RMSNorm into the GEMMs after it could save, measured before it is built.

    python -m benchmarks.rmsnorm_fold_probe --out F.json

Folded (issue 25 item 1), the norm's weight goes into the next GEMM's weight at load time and
its per-row scale rsqrt(mean(h^2) + eps) into the GEMM's epilogue; what stays in the graph is
the scale, which Inductor computes in the residual add's kernel. So the fold saves what the
compiled model's norm kernel does beyond that: writing the normalized rows (and reading them
again is the GEMM's either way). This times, with torch.compile in a CUDA graph (GPU time only,
inputs cycled past L2), the compiled model's kernel (residual add + RMSNorm: h and n) against
the folded graph's (residual add + the scale: h and a float per row), and the same without the
add (where a residual GEMM epilogue already wrote h), at the example models' norm shapes. A
trusted probe: no candidate code runs here.
"""

from __future__ import annotations

import argparse
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

    def graph_us(fn, inputs, calls=40):
        """GPU time of one call: `calls` calls in one CUDA graph (no host time between them),
        cycling through input sets larger than L2 together, the median of 10 replays."""
        for args in inputs:
            fn(*args)  # compiled for this shape now, not inside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(calls):
                fn(*inputs[i % len(inputs)])
        times = []
        for _ in range(10):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(1000.0 * start.elapsed_time(end) / calls)
        return sorted(times)[len(times) // 2]

    rows = []
    for name, m, k in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        sets = min(40, max(2, -(-(2**28) // (m * k * 4))))  # every set's x and o: 256 MB
        inputs = [
            tuple(torch.randn(m, k, device="cuda", generator=gen).bfloat16() for _ in range(2))
            + (torch.rand(k, device="cuda", generator=gen).bfloat16() + 0.5,)
            for _ in range(sets)
        ]
        row = {"shape": name, "rows": m, "width": k, "input_sets": sets}
        for label, fn in compiled.items():
            row[f"{label}_us"] = graph_us(fn, inputs)
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
