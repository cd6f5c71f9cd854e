"""Model files in the KernelBench convention: checked by reading them, one file or a bundle."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from kernels.model_source import (
    MAX_BUNDLE_FILES,
    ModelSourceError,
    check_model_source,
    read_bundle,
)

REPO = Path(__file__).resolve().parents[2]
GOOD = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(16, 16)]

def get_init_inputs():
    return []
"""


def _zip(entries: dict[str, str | bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, body in entries.items():
            z.writestr(name, body)
    return buf.getvalue()


def test_it_accepts_a_file_in_the_convention():
    assert check_model_source(GOOD, "19_ReLU.py").title == "19_ReLU"


def test_it_names_each_missing_part():
    text = GOOD.replace("def get_inputs", "def make_inputs")
    with pytest.raises(ModelSourceError, match=r"get_inputs\(\)"):
        check_model_source(text)
    with pytest.raises(ModelSourceError, match="class Model"):
        check_model_source(GOOD.replace("class Model", "class Net"))


def test_it_rejects_text_that_is_not_python():
    with pytest.raises(ModelSourceError, match="not valid Python"):
        check_model_source("def (:\n")


def test_it_reads_the_shipped_examples_as_a_folder():
    titles = [m.title for m in read_bundle(REPO / "examples" / "models")]
    assert titles == [
        "gpt_block", "gptj_block", "llama3_decode", "llama_block", "llama_decode", "mlp",
        "qwen2_block", "vit_block",
    ]  # fmt: skip


def test_it_turns_a_kernelbench_zip_into_one_source_per_problem():
    data = _zip(
        {
            "level1/19_ReLU.py": GOOD,
            "level2/1_Conv2D_ReLU_BiasAdd.py": GOOD.replace("relu", "sigmoid"),
            "level1/__init__.py": "",
            "README.md": "not python",
            "__MACOSX/level1/._19_ReLU.py": "junk",
        }
    )
    sources = read_bundle("problems.zip", data=data)
    assert [s.title for s in sources] == ["19_ReLU", "1_Conv2D_ReLU_BiasAdd"]
    assert "sigmoid" in sources[1].text


def test_it_refuses_zip_entries_that_point_outside():
    for bad in ("../evil.py", "/etc/evil.py", "level1/../../evil.py"):
        with pytest.raises(ModelSourceError, match="outside the archive"):
            read_bundle("x.zip", data=_zip({bad: GOOD}))


def test_it_refuses_too_many_files():
    data = _zip({f"p{i}.py": GOOD for i in range(MAX_BUNDLE_FILES + 1)})
    with pytest.raises(ModelSourceError, match="more than"):
        read_bundle("x.zip", data=data)


def test_it_refuses_a_member_larger_than_the_limit():
    data = _zip({"big.py": GOOD + "#" * (2 * 2**20)})
    with pytest.raises(ModelSourceError, match="larger than"):
        read_bundle("x.zip", data=data)


def test_it_says_when_a_bundle_holds_no_model():
    with pytest.raises(ModelSourceError, match="no file in the KernelBench convention"):
        read_bundle("x.zip", data=_zip({"helpers.py": "X = 1\n"}))
    with pytest.raises(ModelSourceError, match="not a zip"):
        read_bundle("x.zip", data=b"PK nonsense")
