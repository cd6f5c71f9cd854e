"""Which of PyTorch's SDPA backends is fastest at each prefill shape, on contiguous heads and on
a model's heads (views into one packed q/k/v projection), and where attention_flash stands.

    python -m benchmarks.sdpa_backends_probe --out F.json

Why: on the ViT block (model_vit_block_h200_v2.json) the compiled model's SDPA ran cuDNN's
kernel at 44.7 us, while the attention op's baseline timed 58 us at the same shape, so a kernel
screened 1.14x "torch" cost the model 18 us and the end-to-end ablation left it out. This
probe times each backend by itself (sdpa_kernel) and as PyTorch's dispatcher picks it, with
triton.testing.do_bench (median, L2 cleared between runs). A trusted probe of our own kernels:
no candidate code runs here.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys

from benchmarks import results_record

# name, B, H, S, D, k/v heads, causal: Qwen2-7B, GPT-J-6B and llama_block's prefill, ViT-B/16.
SHAPES = (
    ("qwen2", 2, 28, 1024, 128, 4, True),
    ("gptj", 4, 16, 512, 256, 16, True),
    ("llama_block", 8, 16, 2048, 64, 16, True),
    ("vit", 64, 12, 197, 64, 12, False),
)


def _heads(b, h, s, d, kv, packed, device, dtype):
    """q, k, v as [B, heads, S, D]: contiguous, or views into one [B, S, (H + 2 KV) D] tensor
    (a model's fused projection, its heads transposed)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    if not packed:
        return tuple(
            torch.randn(b, n, s, d, device=device, dtype=dtype, generator=gen) for n in (h, kv, kv)
        )
    qkv = torch.randn(b, s, (h + 2 * kv) * d, device=device, dtype=dtype, generator=gen)
    q, k, v = qkv.split([h * d, kv * d, kv * d], dim=-1)
    return tuple(x.view(b, s, -1, d).transpose(1, 2) for x in (q, k, v))


def _kernel_name(fn) -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    timed = [(getattr(e, "device_time_total", 0), e.key) for e in prof.key_averages()]
    return max(timed)[1] if timed and max(timed)[0] > 0 else "?"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench as do_bench_ms

    from kernels import all_ops
    from kernels.candidate import load_module
    from kernels.problem import Problem

    backends = {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }

    def do_bench(fn, **kwargs) -> float:  # microseconds
        return 1000.0 * do_bench_ms(fn, **kwargs)

    family = all_ops()["attention"].families()[0]
    rows = []
    for name, b, h, s, d, kv, causal in SHAPES:
        layout = "+".join(
            part
            for part in ("causal" if causal else "", f"kv_heads={kv}" if kv != h else "")
            if part
        )
        problem = Problem("attention", (b, h, s, d), "bf16", layout)
        modules = [
            (p, load_module(family.render(problem, p))) for p in family.starting_points(problem)
        ]
        for packed in (False, True):
            q, k, v = _heads(b, h, s, d, kv, packed, "cuda", torch.bfloat16)

            sdpa = functools.partial(
                F.scaled_dot_product_attention, q, k, v, is_causal=causal, enable_gqa=kv != h
            )
            row = {
                "shape": name,
                "problem": problem.key,
                "heads": "packed" if packed else "contiguous",
            }
            row["default_us"] = do_bench(sdpa, return_mode="median")
            row["default_kernel"] = _kernel_name(sdpa)
            for label, backend in backends.items():
                try:
                    with sdpa_kernel(backend):
                        row[f"{label}_us"] = do_bench(sdpa, return_mode="median")
                except RuntimeError as exc:
                    row[f"{label}_us"] = None
                    row[f"{label}_error"] = str(exc).splitlines()[0][:200]
            out = torch.empty(b, h, s, d, device="cuda", dtype=torch.bfloat16)
            ours = {}
            for params, module in modules:
                run = functools.partial(module.run, q, k, v, out=out)
                ours[json.dumps(params, sort_keys=True)] = do_bench(run, return_mode="median")
            row["ours_us"] = ours
            rows.append(row)
            times = {
                key: row[key]
                for key in row
                if key.endswith("_us") and row[key] and key != "ours_us"
            }
            print(
                f"{name:12} {row['heads']:10} "
                + " ".join(f"{key[:-3]}={t:.1f}" for key, t in times.items())
                + f" ours={min(ours.values()):.1f}  default: {row['default_kernel'][:70]}",
                flush=True,
            )
    record = results_record.stamp("benchmarks.sdpa_backends_probe", argv) | {"rows": rows}
    results_record.write(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
