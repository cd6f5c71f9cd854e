"""Side-by-side diffs: aligned line numbers, highlighted, and candidate text always escaped."""

from webapp.dashboard.code import LineKind, highlighted_lines, side_by_side


def test_it_escapes_markup_in_candidate_sources():
    rows, _ = side_by_side("x = 1\n", 'x = "</td><script>alert(1)</script>"\n')
    html = "".join(str(r.left) + str(r.right) for r in rows)
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_it_pairs_changed_lines_and_marks_additions_and_removals():
    old = "\nimport a\nx = 1\ny = 2\n"
    new = "\nimport a\nx = 3\ny = 2\nz = 4\n"
    rows, truncated = side_by_side(old, new)
    kinds = [(r.left_no, r.right_no, r.kind) for r in rows]
    assert kinds == [
        (1, 1, LineKind.SAME),
        (2, 2, LineKind.SAME),
        (3, 3, LineKind.CHANGED),
        (4, 4, LineKind.SAME),
        (None, 5, LineKind.ADDED),
    ]
    assert not truncated


def test_it_keeps_one_fragment_per_source_line_even_inside_docstrings():
    source = '"""doc\n\nmore"""\n\n\ndef run(x, out):\n    pass'
    assert len(highlighted_lines(source)) == 7
