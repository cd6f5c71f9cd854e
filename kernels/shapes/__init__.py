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


# The unseen validation set (issue 13): bf16 NN GEMMs taken from published model configs, none of
# them in MATMUL above, so nothing was tuned on them. A is (M, K) activations, B is (K, N) weights.
# Decode rows stream their weights (M <= 32), MoE rows are one expert's tokens, deep-K rows are
# down projections, and the odd rows have sizes no tile divides (GPT-2's vocab 50257 also leaves
# B's rows unaligned to 16 bytes, which rules out TMA on B).
UNSEEN_MATMUL = [
    _mm("dec_l3_8b_qkv_m1", 1, 6144, 4096, "Llama-3-8B q+k+v, 1 token"),
    _mm("dec_l3_8b_gateup_m8", 8, 28672, 4096, "Llama-3-8B gate+up, 8 tokens"),
    _mm("dec_l3_8b_down_m4", 4, 4096, 14336, "Llama-3-8B down, 4 tokens"),
    _mm("dec_l3_70b_o_m32", 32, 8192, 8192, "Llama-3-70B o_proj, 32 tokens"),
    _mm("dec_qwen2_7b_down_m2", 2, 3584, 18944, "Qwen2-7B down, 2 tokens"),
    _mm("dec_qwen2_7b_qkv_m16", 16, 4608, 3584, "Qwen2-7B q+k+v, 16 tokens"),
    _mm("dec_phi3_mini_down_m24", 24, 3072, 8192, "Phi-3-mini down, 24 tokens"),
    _mm("dec_l3_8b_lmhead_m1", 1, 128256, 4096, "Llama-3-8B LM head, 1 token"),
    _mm("moe_mixtral_w1_m32", 32, 14336, 4096, "Mixtral-8x7B expert w1, 32 tokens"),
    _mm("moe_mixtral_w2_m64", 64, 4096, 14336, "Mixtral-8x7B expert w2, 64 tokens"),
    _mm("moe_dsv3_up_m256", 256, 2048, 7168, "DeepSeek-V3 routed expert up, 256 tokens"),
    _mm("moe_qwen15_up_m128", 128, 1408, 2048, "Qwen1.5-MoE-A2.7B expert up, 128 tokens"),
    _mm("mla_dsv3_qa_m128", 128, 1536, 7168, "DeepSeek-V3 q_a_proj, 128 tokens"),
    _mm("pre_l3_8b_qkv", 2048, 6144, 4096, "Llama-3-8B q+k+v, 2048 tokens"),
    _mm("pre_mistral_up", 2048, 14336, 4096, "Mistral-7B up, 2048 tokens"),
    _mm("pre_qwen2_7b_down", 4096, 3584, 18944, "Qwen2-7B down, 4096 tokens (deep K)"),
    _mm("pre_l3_70b_down", 2048, 8192, 28672, "Llama-3-70B down, 2048 tokens (deep K)"),
    _mm("pre_dsv3_kva", 4096, 576, 7168, "DeepSeek-V3 kv_a_proj_with_mqa, 4096 tokens"),
    _mm("pre_l2_lmhead", 2048, 32000, 4096, "Llama-2 LM head, 2048 tokens"),
    _mm("pre_whisper_l_mlp", 1500, 5120, 1280, "Whisper-large encoder MLP up, 1500 frames"),
    _mm("odd_cube_3000", 3000, 3000, 3000, "odd cube"),
    _mm("odd_deepk_512", 512, 512, 32768, "small output, very deep K"),
    _mm("odd_clip_mlp", 77, 3072, 768, "CLIP text MLP up, 77 tokens"),
    _mm("odd_gpt2_lmhead", 1024, 50257, 768, "GPT-2 LM head, 1024 tokens (N odd)"),
    _mm("big_cube_8192", 8192, 8192, 8192, "large cube (the 1.02x target with 4096^3)"),
]


def public_problems() -> list[NamedProblem]:
    from kernels import all_ops

    known = all_ops()
    return [p for p in MATMUL + MEMORY_BOUND + OTHERS if p.problem.op in known]


SET_NAMES = ("public", "unseen")


def problem_set(name: str) -> list[NamedProblem]:
    """A named set for `python -m benchmarks --set NAME`."""
    if name == "public":
        return public_problems()
    if name == "unseen":
        return list(UNSEEN_MATMUL)
    raise ValueError(f"unknown problem set {name!r}; known: {', '.join(SET_NAMES)}")
