"""SWE-bench instances (.json, .jsonl, .parquet) as tasks: the subject works in /testbed.

The environment is the instance's ``image`` (SWE-bench 5), else the source's ``image``
name template, else its ``dockerfile`` recipe rendered per instance. Grading is the
``swe-bench`` verifier (pytest_maka/verifiers/swebench.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import string
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...core import inputs
from ...core.errors import TaskError
from ...core.spec import PathText
from ...core.task import MAX_CPUS, MAX_MEGABYTES, MAX_TIMEOUT_SEC, Task, digest_tree
from ...verifiers import parsers
from .. import detect
from ..cache import materialize
from ..fields import Section, Text, source_options, validate

FORMAT = detect.SWE_BENCH
GRADING = "swe-bench"
WORKDIR = "/testbed"
REQUIRED = ("instance_id", "base_commit", "test_patch", "problem_statement", "FAIL_TO_PASS", "PASS_TO_PASS")
#: The names an ``image:`` template may use.
TEMPLATE_FIELDS = ("instance_id", "repo", "version", "base_commit", "environment_setup_commit", "swebench_id")
_GIT_HEADER = re.compile(r"^diff --git a/(\S+) b/(\S+)\s*$", re.MULTILINE)
_DIFF_PATH = re.compile(r"^(?:---|\+\+\+) (?:[ab]/)?(.+?)\s*$", re.MULTILINE)

#: Applies a patch as the SWE-bench harness does, without ever leaving half of it applied:
#: ``git apply``, else ``patch --fuzz=5`` after a dry run says it applies whole.
APPLY_PATCH_SH = r"""#!/bin/bash
P="$1"; cd "${2:-/testbed}" || exit 2
git -c core.hooksPath=/dev/null apply --verbose "$P" && exit 0
if command -v patch >/dev/null && patch --dry-run --batch --fuzz=5 -p1 -i "$P" >/dev/null; then
  patch --batch --fuzz=5 -p1 -i "$P" && exit 0
fi
echo "maka: the patch does not apply" >&2
exit 1
"""


class SweBenchOptions(BaseModel):
    """The adapter options of a ``format: swe-bench`` source (keys beside path/include/...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Image name template for instances without ``image``: {instance_id} {repo} {version} {swebench_id} ...
    image: str | None = None
    #: Dockerfile template (its directory is the build context); {{instance_id}}, {{base_commit}}, ...
    dockerfile: PathText | None = None
    #: Test command when the instance has no eval_script; {test_files} is replaced.
    test_cmd: str = "python -m pytest -rA -v -p no:cacheprovider {test_files}"
    use_eval_script: bool = True
    log_parser: str | None = None
    hints: bool = False
    agent_timeout_sec: float | None = Field(default=1800.0, gt=0, le=MAX_TIMEOUT_SEC)
    verifier_timeout_sec: float = Field(default=1800.0, gt=0, le=MAX_TIMEOUT_SEC)
    build_timeout_sec: float = Field(default=1800.0, gt=0, le=MAX_TIMEOUT_SEC)
    network: Literal["public", "none"] = "public"
    env: dict[str, str] = Field(default_factory=dict)
    cpus: float | None = Field(default=None, gt=0, le=MAX_CPUS)
    memory_mb: int | None = Field(default=None, ge=16, le=MAX_MEGABYTES)

    @field_validator("image")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        """Every ``{name}`` is one of TEMPLATE_FIELDS; a literal brace is written ``{{`` or ``}}``."""
        if value is None:
            return None
        try:
            names = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
        except ValueError as e:
            raise ValueError(f"not a valid name template ({e}; write a literal brace as {{{{ or }}}})") from None
        for name in names:
            if name not in TEMPLATE_FIELDS:
                raise ValueError(f"unknown template field {{{name}}}; expected one of: {', '.join(TEMPLATE_FIELDS)}")
        return value


class Instance(Section):
    """One SWE-bench instance: the fields we read, strictly typed (others are kept)."""

    instance_id: Text
    base_commit: str
    test_patch: str
    problem_statement: str
    FAIL_TO_PASS: list[str] | str
    PASS_TO_PASS: list[str] | str
    repo: str | None = None
    version: str | int | float | None = None
    environment_setup_commit: str | None = None
    created_at: str | None = None
    patch: str | None = None
    hints_text: str | None = None
    image: str | None = None
    eval_script: str | None = None
    log_parser: Text | None = None


def parse_options(raw: dict[str, Any], spec_path: Path) -> SweBenchOptions:
    return source_options(SweBenchOptions, raw, spec_path, FORMAT)  # type: ignore[no-any-return]


def read_instances(path: Path) -> list[dict[str, Any]]:
    """Every record of a .json (list, or one object), .jsonl or .parquet file."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        rows = _read_parquet(path)
    else:
        text = inputs.read_text(path, what="instance file", error=TaskError, limit=inputs.MAX_DATA_BYTES)
        if suffix == ".jsonl":
            rows = inputs.load_jsonl(text, path, error=TaskError)
        else:
            data = inputs.load_json(text, path, error=TaskError)
            rows = data if isinstance(data, list) else [data]
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TaskError(path, f"[{i}]", "expected an object with instance_id, base_commit, ...")
    return rows


def _read_parquet(path: Path) -> list[Any]:
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskError(
            path, None, "reading .parquet files needs pyarrow: pip install pyarrow (or convert the file to .jsonl)"
        ) from None
    try:
        rows = pq.read_table(path).to_pylist()
    except (pyarrow.ArrowException, OSError, ValueError) as e:
        raise TaskError(path, None, f"not a readable Parquet file: {str(e).splitlines()[0][:160]}") from None
    return inputs.plain(rows, path, error=TaskError)


def parse_test_list(value: Any, file: Path, where: str) -> list[str]:
    """FAIL_TO_PASS / PASS_TO_PASS: a list of test ids, or that list JSON-encoded in a string."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except (ValueError, RecursionError):  # bad JSON, or a number with thousands of digits
            raise TaskError(file, where, "expected a list of test ids or a JSON-encoded list") from None
    if hasattr(value, "tolist"):
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise TaskError(file, where, "expected a list of test ids or a JSON-encoded list")
    return value


def patch_files(patch: str) -> list[str]:
    """The files a unified diff touches (old and new names), in order, without /dev/null."""
    seen: dict[str, None] = {}
    headers = _GIT_HEADER.findall(patch)
    names = [n for pair in headers for n in pair] if headers else _DIFF_PATH.findall(patch)
    for name in names:
        if name != "/dev/null":
            seen.setdefault(name.split("\t")[0], None)
    return list(seen)


def derive_test_files(tests: list[str], test_patch: str) -> list[str]:
    """Files named by pytest ids (``path::test``); else the files the test patch touches."""
    files = dict.fromkeys(t.split("::", 1)[0] for t in tests if "::" in t)
    return list(files) or patch_files(test_patch)


def _fields(instance: dict[str, Any]) -> dict[str, str]:
    iid = str(instance["instance_id"])
    out = {k: str(instance.get(k) or "") for k in ("repo", "version", "base_commit", "environment_setup_commit")}
    return {**out, "instance_id": iid, "swebench_id": iid.lower().replace("__", "_1776_")}


def _recipe(template: Path, fields: dict[str, str]) -> Path:
    """A build context: the template's directory with its Dockerfile rendered for one instance."""
    text = inputs.read_text(template, what="Dockerfile template", error=TaskError)
    for key, value in fields.items():
        text = text.replace("{{" + key + "}}", value)
    context = template.parent
    key = hashlib.sha256((digest_tree(context) + text).encode()).hexdigest()

    def build(dest: Path) -> None:
        shutil.copytree(context, dest, symlinks=True, dirs_exist_ok=True)
        (dest / "Dockerfile").write_text(text, encoding="utf-8")

    return materialize("swe-bench-env", key, build)


def _solution(patch: str) -> Path:
    def build(dest: Path) -> None:
        (dest / "gold.patch").write_text(patch, encoding="utf-8")
        (dest / "apply_patch.sh").write_text(APPLY_PATCH_SH, encoding="utf-8")
        solve = f"#!/bin/bash\nexec bash /solution/apply_patch.sh /solution/gold.patch {WORKDIR}\n"
        (dest / "solve.sh").write_text(solve, encoding="utf-8")

    return materialize("swe-bench-solution", hashlib.sha256(patch.encode()).hexdigest(), build)


def load_instances(path: Path, options: SweBenchOptions, spec_path: Path) -> list[Task]:
    template = None
    if options.dockerfile:
        template = (spec_path.parent / options.dockerfile).resolve()
        if not template.is_file():
            raise TaskError(spec_path, "tasks[].dockerfile", f"no such file: {template}")
    return [_task(row, i, path, options, template) for i, row in enumerate(read_instances(path))]


def _task(row: dict[str, Any], i: int, path: Path, opts: SweBenchOptions, template: Path | None) -> Task:
    missing = [k for k in REQUIRED if k not in row]
    iid = row.get("instance_id")
    where = iid if isinstance(iid, str) and iid.strip() else f"[{i}]"
    if missing:
        raise TaskError(path, where, f"missing instance field(s): {', '.join(missing)}")
    validate(Instance, row, path, prefix=where)
    f2p = parse_test_list(row["FAIL_TO_PASS"], path, f"{where}.FAIL_TO_PASS")
    p2p = parse_test_list(row["PASS_TO_PASS"], path, f"{where}.PASS_TO_PASS")
    fields = _fields(row)
    eval_script = row.get("eval_script") if opts.use_eval_script else None
    files = derive_test_files(f2p + p2p, row["test_patch"])
    unsupported = None
    if not f2p:
        unsupported = "the instance has no FAIL_TO_PASS test (nothing to resolve)"
    elif not eval_script and not files:
        unsupported = "no test files can be derived from FAIL_TO_PASS/PASS_TO_PASS; give test_cmd or an eval_script"
    parser = opts.log_parser or row.get("log_parser") or "pytest"
    if unsupported is None and parsers.get(parser) is None:
        unsupported = f"no test-log parser named {parser!r} (known: {', '.join(parsers.names())})"
    image, dockerfile = row.get("image") or None, None
    if image is None and opts.image:
        image = opts.image.format_map(fields)
    elif image is None and template is not None:
        dockerfile = _recipe(template, fields) / "Dockerfile"
    elif image is None:
        raise TaskError(
            path,
            where,
            "the instance has no 'image' field; give the task source an image name "
            "template (image: ...) or a Dockerfile recipe (dockerfile: ...)",
        )
    instruction = str(row["problem_statement"])
    if opts.hints and row.get("hints_text"):
        instruction += "\n\nHints:\n" + str(row["hints_text"])
    grading = {
        "base_commit": fields["base_commit"],
        "test_patch": row["test_patch"],
        "test_patch_files": patch_files(row["test_patch"]),
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
        "eval_script": eval_script,
        "test_cmd": opts.test_cmd.replace("{test_files}", " ".join(files)),
        "log_parser": parser,
    }
    material = json.dumps(
        {"instance": row, "options": opts.model_dump(), "recipe": str(dockerfile and digest_tree(dockerfile.parent))},
        sort_keys=True,
        default=str,
    )
    patch = row.get("patch") or ""
    return Task(
        id=fields["instance_id"],
        path=path,
        instruction=instruction,
        digest=hashlib.sha256(f"{FORMAT}\0{material}".encode()).hexdigest(),
        format=FORMAT,
        workdir=WORKDIR,
        agent_timeout_sec=opts.agent_timeout_sec,
        verifier_timeout_sec=opts.verifier_timeout_sec,
        build_timeout_sec=opts.build_timeout_sec,
        cpus=opts.cpus,
        memory_mb=opts.memory_mb,
        environment_dir=dockerfile.parent if dockerfile else None,
        dockerfile=dockerfile,
        docker_image=image,
        solution_dir=_solution(patch) if patch.strip() else None,
        env=dict(opts.env),
        network=opts.network,
        verifier_network="none",  # the repository's tests run offline
        metadata={k: row[k] for k in ("instance_id", "repo", "version", "created_at") if row.get(k) is not None},
        grading=GRADING,
        grading_options=grading,
        unsupported=unsupported,
    )
