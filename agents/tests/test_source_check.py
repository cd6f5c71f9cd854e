import pytest

from agents.source_check import check_source, extract_code

GOOD = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def run(x, *, out):
    _copy[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
"""


def test_it_accepts_a_well_formed_module():
    check_source(GOOD)


def test_it_extracts_the_fenced_block_from_a_reply():
    reply = f"Here you go:\n```python\n{GOOD}```\nThis should be faster."
    assert extract_code(reply) == GOOD


def test_it_rejects_a_reply_without_code():
    with pytest.raises(ValueError, match="no ```python code block"):
        extract_code("I think you should try larger tiles.")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def run(x, *, out)\n    pass\n", "syntax error"),
        ("import torch\n\ndef compute(x, *, out):\n    pass\n", "defines no top-level run"),
        ("def run(x):\n    return x\n", "destination passing"),
        ("import threading\n\ndef run(x, *, out):\n    pass\n", "import of 'threading'"),
        ("from os import system\n\ndef run(x, *, out):\n    pass\n", "import of 'os'"),
        ("def run(x, *, out):\n    exec('out.copy_(x)')\n", "exec"),
        ("def run(x, *, out):\n    out.__class__ = type(x)\n", "dunder"),
    ],
)
def test_it_rejects_broken_or_escaping_code(source, message):
    with pytest.raises(ValueError, match=message):
        check_source(source)
