"""Can one CUTLASS GEMM over interleaved gate/up weights, gated in its epilogue, beat what
torch.compile makes of a SwiGLU MLP's gate and up projections at prefill sizes? (issue 25)

On prefill layers the GEMMs already run at the roof (Qwen2-7B's layer spends 85 % of its time
in cuBLAS GEMMs), so a model-level win has to come from the passes around them. For SwiGLU,
torch.compile runs two cuBLAS GEMMs that write two (M, N) intermediates and one fused kernel
that reads both and writes silu(gate) * up: 4 x M x N elements of traffic (310 MB on Qwen2-7B,
~75 us at 4.1 TB/s) that one GEMM gated in its epilogue never makes. Our Triton swiglu_gate
family reads pointers without TMA and ran 0.962x of compile there (model_qwen2_block_h200.json);
Triton GEMMs reach 0.5-0.7x of cuBLAS at these sizes on the H200 (both_ways_h200_*), so the
fusion needs a CUTLASS mainloop: kernels/ops/swiglu_gate/families/cutlass_sm90.cu.

This times, interleaved under the harness's protocol (harness.timing, OFFLINE): the eager
module (two F.linear, silu, mul), torch.compile of it, torch.matmul over the interleaved
(2N, K) weight alone (the same FLOPs with no gating: the GEMM floor) and each CUTLASS
configuration; and checks each configuration against an fp32 reference beside eager's error.

    python -m benchmarks.swiglu_cutlass_probe --build DIR [--plain]   # any machine with nvcc
    python -m benchmarks.swiglu_cutlass_probe --libs DIR --out F.json   # on the GPU
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import results_record
from benchmarks.cutlass_build_abi import (
    INT,
    INT64,
    PTR,
    gemm_command,
    open_build,
    open_plain,
    plain_gemm,
    plain_gemm_command,
)
from kernels.ops.swiglu_gate.op import interleave

SOURCE = Path(__file__).resolve().parents[1] / "kernels/ops/swiglu_gate/families/cutlass_sm90.cu"
# name: (tile M, N, K), (cluster M, N), schedule (0 cooperative, 1 ping-pong), store (0 each
# thread its 2 outputs, 1 a quad's lanes trade to 8 each, 2 a bulk copy per row from shared
# memory); all over the op's interleave of 8
CONFIGS = {
    "g8_t128x256x64_c2x1_coop": ((128, 256, 64), (2, 1), 0, 0),
    "g8q_t128x256x64_c2x1_coop": ((128, 256, 64), (2, 1), 0, 1),
    "g8_t128x256x64_c1x1_coop": ((128, 256, 64), (1, 1), 0, 0),
    "g8_t256x128x64_c1x2_coop": ((256, 128, 64), (1, 2), 0, 0),
    "g8_t128x128x64_c2x1_ping": ((128, 128, 64), (2, 1), 1, 0),
    "g8q_t128x128x64_c2x1_ping": ((128, 128, 64), (2, 1), 1, 1),
    "g8_t64x256x64_c1x1_ping": ((64, 256, 64), (1, 1), 1, 0),
    "g8q_t64x256x64_c1x1_ping": ((64, 256, 64), (1, 1), 1, 1),
    "g8b_t128x256x64_c2x1_coop": ((128, 256, 64), (2, 1), 0, 2),
    "g8b_t128x256x64_c1x1_coop": ((128, 256, 64), (1, 1), 0, 2),
    "g8b_t256x128x64_c1x2_coop": ((256, 128, 64), (1, 2), 0, 2),
}
TILE_ORDER = (1, 0)  # swizzle, raster: CUTLASS's own (kf::TileOrder)
# --plain: matmul_cutlass_sm90's GEMM over the same (M, 2N, K) with nothing added (CUTLASS's own
# TMA-store epilogue): with gemm_2n (cuBLAS) it splits a gated build's distance from the GEMM
# floor into the mainloop's and the epilogue's. The last is cuBLAS's own tile and cluster at
# Qwen2-7B's size on an H100 (nvjet 256x128, 1x2: model_qwen2_block_h100.json's kernel table).
PLAIN_CONFIGS = {
    "plain_t128x256x64_c2x1_coop": ((128, 256, 64), (2, 1), 0),
    "plain_t128x128x64_c2x1_ping": ((128, 128, 64), (2, 1), 1),
    "plain_t256x128x64_c1x2_coop": ((256, 128, 64), (1, 2), 0),
}
SHAPES = {  # (M tokens, N hidden, K model dim)
    "qwen2_7b_2x1024": (2048, 18944, 3584),
    "llama3_8b_2x1024": (2048, 14336, 4096),
    "llama_block_16384": (16384, 2816, 1024),
}


def nvcc_command(name: str, source: Path, out: Path) -> list[str]:
    if name in PLAIN_CONFIGS:
        return plain_gemm_command(*PLAIN_CONFIGS[name], out)
    tile, cluster, schedule, store = CONFIGS[name]
    return gemm_command(tile, cluster, schedule) + [
        f"-DKF_STORE={store}",
        str(source),
        "-o",
        str(out),
    ]


def build(out_dir: Path, jobs: int, names: list[str] | None = None) -> dict:
    from kernels.epilogue_gemm import cuda_source

    out_dir.mkdir(parents=True, exist_ok=True)
    source = out_dir / SOURCE.name  # the shared GEMM and the op's epilogue, as candidates get them
    source.write_text(cuda_source(SOURCE))

    def one(name: str) -> tuple[str, dict]:
        t0 = time.perf_counter()
        proc = subprocess.run(
            nvcc_command(name, source, out_dir / f"{name}.so"), capture_output=True, text=True
        )
        return name, {"ok": proc.returncode == 0, "seconds": round(time.perf_counter() - t0, 1),
                      "log": proc.stderr[-2000:]}  # fmt: skip

    with ThreadPoolExecutor(jobs) as pool:
        return dict(pool.map(one, names or list(CONFIGS)))


def load(path: Path) -> ctypes.CDLL:
    # kf_swiglu's ABI 3 (the family's FUNCTIONS): x, w, row scale, out, m, n, k, the strides,
    # the tile order (swizzle, raster), workspace, its bytes, stream
    return open_build(
        path,
        "kf_swiglu",
        [PTR, PTR, PTR, PTR, INT, INT, INT, INT64, INT64, INT64, INT, INT, PTR, INT64, PTR],
        5,
    )


def probe_shape(shape, libs: dict, plain_libs: dict, compile_too: bool) -> dict:
    import torch
    import torch.nn.functional as F

    from harness.results import Regime
    from harness.timing import time_interleaved

    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    w_gate = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).bfloat16()
    w_up = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).bfloat16()
    w = interleave(w_gate, w_up)
    ref = F.silu(x.float() @ w_gate.float().T) * (x.float() @ w_up.float().T)
    scale = ref.abs().max().item()

    def eager():
        return F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)

    def rel_err(out) -> float:
        return round((out.float() - ref).abs().max().item() / scale, 6)

    row: dict = {"shape": "x".join(map(str, shape)), "eager_rel_err": rel_err(eager())}
    fns = {"eager": eager, "gemm_2n": lambda: torch.matmul(x, w.T)}
    if compile_too:
        compiled = torch.compile(eager)
        t0 = time.perf_counter()
        row["compile_rel_err"] = rel_err(compiled())
        row["compile_s"] = round(time.perf_counter() - t0, 1)
        fns["compile"] = compiled
    stream = torch.cuda.current_stream().cuda_stream
    row["configs"] = {}
    if plain_libs:
        product = x.float() @ w.float().T
        for name, lib in plain_libs.items():
            gemm = plain_gemm(lib, x, w)
            err = (gemm().float() - product).abs().max().item() / product.abs().max().item()
            torch.cuda.synchronize()
            row["configs"][name] = {
                "rel_err": round(err, 6),
                "describe": lib.kf_describe().decode(),
            }
            fns[name] = gemm
        del product
    for name, lib in libs.items():
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ws_bytes = lib.kf_workspace_size(m, n, k, *TILE_ORDER)
        ws = torch.empty(max(1, ws_bytes), device="cuda", dtype=torch.uint8)

        def ours(lib=lib, out=out, ws=ws):
            code = lib.kf_swiglu(x.data_ptr(), w.data_ptr(), None, out.data_ptr(), m, n, k, k, k,
                                 n, *TILE_ORDER, ws.data_ptr(), ws.numel(), stream)  # fmt: skip
            if code:
                raise RuntimeError(lib.kf_last_error().decode())
            return out

        try:
            err = rel_err(ours())
            torch.cuda.synchronize()
        except RuntimeError as exc:
            row["configs"][name] = {"error": str(exc)}
            continue
        row["configs"][name] = {"rel_err": err, "describe": lib.kf_describe().decode()}
        fns[name] = ours
    samples = time_interleaved(
        fns, regime=Regime.OFFLINE, min_samples=15, max_samples=60, target_rel_err=0.005,
        max_seconds=20,
    )  # fmt: skip
    times = {name: s.plain_stats().median_us for name, s in samples.items()}
    row["median_us"] = {name: round(t, 1) for name, t in times.items()}
    best = min(("compile", "eager"), key=lambda b: times.get(b, float("inf")))
    row["best_baseline"] = best
    for name in [*plain_libs, *libs]:
        if name in times:
            if name in libs:  # a plain GEMM is no SwiGLU: only its distance from cuBLAS's
                row["configs"][name]["speedup_vs_" + best] = round(times[best] / times[name], 3)
            row["configs"][name]["vs_gemm_2n"] = round(times["gemm_2n"] / times[name], 3)
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, help="compile every configuration into this folder")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument(
        "--plain", action="store_true", help="also build the plain GEMMs (PLAIN_CONFIGS)"
    )
    ap.add_argument("--only", help="with --build: just these configurations (comma-separated)")
    ap.add_argument("--libs", type=Path, help="a --build folder: time its libraries")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.build:
        names = [*CONFIGS, *(PLAIN_CONFIGS if args.plain else ())]
        if args.only:
            only = args.only.split(",")
            if unknown := sorted(set(only) - set(names)):
                ap.error(
                    f"--only: no configuration {', '.join(unknown)} (known: {', '.join(names)})"
                )
            names = [n for n in names if n in only]
        built = build(args.build, args.jobs, names)
        for name, info in built.items():
            print(name, "ok" if info["ok"] else "FAILED", info["seconds"], "s", info["log"][-300:])
        return 0 if all(i["ok"] for i in built.values()) else 1
    record = results_record.stamp("benchmarks.swiglu_cutlass_probe", argv)
    libs = {
        name: load(args.libs / f"{name}.so")
        for name in CONFIGS
        if (args.libs / f"{name}.so").exists()
    }
    plain_libs = {
        name: open_plain(args.libs / f"{name}.so")
        for name in PLAIN_CONFIGS
        if (args.libs / f"{name}.so").exists()
    }
    record["libraries"] = sorted([*libs, *plain_libs])
    record["rows"] = []
    for shape_name in args.shapes.split(","):
        row = probe_shape(SHAPES[shape_name], libs, plain_libs, not args.no_compile)
        row["name"] = shape_name
        print(row, flush=True)
        record["rows"].append(row)
        results_record.write(record, args.out)  # after every shape: a cut-short run keeps some
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
