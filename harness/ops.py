"""Find the Op for a problem: kernels/ by name, or an explicit "module:ATTR" (tests, new ops)."""

from __future__ import annotations

import importlib

from kernels.problem import Op


def resolve_op(op_name: str, op_ref: str = "") -> Op:
    if op_ref:
        module_name, _, attr = op_ref.partition(":")
        op = getattr(importlib.import_module(module_name), attr or "OP")
    else:
        from kernels import get_op

        op = get_op(op_name)
    if op.name != op_name:
        raise ValueError(f"op_ref {op_ref!r} names op {op.name!r}, problem wants {op_name!r}")
    return op


# Library entry points that compute the op outright. With forbid_vendor_library, a candidate
# whose call shows any of these (torch.profiler, CPU side) or a vendor GEMM kernel is rejected.
VENDOR_ATEN_OPS: dict[str, frozenset[str]] = {
    "matmul": frozenset(
        {
            "aten::mm",
            "aten::matmul",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
            "aten::linear",
            "aten::_scaled_mm",
            "aten::mv",
            "aten::dot",
            "aten::einsum",
            "aten::tensordot",
        }
    ),
    "rmsnorm": frozenset(
        {"aten::rms_norm", "aten::_fused_rms_norm", "aten::layer_norm", "aten::native_layer_norm"}
    ),
}
VENDOR_KERNEL_MARKERS: dict[str, tuple[str, ...]] = {
    "matmul": ("cublas", "nvjet", "cutlass", "gemm", "sm90_xmma", "ampere_", "gemv"),
}
