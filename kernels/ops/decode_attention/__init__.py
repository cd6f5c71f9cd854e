"""decode_attention: a few new queries against a KV cache, causal from the cache's end; see
op.py."""

from kernels.ops.decode_attention.op import DecodeAttentionOp

OP = DecodeAttentionOp()
