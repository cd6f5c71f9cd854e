"""Where qkv_rotary_cutlass_sm90's time goes at GPT-J's q/k/v (issue 25): each build timed as
the family runs it, and again with no column rotated (the same GEMM and stores, no cos/sin
loads or rotation), beside cuBLAS's GEMM of the same FLOPs and the eager baseline.

On an H100 the family's default ran 299.8 us where a plain CUTLASS GEMM at the same
(2048, 12288, 4096) ran 270.5 and cuBLAS 267 (qkv_rotary_points_h100_gptj.json,
matmul_points_h100_gptj_qkv.json): the fused rotary cost what the separate pass it removes
costs, so the model gained nothing from it (model_gptj_block_h100_v2.json). Building here
needs only nvcc and the CUTLASS headers; the GPU side needs only torch (the device image's),
so a device call carries the builds and this tree, nothing else.

    python -m benchmarks.qkv_rotary_cutlass_probe --build DIR [--source FILE.cu] [--name PREFIX] [--plain]
    python -m benchmarks.qkv_rotary_cutlass_probe --libs DIR --out F.json      # on the GPU

--source builds another version of the family's .cu (e.g. `git show REV:...`) under --name's
prefix, so one run times an epilogue before and after a change (an older source takes only
the register epilogue's --configs). --plain also builds `matmul_cutlass_sm90` at the same tiles
(plain_*.so, CUTLASS's own epilogue, no rotary): on an H100 the TMA-store build ran 286 us with
nothing rotated where cuBLAS ran 263 (qkv_rotary_cutlass_probe_h100.json), and the plain GEMM's
270.5 was another run's; timed in one run, the three say whether the gap is this family's GEMM.
It was not (qkv_rotary_cutlass_probe_h100_v2.json): the plain GEMM ran 265, and a diagnostic
copy of the family whose EVT leaf did no work 264.5; the leaf's per-value work was the gap.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import cutlass_build_abi, results_record
from benchmarks.cutlass_build_abi import INT, INT64, PTR, open_build, open_plain

SOURCE = Path(__file__).resolve().parents[1] / "kernels/ops/qkv_rotary/families/cutlass_sm90.cu"
# GPT-J-6B's q/k/v at 2 x 1024 tokens: M tokens, heads, kv heads, head dim, model dim; rotary
# on the first 64 of each q and k head's 256 dims (rotate every two)
SHAPE = (2048, 16, 16, 256, 4096)
ROTARY_DIM = 64
# name: (tile M, N, K), (cluster M, N), schedule (0 cooperative, 1 ping-pong), epilogue (0 the
# register epilogue, 1 the EVT leaf in CUTLASS's TMA-store epilogue)
CONFIGS = {
    "t128x256_c2x1_coop": ((128, 256, 64), (2, 1), 0, 0),  # the family's default
    "t128x256_c1x1_coop": ((128, 256, 64), (1, 1), 0, 0),
    "t64x256_c1x1_ping": ((64, 256, 64), (1, 1), 1, 0),
    "t128x256_c2x1_coop_tma": ((128, 256, 64), (2, 1), 0, 1),
    "t128x128_c2x1_ping_tma": ((128, 128, 64), (2, 1), 1, 1),
    "t128x256_c1x1_coop_tma": ((128, 256, 64), (1, 1), 0, 1),
    "t256x128_c1x2_coop_tma": ((256, 128, 64), (1, 2), 0, 1),
}
TILE_ORDER = (1, 0)  # swizzle, raster: CUTLASS's own (kf::TileOrder)
PLAIN_CONFIGS = ("t128x256_c2x1_coop", "t128x256_c1x1_coop")  # the register epilogue's tiles


def nvcc_command(config: str, source: Path, out: Path) -> list[str]:
    *gemm, epilogue = CONFIGS[config]  # tile, cluster, schedule; the epilogue
    return cutlass_build_abi.gemm_command(*gemm) + [
        f"-DKF_HEAD_DIM={SHAPE[3]}", "-DKF_ROPE=1", f"-DKF_ROTARY_DIM={ROTARY_DIM}",
        "-DKF_ROW_SCALE=0", f"-DKF_EPILOGUE={epilogue}", str(source), "-o", str(out),
    ]  # fmt: skip


def plain_nvcc_command(config: str, out: Path) -> list[str]:
    """matmul_cutlass_sm90's build of this config: x (M, K) @ w (N, K)^T, nothing added."""
    return cutlass_build_abi.plain_gemm_command(*CONFIGS[config][:3], out)


def build(out_dir: Path, prefix: str, jobs: int, configs: list[str], command) -> dict:
    """Compiles each config to out_dir/PREFIX_CONFIG.so; command(config, out) is its nvcc line."""
    out_dir.mkdir(parents=True, exist_ok=True)

    def one(config: str) -> tuple[str, dict]:
        name = f"{prefix}_{config}"
        t0 = time.perf_counter()
        proc = subprocess.run(
            command(config, out_dir / f"{name}.so"), capture_output=True, text=True
        )
        registers = [line.strip() for line in proc.stderr.splitlines() if "registers" in line]
        return name, {"ok": proc.returncode == 0, "seconds": round(time.perf_counter() - t0, 1),
                      "ptxas": registers[-1:], "log": "" if proc.returncode == 0 else proc.stderr[-2000:]}  # fmt: skip

    with ThreadPoolExecutor(jobs) as pool:
        return dict(pool.map(one, configs))


def build_family(out_dir: Path, source: Path, prefix: str, jobs: int, configs: list[str]) -> dict:
    from kernels.epilogue_gemm import cuda_source

    out_dir.mkdir(parents=True, exist_ok=True)
    pasted = out_dir / f"{prefix}.cu"  # the shared GEMM and the op's epilogue, as candidates get
    pasted.write_text(cuda_source(source))
    return build(out_dir, prefix, jobs, configs, lambda c, out: nvcc_command(c, pasted, out))


def load(path: Path) -> ctypes.CDLL:
    # kf_qkv_rotary's ABI 3 (the family's FUNCTIONS): x, w, bias, cos, sin, row scale, out,
    # m, n, k, head dim, rotated columns, the strides of x, w, cos/sin and out, the tile order
    # (swizzle, raster), workspace, its bytes, stream
    return open_build(
        path, "kf_qkv_rotary", [PTR] * 7 + [INT] * 5 + [INT64] * 4 + [INT, INT, PTR, INT64, PTR], 5
    )


def probe(libs: dict, plain_libs: dict) -> dict:
    import torch

    from harness.results import Regime
    from harness.timing import time_interleaved
    from kernels.ops.qkv_rotary.op import rotate_pairs

    m, h, hkv, d, k = SHAPE
    n, rotated = (h + 2 * hkv) * d, (h + hkv) * d
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).bfloat16()
    angle = torch.rand(m, ROTARY_DIM // 2, device="cuda", generator=gen) * 6.3
    cos, sin = angle.cos().bfloat16(), angle.sin().bfloat16()
    plain = (x.float() @ w.float().T).view(m, h + 2 * hkv, d)
    turned = torch.cat([rotate_pairs(plain[:, : h + hkv], cos.float(), sin.float()),
                        plain[:, h + hkv :]], dim=1).reshape(m, n)  # fmt: skip
    references = {True: turned, False: plain.reshape(m, n)}
    scale = turned.abs().max().item()

    def eager():  # the op's baseline: one GEMM over the three weights, then the rotation
        y = torch.nn.functional.linear(x, w).view(m, h + 2 * hkv, d)
        return rotate_pairs(y[:, : h + hkv], cos, sin), y[:, h + hkv :]

    fns = {"eager": eager, "gemm": lambda: torch.matmul(x, w.T)}
    stream = torch.cuda.current_stream().cuda_stream
    row: dict = {"shape": "x".join(map(str, SHAPE)), "rotary_dim": ROTARY_DIM, "builds": {}}
    for name, lib in plain_libs.items():
        gemm = cutlass_build_abi.plain_gemm(lib, x, w)
        err = (gemm().float() - references[False]).abs().max().item() / scale
        torch.cuda.synchronize()
        row["builds"][name] = {"describe": lib.kf_describe().decode(), "rel_err": round(err, 6)}
        fns[name] = gemm
    for name, lib in libs.items():
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ws_bytes = lib.kf_workspace_size(m, n, k, *TILE_ORDER)
        ws = torch.empty(max(1, ws_bytes), device="cuda", dtype=torch.uint8)
        row["builds"][name] = {"describe": lib.kf_describe().decode()}
        for rotate in (True, False):

            def ours(lib=lib, out=out, ws=ws, cols=rotated if rotate else 0):
                code = lib.kf_qkv_rotary(
                    x.data_ptr(), w.data_ptr(), None, cos.data_ptr(), sin.data_ptr(), None,
                    out.data_ptr(), m, n, k, d, cols, k, k, cos.stride(0), n, *TILE_ORDER,
                    ws.data_ptr(), ws.numel(), stream,
                )  # fmt: skip
                if code:
                    raise RuntimeError(lib.kf_last_error().decode())
                return out

            label = name if rotate else f"{name}/unrotated"
            err = (ours().float() - references[rotate]).abs().max().item() / scale
            torch.cuda.synchronize()
            row["builds"][name]["rel_err" if rotate else "unrotated_rel_err"] = round(err, 6)
            fns[label] = ours
    samples = time_interleaved(
        fns, regime=Regime.OFFLINE, min_samples=15, max_samples=60, target_rel_err=0.005,
        max_seconds=60,
    )  # fmt: skip
    row["median_us"] = {name: round(s.plain_stats().median_us, 1) for name, s in samples.items()}
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, help="compile every configuration into this folder")
    ap.add_argument("--source", type=Path, default=SOURCE, help="the family's .cu to build")
    ap.add_argument("--name", default="current", help="the builds' name prefix")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--configs", help="which of CONFIGS to build, comma-separated (default all)")
    ap.add_argument("--plain", action="store_true", help="also build matmul_cutlass_sm90's GEMM")
    ap.add_argument("--libs", type=Path, help="a --build folder: time every build in it")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.build:
        configs = args.configs.split(",") if args.configs else list(CONFIGS)
        built = build_family(args.build, args.source, args.name, args.jobs, configs)
        if args.plain:
            built |= build(args.build, "plain", args.jobs, list(PLAIN_CONFIGS), plain_nvcc_command)
        for name, info in built.items():
            print(name, "ok" if info["ok"] else "FAILED", info["seconds"], "s", info["ptxas"],
                  info["log"])  # fmt: skip
        return 0 if all(i["ok"] for i in built.values()) else 1
    record = results_record.stamp("benchmarks.qkv_rotary_cutlass_probe", argv)
    paths = sorted(args.libs.glob("*.so"))
    libs = {path.stem: load(path) for path in paths if not path.stem.startswith("plain_")}
    plain_libs = {path.stem: open_plain(path) for path in paths if path.stem.startswith("plain_")}
    record["row"] = probe(libs, plain_libs)
    print(record["row"], flush=True)
    results_record.write(record, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
