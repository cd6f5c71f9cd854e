"""Shape sets in CSV, JSON and YAML: what parses, and the message each bad input gets."""

import pytest

from webapp.jobs.forms import op_help
from webapp.jobs.shapes import ShapeFormat, ShapeSetError, parse_shape_set

LIMIT = 64


def parse(text, fmt=ShapeFormat.AUTO, limit=LIMIT):
    return parse_shape_set(text, fmt, max_problems=limit)


def messages(text, fmt=ShapeFormat.AUTO, limit=LIMIT):
    with pytest.raises(ShapeSetError) as caught:
        parse(text, fmt, limit)
    return " | ".join(caught.value.messages)


def test_it_reads_csv_with_a_header():
    problems = parse(
        "op,shape,dtype,layout\nmatmul,4096x4096x4096,bf16,TN\nrmsnorm,8192x4096,fp16,\n"
    )
    assert [p.key for p in problems] == ["matmul/4096x4096x4096/bf16/TN", "rmsnorm/8192x4096/fp16"]


def test_it_gives_matmul_its_first_layout_when_none_is_named():
    (problem,) = parse("op,shape,dtype\nmatmul,64x64x64,fp16")
    assert problem.layout == "NN"


def test_it_reads_json_lists_and_problem_mappings():
    listed = parse('[{"op": "matmul", "shape": [128, 256, 64], "dtype": "fp16"}]')
    wrapped = parse('{"problems": [{"op": "rmsnorm", "shape": "32x1024", "dtype": "fp32"}]}')
    assert listed[0].shape == (128, 256, 64)
    assert wrapped[0].key == "rmsnorm/32x1024/fp32"


def test_it_reads_yaml():
    problems = parse(
        "problems:\n  - {op: rmsnorm, shape: [8, 512], dtype: bf16}\n  - op: matmul\n    shape: 16x16x16\n    dtype: fp16\n"
    )
    assert [p.op for p in problems] == ["rmsnorm", "matmul"]


def test_it_uses_the_file_extension_to_pick_the_format():
    assert ShapeFormat.from_filename("shapes.YML") is ShapeFormat.YAML
    assert ShapeFormat.from_filename("s.csv") is ShapeFormat.CSV
    assert ShapeFormat.from_filename("noext") is ShapeFormat.AUTO


@pytest.mark.parametrize("text", ["", "   \n  ", "op,shape,dtype\n", "[]", "problems: []"])
def test_it_rejects_an_empty_shape_set(text):
    assert "empty" in messages(text) or "no rows" in messages(text)


def test_it_points_at_malformed_json():
    assert "not valid JSON (line 1" in messages('[{"op": "matmul",')


def test_it_points_at_malformed_yaml():
    assert "not valid YAML" in messages("problems: [ {op: matmul", ShapeFormat.YAML)


def test_it_names_the_missing_csv_columns():
    assert "missing dtype" in messages("op,shape\nmatmul,1x2x3")


def test_it_names_an_unknown_op_and_lists_the_known_ones():
    text = messages("op,shape,dtype\nmatmull,64x64x64,fp16")
    assert "Row 2" in text and "unknown op 'matmull'" in text and "rmsnorm" in text


def test_it_rejects_a_dtype_the_op_does_not_support():
    assert "not 'fp8'" in messages("op,shape,dtype\nrmsnorm,8x8,fp8")


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ("-8x4096", "sizes must be positive"),
        ("0x4096", "sizes must be positive"),
        ("8x4096x3", "takes a shape MxN"),
        ("1e9x4", "not sizes separated by 'x'"),
        ("4000000000x4000000000", "too large"),
    ],
)
def test_it_rejects_negative_wrong_length_and_absurd_shapes(shape, expected):
    assert expected in messages(f"op,shape,dtype\nrmsnorm,{shape},fp16")


def test_it_rejects_non_integer_sizes_in_a_list():
    assert "list of integers" in messages(
        '[{"op": "rmsnorm", "shape": [8.5, true], "dtype": "fp16"}]'
    )


def test_it_reports_every_bad_row_not_just_the_first():
    text = messages("op,shape,dtype\nnope,1x1,fp16\nrmsnorm,8x8,fp16\nrmsnorm,-1x8,fp16")
    assert "Row 2" in text and "Row 4" in text and "Row 3" not in text


def test_it_rejects_repeated_rows():
    assert "repeats row 2" in messages("op,shape,dtype\nrmsnorm,8x8,fp16\nrmsnorm,8x8,fp16")


def test_it_caps_the_number_of_problems_per_job():
    rows = "\n".join(f"rmsnorm,{n}x64,fp16" for n in range(1, 6))
    assert "limit is 3" in messages("op,shape,dtype\n" + rows, limit=3)


def test_it_rejects_unknown_fields():
    assert "unknown field(s) stride" in messages(
        '[{"op": "rmsnorm", "shape": "8x8", "dtype": "fp16", "stride": 2}]'
    )


# --- What a new user wrote (issue 17) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "dtype"),
    [("float32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16"), ("torch.bfloat16", "bf16"),
     ("BF16", "bf16"), ("half", "fp16")],
)  # fmt: skip
def test_it_accepts_torchs_dtype_names(written, dtype):
    (problem,) = parse(f"op,shape,dtype\nrmsnorm,8x64,{written}")
    assert problem.dtype == dtype and problem.key == f"rmsnorm/8x64/{dtype}"


def test_its_messages_list_choices_in_words_not_python_lists():
    text = messages(
        "op,shape,dtype,layout\nrmsnorm,8x8,int8,\nmatmul,8x8x8,fp16,XY\nsum,8x8,fp16,NN"
    )
    assert "rmsnorm supports dtypes fp16, bf16, fp32, not 'int8'" in text
    assert "matmul supports layouts NN, NT, TN, NN+bias" in text and "sum takes no layout" in text
    assert "[" not in text and "]" not in text, text


def test_an_unclosed_quote_is_reported_on_the_row_where_it_opens():
    text = messages('op,shape,dtype\nmatmul,"4096x4096x4096,bf16\nrmsnorm,8192x4096,fp16')
    assert text == 'Row 2: a quote (") opens in this row and is not closed on its line.'
    # Quotes that close are fine, and later rows keep their own line numbers.
    assert "Row 3" in messages('op,shape,dtype\nmatmul,"64x64x64",bf16\nnope,8x8,fp16')


@pytest.mark.parametrize(
    "text",
    ["matmul 4096x4096x4096 bf16", "please make my model faster", "op shape dtype\nsum 8x8 fp16"],
)
def test_free_text_gets_a_message_about_every_format_with_an_example(text):
    said = messages(text)
    assert "CSV" in said and "JSON" in said and "YAML" in said and "op,shape,dtype" in said
    assert not said.startswith("The YAML")


def test_an_op_without_a_base_layout_takes_none_or_its_extras():
    # qkv_rotary: no layout, or "+bias" (Qwen2's biased q/k/v projections).
    [row] = parse("op,shape,dtype,layout\nqkv_rotary,8x4x2x64x256,bf16,+bias\n")
    assert row.key == "qkv_rotary/8x4x2x64x256/bf16/+bias"
    [row] = parse("op,shape,dtype\nqkv_rotary,8x4x2x64x256,bf16\n")
    assert row.layout == ""
    [row] = parse("op,shape,dtype,layout\nqkv_rotary,64x4x2x64x256,bf16,i8+bias+kv_heads=2\n")
    assert row.key == "qkv_rotary/64x4x2x64x256/bf16/i8+bias+kv_heads=2"
    layout = "i8+bias+rowscale+kv_heads=2"  # an RMSNorm folded in
    [row] = parse(f"op,shape,dtype,layout\nqkv_rotary,64x4x2x64x256,bf16,{layout}\n")
    assert row.key == f"qkv_rotary/64x4x2x64x256/bf16/{layout}"
    help_rows = {h.name: h.layouts for h in op_help()}
    assert help_rows["qkv_rotary"].startswith("none, +bias (i8[+bias][+rowscale]+kv_heads=<HKV>: ")
    assert help_rows["softmax"] == "—"
    assert "(each also with +bias" in help_rows["matmul"]
    assert help_rows["matmul"].index("+bias+gelu_erf") < help_rows["matmul"].index("+res")
