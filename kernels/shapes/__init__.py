"""The public shape set: named problems that benchmarks and leaderboards share.

Matmul: the eight AutoKernel shapes (tiny .. llm_mlp, AutoKernel paper Table 2) plus decode
shapes (M = 1 and 16 against 4096x4096 and 14336x4096 weights). Memory-bound: Llama-sized
rows (hidden 4096 / 8192, vocab 32000 / 128256, 32 heads of 128).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels.problem import Problem


@dataclass(frozen=True)
class NamedProblem:
    name: str  # "<op>/<label>", unique in the set
    problem: Problem
    note: str = ""


def _mm(label: str, m: int, n: int, k: int, note: str) -> NamedProblem:
    return NamedProblem(f"matmul/{label}", Problem("matmul", (m, n, k), "bf16", "NN"), note)


MATMUL = [
    _mm("tiny", 128, 128, 128, "minimum viable"),
    _mm("small", 512, 512, 512, "small workload"),
    _mm("large", 2048, 2048, 2048, "production-like"),
    _mm("xlarge", 4096, 4096, 4096, "stress test"),
    _mm("tall", 8192, 1024, 1024, "non-square"),
    _mm("deep_k", 1024, 1024, 8192, "large reduction dim"),
    _mm("llm_qkv", 4096, 4096, 512, "attention pattern"),
    _mm("llm_mlp", 4096, 11008, 4096, "feed-forward pattern"),
    _mm("decode_m1_4096", 1, 4096, 4096, "decode, one token, 4096x4096 weight"),
    _mm("decode_m16_4096", 16, 4096, 4096, "decode, 16 tokens, 4096x4096 weight"),
    _mm("decode_m1_14336", 1, 14336, 4096, "decode, one token, 14336x4096 weight"),
    _mm("decode_m16_14336", 16, 14336, 4096, "decode, 16 tokens, 14336x4096 weight"),
]


def _row(op: str, label: str, m: int, n: int, note: str, dtype: str = "bf16") -> NamedProblem:
    return NamedProblem(f"{op}/{label}", Problem(op, (m, n), dtype), note)


MEMORY_BOUND = [
    _row("rmsnorm", "llama8b", 8192, 4096, "8192 tokens, hidden 4096"),
    _row("rmsnorm", "llama70b", 8192, 8192, "8192 tokens, hidden 8192"),
    _row("layernorm", "h4096", 8192, 4096, "8192 tokens, hidden 4096"),
    _row("layernorm", "h8192", 8192, 8192, "8192 tokens, hidden 8192"),
    _row("softmax", "s4096", 8192, 4096, "attention rows of 4096"),
    _row("softmax", "s8192", 8192, 8192, "attention rows of 8192"),
    _row("cross_entropy", "w8192", 8192, 8192, "8192-wide rows (the issue's target width)"),
    _row("cross_entropy", "llama2", 4096, 32000, "vocab 32000"),
    _row("cross_entropy", "llama3", 4096, 128256, "vocab 128256"),
    _row("sum", "w8192", 8192, 8192, "row sums"),
    NamedProblem(
        "rotary/llama8b", Problem("rotary", (4096, 32, 128), "bf16"), "4096 tokens, 32 heads of 128"
    ),
]

OTHERS = [
    NamedProblem(
        "attention/llama_prefill",
        Problem("attention", (4, 32, 2048, 128), "bf16", "causal"),
        "batch 4, 32 heads, 2048 tokens, head dim 128",
    ),
    NamedProblem(
        "swiglu/llama8b",
        Problem("swiglu", (4096, 4096, 14336), "bf16"),
        "M=4096, d=4096, ffn=14336",
    ),
]


def public_problems() -> list[NamedProblem]:
    from kernels import all_ops

    known = all_ops()
    return [p for p in MATMUL + MEMORY_BOUND + OTHERS if p.problem.op in known]
