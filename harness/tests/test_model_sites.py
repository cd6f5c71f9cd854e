"""Sites (where a kernels/ op can stand in, found in Dynamo's graphs) and the rewrite that puts
custom ops there; the plan's groups with Linear time moved to fusions. Trusted harness code
in-process on the CPU; kernels here are PyTorch stand-ins that compute each op's reference."""

from __future__ import annotations

import importlib.util
import operator
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import kernels
from harness.model import ops as kernel_ops
from harness.model.classify import FUSIONS, plan_groups
from harness.model.sites import Prepared
from harness.model.substitute import Substituting, compile_options
from harness.results import DeviceInfo
from kernels.ops.qkv_rotary.op import interleave_heads
from kernels.ops.swiglu_gate.op import interleave
from kernels.problem import Problem

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"kf_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if hasattr(module, "CPU"):  # the examples size themselves up where a GPU is visible
        vars(module)["_config"] = lambda: module.CPU
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    return model, module.get_inputs()


def _sites(model, inputs):
    finder = Substituting(model)
    with torch.no_grad():
        torch.compile(model, backend=finder, dynamic=False)(*inputs)
    return finder.sites


def _reference_op(problem: Problem):
    """A custom op whose 'kernel' is the op's own fp64 reference (exact, any dtype)."""
    op = kernels.get_op(problem.op)

    def run(*inputs, out):
        out.copy_(op.reference(problem, *inputs))

    # A stand-in for a loaded candidate module: kernel_op only calls its run().
    return kernel_ops.kernel_op(problem, types.SimpleNamespace(run=run))  # type: ignore[arg-type]


def _rewritten(model, inputs, sites, inner: str | None = None) -> tuple[Substituting, float]:
    """The model run with every fusion and module site given its reference op: the backend
    (which sites it replaced) and the output's relative error against the model's own.
    `inner`: the backend's (None: the rewritten graph as it is; "inductor": compiled)."""
    with torch.no_grad():
        want = model(*inputs)
    ops = {s.key: _reference_op(s.problem) for s in sites if s.kind != "matmul"}
    compile_options()
    kernel_ops.hits.clear()
    backend = Substituting(model, ops, inner=inner)
    with torch.no_grad():
        got = torch.compile(model, backend=backend, dynamic=False)(*inputs)
    return backend, float((got.float() - want.float()).norm() / want.float().norm())


def _random_norm_weights(model):
    """The examples' RMSNorm weights start at ones, which would hide a fold that drops them."""
    torch.manual_seed(3)
    for module in model.modules():
        if "rmsnorm" in type(module).__name__.lower():
            module.weight.data = (torch.rand_like(module.weight.float()) + 0.5).to(module.weight)


def test_it_finds_the_fusions_of_the_decode_example():
    model, inputs = _example("llama_decode")
    _random_norm_weights(model)
    by_kind: dict[str, list] = {}
    for site in _sites(model, inputs):
        by_kind.setdefault(site.kind, []).append(site)
    (swiglu, _), (qkv, _) = by_kind["swiglu_gate"], by_kind["qkv_rotary"]
    assert swiglu.where == ("layers.0.mlp.gate_proj", "layers.0.mlp.up_proj", "layers.0.mlp_norm")
    assert swiglu.covers == ("matmul/8x688x256/bf16/NT",) * 2
    # Its weights as one interleaved matrix with the RMSNorm before them folded in (layout
    # i8+rowscale: the norm's weight in both), made only when a kernel takes its place.
    assert swiglu.key == "swiglu_gate/8x688x256/bf16/i8+rowscale"
    prepared = swiglu.inputs[1]
    assert isinstance(prepared, Prepared)
    mlp, g = model.layers[0].mlp, model.layers[0].mlp_norm.weight.float()
    gate, up = ((w.float() * g).to(w.dtype) for w in (mlp.gate_proj.weight, mlp.up_proj.weight))
    assert torch.equal(prepared.make(), interleave(gate, up))
    assert qkv.key == "qkv_rotary/8x4x4x64x256/bf16" and len(qkv.covers) == 3
    assert [s.key for s in by_kind["decode_attention"]] == ["decode_attention/1x4x8x40x64/bf16"] * 2
    assert len(by_kind["matmul"]) == 14 and len(by_kind["module"]) == 9  # 5 norms, 4 rotary


def _with_biases(model, names=("q_proj", "k_proj", "v_proj")):
    """llama_decode with biased projections (Qwen2's q/k/v), same weights, large biases."""
    torch.manual_seed(1)
    for layer in model.layers:
        for name in names:
            old = getattr(layer.attn, name)
            new = torch.nn.Linear(old.in_features, old.out_features, bias=True)
            new = new.to(dtype=old.weight.dtype)
            with torch.no_grad():
                new.weight.copy_(old.weight)
                new.bias.copy_(torch.randn(old.out_features))
            setattr(layer.attn, name, new)
    return model


def test_biased_q_k_v_projections_are_one_qkv_rotary_site_with_their_biases():
    model, inputs = _example("llama_decode")
    model = _with_biases(model)
    sites = _sites(model, inputs)
    qkv, _ = [s for s in sites if s.kind == "qkv_rotary"]  # one a layer
    assert qkv.key == "qkv_rotary/8x4x4x64x256/bf16/+bias"
    assert qkv.covers == ("matmul/8x256x256/bf16/NT+bias",) * 3
    _, rel = _rewritten(model, inputs, sites)
    assert kernel_ops.hits[qkv.key] >= 1 and rel < 2e-2


def test_prefill_q_k_v_with_constant_weights_take_one_interleaved_weight():
    """Layout "i8+bias" (Qwen2's q/k/v with biases, 64 tokens): the three weights and biases as
    one interleaved matrix and vector, made only when a kernel takes the site's place, with the
    RMSNorm before them folded in ("+rowscale": its weight in theirs, the norm's input the
    op's); a decode step (8 rows, above) keeps the three weights the dual family streams."""
    model, inputs = _example("qwen2_block")
    _random_norm_weights(model)
    sites = _sites(model, inputs)
    (qkv,) = [s for s in sites if s.kind == "qkv_rotary"]
    assert qkv.key == "qkv_rotary/64x4x2x64x256/bf16/i8+bias+rowscale+kv_heads=2"
    assert qkv.where[-1] == "input_layernorm"
    _, w, _, _, b = qkv.inputs
    assert isinstance(w, Prepared) and isinstance(b, Prepared)
    attn, g = model.self_attn, model.input_layernorm.weight.float()
    projections = [attn.q_proj, attn.k_proj, attn.v_proj]
    want = torch.cat([(p.weight.float() * g).to(p.weight.dtype) for p in projections])
    assert torch.equal(w.make(), interleave_heads(want, 64))
    assert torch.equal(b.make(), interleave_heads(torch.cat([p.bias for p in projections]), 64))
    _, rel = _rewritten(model, inputs, sites)
    assert kernel_ops.hits[qkv.key] >= 1 and rel < 2e-2


def test_q_and_k_biased_but_not_v_is_no_qkv_rotary_site():
    model, inputs = _example("llama_decode")
    model = _with_biases(model, names=("q_proj", "k_proj"))
    assert not [s for s in _sites(model, inputs) if s.kind == "qkv_rotary"]


class _WrittenRotary(torch.nn.Module):
    """q/k/v projections with rotate-half written out in forward (no rotary module). `tables`:
    "buffers" (the model's cos/sin, on the (b, t, heads, D) views), "unequal_halves" (buffers
    whose halves differ: not rotate-half's), "hf" (HF Llama/Qwen2: computed in forward from
    position ids, on the heads transposed to (b, heads, t, D)), "hf_unequal" (the same with
    cat([f, 2 f]))."""

    def __init__(self, tables: str, dim=64, heads=4, seq=8, late=False):
        super().__init__()
        self.heads, self.d, self.tables, self.late = heads, dim // heads, tables, late
        self.q, self.k, self.v = (torch.nn.Linear(dim, dim, bias=False) for _ in range(3))
        freq = 10000.0 ** (-torch.arange(0, self.d, 2).float() / self.d)
        angle = torch.arange(seq).float()[:, None] * freq[None, :]
        other = angle + 0.5 if tables == "unequal_halves" else angle
        full = torch.cat([angle, other], dim=-1)
        self.register_buffer("cos", full.cos()[:, None, :])
        self.register_buffer("sin", full.sin()[:, None, :])
        self.register_buffer("inv_freq", freq)

    @staticmethod
    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def hf_tables(self, x, b, t):  # LlamaRotaryEmbedding.forward, then unsqueeze(1)
        position_ids = torch.arange(t)[None, :].expand(b, -1)
        inv = self.inv_freq[None, :, None].float().expand(b, -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        second = 2 * freqs if self.tables == "hf_unequal" else freqs
        emb = torch.cat((freqs, second), dim=-1)
        cos, sin = (emb.cos() * 1.0).to(x.dtype), (emb.sin() * 1.0).to(x.dtype)
        return cos.unsqueeze(1), sin.unsqueeze(1)

    def forward(self, x):
        b, t, _ = x.shape
        if self.tables.startswith("hf") and not self.late:  # HF: before the layers
            cos, sin = self.hf_tables(x, b, t)
        q, k, v = (p(x).view(b, t, self.heads, self.d) for p in (self.q, self.k, self.v))
        if self.tables.startswith("hf"):
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))
            if self.late:  # after v's view and transpose: the op could not go before them
                cos, sin = self.hf_tables(x, b, t)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        else:
            q, k = self.rotate(q, self.cos, self.sin), self.rotate(k, self.cos, self.sin)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize(
    ("tables", "found"),
    [("buffers", True), ("unequal_halves", False), ("hf", True), ("hf_unequal", False)],
)
def test_a_rotation_written_in_forward_is_a_qkv_site_when_its_tables_are_rotate_halfs(
    tables, found
):
    torch.manual_seed(0)
    model = _WrittenRotary(tables).to(torch.bfloat16).eval()
    x = torch.randn(2, 8, 64, dtype=torch.bfloat16)
    sites = [s for s in _sites(model, [x]) if s.kind == "qkv_rotary"]
    assert bool(sites) is found
    if not found:
        return
    assert sites[0].key == "qkv_rotary/16x4x4x16x64/bf16"
    backend, rel = _rewritten(model, [x], sites)
    assert [s.kind for s in backend.replaced] == ["qkv_rotary"] and rel < 2e-2


def test_a_site_whose_tables_come_after_a_use_of_v_is_left_as_the_model_wrote_it():
    torch.manual_seed(0)
    model = _WrittenRotary("hf", late=True).to(torch.bfloat16).eval()
    x = torch.randn(2, 8, 64, dtype=torch.bfloat16)
    [site] = [s for s in _sites(model, [x]) if s.kind == "qkv_rotary"]
    with torch.no_grad():
        want = model(x)
        backend = Substituting(model, {site.key: _reference_op(site.problem)})
        got = torch.compile(model, backend=backend, dynamic=False)(x)
    assert backend.replaced == [] and torch.equal(got, want)


def test_a_mask_that_is_not_causal_from_the_end_is_no_decode_attention_site():
    model, inputs = _example("llama_decode")
    for layer in model.layers:
        layer.attn.mask.fill_(True)  # every query sees every key: not the op's mask
    assert not [s for s in _sites(model, inputs) if s.kind == "decode_attention"]


def test_grouped_query_attention_over_the_cache_is_a_site_without_its_repeats():
    # HF's repeat_kv (new axis, expand, reshape) copies each cached head for its query heads;
    # the site reads the cache as it is and takes the copies out of the graph.
    model, inputs = _example("llama3_decode")
    attention = [s for s in _sites(model, inputs) if s.kind == "decode_attention"]
    assert [s.key for s in attention] == ["decode_attention/1x4x4x36x64/bf16/kv_heads=2"] * 2
    for site in attention:
        assert len(site.nodes) == 7  # the SDPA call and the three steps of each repeat
        assert site.inputs[1].target == operator.getitem  # the cache's slice, not its copy


def test_a_prefills_attention_is_a_site_that_reads_the_grouped_heads_without_their_repeats():
    # Qwen2 repeats its 2 key/value heads for the 4 query heads (repeat_interleave) before a
    # causal SDPA: the site takes the heads as they were, and the copies leave the graph.
    model, inputs = _example("qwen2_block")
    [site] = [s for s in _sites(model, inputs) if s.kind == "attention"]
    assert site.key == "attention/1x4x64x64/bf16/causal+kv_heads=2"
    assert len(site.nodes) == 3  # the SDPA call and the two repeats
    assert all(not _is_repeat(x) for x in site.inputs[1:])
    backend, rel = _rewritten(model, inputs, [site])
    assert [s.kind for s in backend.replaced] == ["attention"]
    assert kernel_ops.hits[site.key] == 1 and rel < 2e-2
    # The op's baseline (SDPA grouping the heads itself) does less than the model's code.
    assert "repeated 2x" in site.baseline_saves and "enable_gqa" in site.baseline_saves
    assert site.to_dict()["baseline_saves"] == site.baseline_saves
    # An encoder's attention (no mask): every key for every query; ViT's odd 65 tokens.
    model, inputs = _example("vit_block")
    [vit] = [s for s in _sites(model, inputs) if s.kind == "attention"]
    assert vit.key == "attention/2x3x65x64/bf16"
    assert vit.baseline_saves == "" and "baseline_saves" not in vit.to_dict()


@pytest.mark.parametrize("inner", [None, "inductor"])
def test_the_ops_pytorch_baseline_takes_the_place_of_the_repeats_and_the_sdpa_call(inner):
    # No kernel: SDPA grouping the heads (enable_gqa) where Qwen2 repeats k and v for it.
    # Its output is the model's, and no repeat is left in the graph that runs.
    model, inputs = _example("qwen2_block")
    [site] = [s for s in _sites(model, inputs) if s.kind == "attention"]
    with torch.no_grad():
        want = model(*inputs)
    graphs = []

    class Recording(Substituting):
        def __call__(self, gm, example_inputs):
            run = super().__call__(gm, example_inputs)
            graphs.append(gm)
            return run

    kernel_ops.hits.clear()
    backend = Recording(model, {site.key: kernel_ops.baseline_op(site.problem)}, inner=inner)
    with torch.no_grad():
        got = torch.compile(model, backend=backend, dynamic=False)(*inputs)
    assert [s.key for s in backend.replaced] == [site.key]
    # Eager: one call a forward; Inductor counts the calls its tracing made instead.
    assert kernel_ops.hits[site.key] == 1 if inner is None else kernel_ops.hits[site.key] >= 1
    assert float((got.float() - want.float()).norm() / want.float().norm()) < 1e-2
    assert graphs and not [n for g in graphs for n in g.graph.nodes if _is_repeat(n)]


def _is_repeat(node) -> bool:
    return isinstance(node, torch.fx.Node) and "repeat_interleave" in str(node.target)


class _MaskedPrefill(torch.nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.how = how
        mask = torch.ones(8, 8, dtype=torch.bool)
        mask[:, 6:] = False  # padding: the last two keys are nobody's
        self.register_buffer("mask", mask)

    def forward(self, q, k, v):
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if self.how == "mask":  # the model's own mask: neither attention op's
            return sdpa(q, k, v, attn_mask=self.mask) * 2
        if self.how == "dropout":
            return sdpa(q, k, v, dropout_p=0.1, is_causal=True) * 2
        return sdpa(q, k, v, is_causal=True, scale=0.5) * 2


@pytest.mark.parametrize("how", ["mask", "dropout", "scale"])
def test_an_attention_with_its_own_mask_dropout_or_scale_is_no_site(how):
    q, k, v = (torch.randn(1, 2, 8, 16, dtype=torch.float16) for _ in range(3))
    assert not [s for s in _sites(_MaskedPrefill(how).eval(), [q, k, v]) if "attention" in s.kind]


class _GroupedDecode(torch.nn.Module):
    """One decode attention over a cache of 2 heads for 4 query heads, grouped three ways."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.register_buffer("k", torch.randn(1, 2, 12, 16, dtype=torch.float16))
        self.register_buffer("v", torch.randn(1, 2, 12, 16, dtype=torch.float16))

    def forward(self, q):
        k, v = self.k, self.v
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if self.how == "enable_gqa":
            return sdpa(q, k, v, enable_gqa=True) * 2
        if self.how == "method":
            k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        elif self.how == "function":
            k, v = torch.repeat_interleave(k, 2, dim=1), torch.repeat_interleave(v, 2, dim=1)
        elif self.how == "one_of_two":  # v is repeated, k is not: no site
            v = v.repeat_interleave(2, dim=1)
            k = torch.cat([k, k], dim=1)
        return sdpa(q, k, v) * 2


@pytest.mark.parametrize("how", ["enable_gqa", "method", "function", "one_of_two"])
def test_each_way_of_grouping_the_cached_heads_is_found_and_rewritten(how):
    model = _GroupedDecode(how).eval()
    q = torch.randn(1, 4, 1, 16, dtype=torch.float16)
    with torch.no_grad():
        want = model(q)
    sites = [s for s in _sites(model, [q]) if s.kind == "decode_attention"]
    if how == "one_of_two":
        assert not sites
        return
    assert [s.key for s in sites] == ["decode_attention/1x4x1x12x16/fp16/kv_heads=2"]
    ops = {sites[0].key: _reference_op(sites[0].problem)}
    kernel_ops.hits.clear()
    backend = Substituting(model, ops)
    with torch.no_grad():
        got = torch.compile(model, backend=backend, dynamic=False)(q)
    assert kernel_ops.hits[sites[0].key] == 1
    assert torch.allclose(got.float(), want.float(), rtol=2e-3, atol=2e-3)


def test_a_biased_linear_and_its_activation_are_one_gemm_with_an_epilogue():
    model, inputs = _example("gptj_block")
    fused = [s for s in _sites(model, inputs) if s.kind == "matmul_epilogue"]
    assert [(s.key, s.covers) for s in fused] == [
        ("matmul/64x1024x256/bf16/NT+bias+gelu", ("matmul/64x1024x256/bf16/NT+bias",))
    ]
    # ViT's GELU is the exact one (erf): an epilogue of its own.
    model, inputs = _example("vit_block")
    fused = [s for s in _sites(model, inputs) if s.kind == "matmul_epilogue"]
    assert [(s.key, s.covers) for s in fused] == [
        ("matmul/130x768x192/bf16/NT+bias+gelu_erf", ("matmul/130x768x192/bf16/NT+bias",))
    ]


def test_gptjs_partial_rotary_of_adjacent_pairs_is_one_qkv_gemm_over_the_three_weights():
    model, inputs = _example("gptj_block")
    (site,) = [s for s in _sites(model, inputs) if s.kind == "qkv_rotary"]
    assert site.key == "qkv_rotary/64x4x4x64x256/bf16/pairs+rot=16+head_dim=64+kv_heads=4"
    assert site.where == ("q_proj", "k_proj", "v_proj")
    _, w, cos, sin = site.inputs
    weights = [model.q_proj.weight, model.k_proj.weight, model.v_proj.weight]
    assert torch.equal(w.make(), torch.cat(weights))
    # The model's tables repeat each angle for a pair's two dims: the op takes one per pair.
    assert torch.equal(cos, model.cos[:, 0::2]) and torch.equal(sin, model.sin[:, 0::2])
    backend, rel = _rewritten(model, inputs, [site])
    assert rel < 2e-2 and kernel_ops.hits[site.key] == 1


def test_a_linear_whose_only_use_is_a_residual_add_is_one_gemm_that_adds_it():
    model, inputs = _example("qwen2_block")
    fused = [s for s in _sites(model, inputs) if s.kind == "matmul_residual"]
    assert [(s.key, s.where, s.covers) for s in fused] == [
        ("matmul/64x256x256/bf16/NT+res", ("self_attn.o_proj",), ("matmul/64x256x256/bf16/NT",)),
        ("matmul/64x256x1024/bf16/NT+res", ("down_proj",), ("matmul/64x256x1024/bf16/NT",)),
    ]
    # GPT-J's parallel block adds attention's output to x, then the biased MLP's to that.
    model, inputs = _example("gptj_block")
    fused = [s for s in _sites(model, inputs) if s.kind == "matmul_residual"]
    assert [s.key for s in fused] == [
        "matmul/64x256x256/bf16/NT+res",
        "matmul/64x256x1024/bf16/NT+bias+res",
    ]
    # A decode step's rows stay the weight-streaming GEMM's: no residual site.
    model, inputs = _example("llama_decode")
    assert not [s for s in _sites(model, inputs) if s.kind == "matmul_residual"]


@pytest.mark.parametrize(
    "example",
    [
        "llama_block",
        "llama_decode",
        "llama3_decode",
        "gptj_block",
        "vit_block",
        "mlp",
        "qwen2_block",
    ],
)
def test_the_rewritten_model_matches_and_calls_every_op_once_per_site(example):
    model, inputs = _example(example)
    _random_norm_weights(model)  # so that a fold that drops a norm's weight shows
    backend, rel = _rewritten(model, inputs, _sites(model, inputs))
    assert rel < 2e-2  # bf16 end to end, the model's own rounding steps skipped
    fusions = [s for s in backend.replaced if s.kind in FUSIONS]
    assert fusions and all(kernel_ops.hits[s.key] >= 1 for s in backend.replaced)
    # A rotary call the qkv fusion took is not substituted again on its own.
    rotary_alone = [s for s in backend.replaced if s.key.startswith("rotary/")]
    assert not rotary_alone


class _RMSNorm(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


class _NormThenMlp(torch.nn.Module):
    """An RMSNorm, then SwiGLU's gate and up on its output; `reuse`: the normalized rows are
    also added to the result, so the norm cannot be folded away."""

    def __init__(self, reuse: bool):
        super().__init__()
        torch.manual_seed(5)
        self.norm = _RMSNorm(64)
        self.gate = torch.nn.Linear(64, 128, bias=False)
        self.up = torch.nn.Linear(64, 128, bias=False)
        self.down = torch.nn.Linear(128, 64, bias=False)
        self.reuse = reuse

    def forward(self, x):
        n = self.norm(x)
        y = self.down(F.silu(self.gate(n)) * self.up(n))
        return x + y + n if self.reuse else x + y


@pytest.mark.parametrize("inner", [None, "inductor"])
def test_an_rmsnorm_before_swiglus_gate_and_up_is_folded_into_them(inner):
    model = _NormThenMlp(reuse=False).to(torch.bfloat16).eval()
    # Rows 0.1x to 10x apart: the fold's row scale must be each row's own.
    inputs = ((torch.randn(2, 24, 64) * 10 ** (torch.rand(2, 24, 1) * 2 - 1)).bfloat16(),)
    sites = _sites(model, inputs)
    (swiglu,) = [s for s in sites if s.kind == "swiglu_gate"]
    assert swiglu.key == "swiglu_gate/48x128x64/bf16/i8+rowscale"
    assert swiglu.where[-1] == "norm"
    backend, rel = _rewritten(model, inputs, sites, inner=inner)
    assert rel < 2e-2
    replaced = {s.kind: s for s in backend.replaced}
    assert replaced["swiglu_gate"].key == swiglu.key
    assert not any(s.key.startswith("rmsnorm/") for s in backend.replaced), "the norm is gone"


def test_a_norm_whose_rows_are_used_elsewhere_is_not_folded():
    model = _NormThenMlp(reuse=True).to(torch.bfloat16).eval()
    inputs = (torch.randn(2, 24, 64).bfloat16(),)
    (swiglu,) = [s for s in _sites(model, inputs) if s.kind == "swiglu_gate"]
    assert swiglu.key == "swiglu_gate/48x128x64/bf16/i8"


@pytest.mark.parametrize("example", ["qwen2_block", "llama_block"])
def test_the_rewritten_model_compiles_with_the_constants_its_ops_take(example):
    # The kernels + torch.compile way: Inductor compiles the rewritten graph, whose ops take
    # constants made at rewrite (swiglu_gate's interleaved weight, rotary tables) as buffers.
    # It failed on the GPU (model_qwen2_block: "_kf_const_0_1 not found in
    # param_name_to_source") until those buffers carried a source.
    model, inputs = _example(example)
    _random_norm_weights(model)
    backend, rel = _rewritten(model, inputs, _sites(model, inputs), inner="inductor")
    constants = [s for s in backend.replaced if any(isinstance(v, Prepared) for v in s.inputs)]
    assert constants and rel < 2e-2


def test_a_kernel_op_compiles_through_its_fake_implementation():
    problem = Problem("swiglu_gate", (8, 24, 16), "fp32")  # fp32 is fine for a stand-in
    op = _reference_op(Problem("swiglu_gate", (8, 24, 16), "fp16"))
    x, wg, wu = (t.half() for t in kernels.get_op("swiglu_gate").make_inputs(
        problem, seed=0, device="cpu"))  # fmt: skip

    def fn(x, wg, wu):
        return op([x, wg, wu]) * 2

    got = torch.compile(fn, backend="aot_eager", dynamic=False)(x, wg, wu)
    want = 2 * torch.nn.functional.silu(x.double() @ wg.double().T) * (x.double() @ wu.double().T)
    assert got.shape == (8, 24) and torch.allclose(got.double(), want, rtol=1e-2, atol=1e-2)


def _group(op, label, time_us, problem=None, calls=1.0):
    return {"op": op, "label": label, "problem": problem, "time_us": time_us, "calls": calls}


def _p(op, shape, layout=""):
    return {"op": op, "shape": list(shape), "dtype": "bf16", "layout": layout}


def test_plan_groups_move_linear_time_to_the_fusions_that_compute_it():
    mm = _p("matmul", (8, 64, 32), "NT")
    sites = [
        {"kind": "matmul", "key": "matmul/8x64x32/bf16/NT", "problem": mm},  # gate
        {"kind": "matmul", "key": "matmul/8x64x32/bf16/NT", "problem": mm},  # up
        {"kind": "matmul", "key": "matmul/8x64x32/bf16/NT", "problem": mm},  # another
        {"kind": "swiglu_gate", "key": "swiglu_gate/8x64x32/bf16",
         "problem": _p("swiglu_gate", (8, 64, 32)), "covers": ["matmul/8x64x32/bf16/NT"] * 2},
        {"kind": "decode_attention", "key": "decode_attention/1x2x8x40x16/bf16",
         "problem": _p("decode_attention", (1, 2, 8, 40, 16))},
        {"kind": "attention", "key": "attention/1x2x40x16/bf16/causal",
         "problem": _p("attention", (1, 2, 40, 16), "causal")},
    ]  # fmt: skip
    groups = [
        # Under torch.compile the GEMM is an NN aten::mm on the transposed weight.
        _group("matmul", "matmul/8x64x32/bf16/NN", 30.0, _p("matmul", (8, 64, 32), "NN"), 3),
        _group("attention", "attention (aten::_scaled_dot_product_cudnn_attention)", 12.0),
        _group("compiler_fused", "compiler_fused (kernel triton_poi_fused_mul_silu_0)", 8.0),
    ]
    out = {g["label"]: g for g in plan_groups(groups, sites)}
    assert out["swiglu_gate/8x64x32/bf16"]["time_us"] == pytest.approx(20.0)
    assert out["matmul/8x64x32/bf16/NT"]["time_us"] == pytest.approx(10.0)
    assert out["matmul/8x64x32/bf16/NT"]["calls"] == 1
    # The attention kernels' time, split over the model's attention sites.
    assert out["decode_attention/1x2x8x40x16/bf16"]["time_us"] == pytest.approx(6.0)
    assert out["attention/1x2x40x16/bf16/causal"]["time_us"] == pytest.approx(6.0)
    assert "matmul/8x64x32/bf16/NN" not in out
    assert sum(g["share"] for g in out.values()) == pytest.approx(1.0)
    assert out["compiler_fused (kernel triton_poi_fused_mul_silu_0)"]["share"] == pytest.approx(
        0.16
    )


def test_plan_groups_give_each_site_its_roof_where_the_device_has_one():
    mm = _p("matmul", (8, 64, 32), "NT+bias+gelu")
    sites = [{"kind": "matmul", "key": "matmul/8x64x32/bf16/NT+bias+gelu", "problem": mm}] * 2
    groups = [
        _group("matmul", "matmul/8x64x32/bf16/NN+bias+gelu", 30.0, mm | {"layout": "NN+bias"}, 2),
        _group("compiler_fused", "compiler_fused (kernel triton_poi_fused_gelu_0)", 8.0),
    ]
    roof = DeviceInfo("a GPU", "cuda", peak_tflops=1.0, peak_gbps=10.0,
                      peak_tflops_by_dtype={"bf16": 1e-3})  # fmt: skip
    out = {g["label"]: g for g in plan_groups(groups, sites, roof)}
    gemm = out["matmul/8x64x32/bf16/NT+bias+gelu"]
    op, problem = kernels.get_op("matmul"), Problem.from_dict(mm)
    # Two calls, each at the slower of the compute (1 GFLOP/s for bf16) and copy roofs.
    per_call_s = max(op.flops(problem) / 1e9, op.bytes_moved(problem) / 1e10)
    assert gemm["floor_us"] == pytest.approx(2 * per_call_s * 1e6)
    # The GELU's pass over the 8 x 64 output, both calls, at the copy roof.
    assert gemm["unfused_us"] == pytest.approx(2 * (2 * 8 * 64 * 2) / 1e10 * 1e6)
    assert "floor_us" not in out["compiler_fused (kernel triton_poi_fused_gelu_0)"]
    # No measured roof (the interpreter): the plan gets the groups as before.
    assert "floor_us" not in plan_groups(groups, sites, None)[0]


def test_plan_groups_carry_what_our_kernels_measured_on_such_a_device():
    site = {"kind": "attention", "key": "attention/1x2x40x16/bf16/causal",
            "problem": _p("attention", (1, 2, 40, 16), "causal")}  # fmt: skip
    groups = [_group("attention", "attention (aten::_scaled_dot_product_cudnn_attention)", 12.0)]

    def on(name: str) -> dict:
        device = DeviceInfo(name, "cuda", peak_tflops=800.0, peak_gbps=4000.0)
        return {g["label"]: g for g in plan_groups(groups, [site], device)}[site["key"]]

    hopper = on("NVIDIA H200")
    assert hopper["measured_best"] < 1.0
    assert hopper["measured_results"].startswith("benchmarks/results/")
    assert (Path(__file__).parents[2] / hopper["measured_results"]).is_file()
    assert "measured_best" not in on("NVIDIA A100-SXM4-80GB")
