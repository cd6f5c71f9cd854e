"""The job form: a shape set (pasted or uploaded) or a model file, for one of the user's teams."""

from __future__ import annotations

from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.template.defaultfilters import filesizeformat

import kernels
from kernels.model_source import ModelSourceError, check_model_source, read_bundle
from kernels.problem import DTYPE_SPELLINGS
from webapp.accounts.selectors import teams_for_user
from webapp.jobs.models import Job
from webapp.jobs.shapes import ShapeFormat, ShapeSetError, parse_shape_set
from webapp.jobs.submission import BudgetTooSmall, budget_minutes

# .py (KernelBench convention) and .zip (a bundle of them) are profiled; nothing reads weights
# (.pt, .safetensors, .onnx) yet, so they are refused rather than stored where nothing reads them.
MODEL_SUFFIXES = (".py", ".zip")
EXAMPLES_DIR = settings.BASE_DIR / "examples" / "models"


def example_choices() -> list[tuple[str, str]]:
    """The example models shipped in examples/models/, by file stem."""
    names = sorted(p.stem for p in EXAMPLES_DIR.glob("*.py")) if EXAMPLES_DIR.is_dir() else []
    return [("", "— upload my own —")] + [(n, n.replace("_", " ")) for n in names]


def example_help() -> str:
    """Every shipped example by name, from the folder (the help once forgot llama decode)."""
    names = ", ".join(label for name, label in example_choices() if name)
    return f"Shipped in examples/models/ (KernelBench convention): {names}. No file to upload."


SHAPES_EXAMPLE = "op,shape,dtype\nmatmul,4096x4096x4096,bf16\nrmsnorm,8192x4096,fp16"


@dataclass(frozen=True)
class OpHelp:
    """One row of the form's "which ops" table, from the op's own definition (kernels/ops/)."""

    name: str
    shape: str  # e.g. "MxNxK"
    dtypes: str
    layouts: str
    description: str


def op_help() -> list[OpHelp]:
    rows = []
    for op in kernels.all_ops().values():
        bases = [x for x in op.layouts if "+" not in x]
        # In the op's own order (its layouts list them so), each once.
        extras = list(dict.fromkeys(x[len(x.split("+")[0]) :] for x in op.layouts if "+" in x))
        if bases == [""]:  # no base layout to name: the extras are the choices ("none, +bias")
            layouts = ", ".join(["none", *extras]) if extras else "—"
        else:
            layouts = ", ".join(x or "none" for x in bases)
            if extras:
                layouts += f" (each also with {', '.join(extras)})"
        if op.layout_note():
            layouts += f" ({op.layout_note()})"
        rows.append(
            OpHelp(op.name, "x".join(op.dims), ", ".join(op.dtypes), layouts, op.description)
        )
    return rows


def dtype_spellings() -> str:
    """'float16 = fp16, ...': the other names parse_problem accepts."""
    return ", ".join(f"{alias} = {name}" for alias, name in DTYPE_SPELLINGS.items())


class JobForm(forms.Form):
    team = forms.ModelChoiceField(queryset=None, empty_label=None)
    title = forms.CharField(max_length=120)
    kind = forms.ChoiceField(
        choices=Job.Kind.choices, widget=forms.RadioSelect, initial=Job.Kind.SHAPES
    )
    shapes_text = forms.CharField(
        required=False,
        label="Paste shapes",
        widget=forms.Textarea(
            attrs={"rows": 6, "spellcheck": "false", "placeholder": SHAPES_EXAMPLE}
        ),
        help_text="CSV with a header, JSON or YAML: op, shape (sizes joined by x, e.g. 4096x4096x4096), "
        "dtype (fp16, bf16 or fp32; float16, bfloat16 and float32 work too), optional layout. "
        "Which ops, shapes and layouts: see the table below.",
    )
    shapes_file = forms.FileField(
        required=False, label="…or upload a shape file (.csv, .json, .yaml)"
    )
    model_file = forms.FileField(
        required=False,
        label="Model file",
        help_text="A .py in the KernelBench convention (Model, get_inputs, get_init_inputs), or a "
        ".zip of them (one job each); it is profiled, planned and optimized.",
    )
    example = forms.ChoiceField(
        required=False,
        label="…or start from an example model",
        choices=(),
    )
    queue = forms.ChoiceField(label="Run on", choices=())
    budget = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=1_000_000,  # the API's limit too
        label="Budget (minutes)",
        widget=forms.NumberInput(attrs={"inputmode": "numeric"}),
    )

    def __init__(self, *args, user: AbstractBaseUser, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams_for_user(user=user)
        self.fields["queue"].choices = [(q, _queue_label(q)) for q in settings.KF_QUEUES]
        self.fields["example"].choices = example_choices()
        self.problems = []
        self.model_sources = []  # kernels.model_source.ModelSource, when the model is profiled
        self.ops_help = op_help()
        self.gpu_minutes = 0  # the job's budget, once valid (submission.budget_minutes)
        self.fields["budget"].help_text = budget_help()
        # The browser checks each file against its own limit before sending it (static/js/
        # job_form.js): past the server's cap nothing reaches this form to say which limit.
        for name, limit in (
            ("shapes_file", settings.KF_MAX_SHAPE_FILE_BYTES),
            ("model_file", settings.KF_MAX_MODEL_FILE_BYTES),
        ):
            self.fields[name].widget.attrs.update(
                {"data-max-bytes": str(limit), "data-max-text": filesizeformat(limit)}
            )
        self.fields["example"].help_text = example_help()
        self.dtype_spellings = dtype_spellings()

    def clean_shapes_file(self) -> UploadedFile | None:
        upload = self.cleaned_data.get("shapes_file")
        if upload and upload.size > settings.KF_MAX_SHAPE_FILE_BYTES:
            raise forms.ValidationError(
                f"The shape file is {filesizeformat(upload.size)}; the limit is "
                f"{filesizeformat(settings.KF_MAX_SHAPE_FILE_BYTES)}."
            )
        return upload

    def clean_model_file(self) -> UploadedFile | None:
        upload = self.cleaned_data.get("model_file")
        if not upload:
            return upload
        if upload.size > settings.KF_MAX_MODEL_FILE_BYTES:
            raise forms.ValidationError(
                f"The model file is {filesizeformat(upload.size)}; the limit is "
                f"{filesizeformat(settings.KF_MAX_MODEL_FILE_BYTES)}."
            )
        if not upload.name.lower().endswith(MODEL_SUFFIXES):
            raise forms.ValidationError(
                "A model file must be a .py in the KernelBench convention or a .zip of them; "
                "weights files (.pt, .safetensors, .onnx) cannot be profiled."
            )
        if upload.size == 0:
            raise forms.ValidationError("The model file is empty.")
        return upload

    def clean(self) -> dict:
        data = super().clean()
        kind = data.get("kind")
        if kind == Job.Kind.SHAPES:
            self._clean_shapes(data)
        elif kind == Job.Kind.MODEL and data.get("example"):
            self._clean_example(data)
        elif (
            kind == Job.Kind.MODEL
            and not data.get("model_file")
            and "model_file" not in self.errors
        ):
            self.add_error("model_file", "Choose a model file to upload.")
        elif kind == Job.Kind.MODEL and data.get("model_file"):
            self._clean_model_source(data["model_file"])
        self._clean_budget(data)
        return data

    def _clean_budget(self, data: dict) -> None:
        try:
            self.gpu_minutes = budget_minutes(
                n_problems=len(self.problems),
                requested=data.get("budget"),
                queue=data.get("queue") or "",
            )
        except BudgetTooSmall as error:
            self.add_error("budget", str(error))

    def _clean_example(self, data: dict) -> None:
        if data.get("model_file"):
            self.add_error("example", "Upload a file or pick an example, not both.")
            return
        path = EXAMPLES_DIR / f"{data['example']}.py"
        self.model_sources = read_bundle(path)

    def _clean_model_source(self, upload: UploadedFile) -> None:
        """Check the KernelBench convention now (by reading, not running), so a wrong file is
        refused at upload; a .zip becomes one model source per problem file."""
        try:
            upload.seek(0)
            body = upload.read()
            if upload.name.lower().endswith(".zip"):
                self.model_sources = read_bundle(upload.name, data=body)
            else:
                text = body.decode("utf-8")
                self.model_sources = [check_model_source(text, upload.name)]
        except UnicodeDecodeError:
            self.add_error("model_file", "The model file is not UTF-8 text.")
        except ModelSourceError as error:
            self.add_error("model_file", str(error))

    def _clean_shapes(self, data: dict) -> None:
        text = data.get("shapes_text") or ""
        upload = data.get("shapes_file")
        if "shapes_file" in self.errors:
            return
        if upload and text.strip():
            self.add_error("shapes_text", "Paste shapes or upload a file, not both.")
            return
        fmt = ShapeFormat.AUTO
        if upload:
            fmt = ShapeFormat.from_filename(upload.name)
            try:
                text = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                self.add_error("shapes_file", "The shape file is not UTF-8 text.")
                return
        field = "shapes_file" if upload else "shapes_text"
        try:
            self.problems = parse_shape_set(
                text, fmt, max_problems=settings.KF_MAX_PROBLEMS_PER_JOB
            )
        except ShapeSetError as error:
            for message in error.messages:
                self.add_error(field, message)


def budget_help() -> str:
    """What an empty budget gets, and why a long one matters to everyone else."""
    return (
        f"Empty: {settings.KF_CPU_JOB_DEFAULT_MINUTES} min on the CPU, "
        f"{settings.KF_JOB_DEFAULT_GPU_MINUTES} min on a GPU, and at least "
        f"{settings.KF_MIN_PROBLEM_GPU_MINUTES:g} per problem of a shape set. Each problem's "
        "search stops when its share is spent. A worker runs one task at a time for every "
        "team, so jobs queued after this one wait for it."
    )


def _queue_label(queue: str) -> str:
    if queue == "cpu":
        return "CPU (Triton interpreter; timings not ranked)"
    if queue.startswith("gpu."):
        return f"GPU: {queue.removeprefix('gpu.').upper()}"
    return queue
