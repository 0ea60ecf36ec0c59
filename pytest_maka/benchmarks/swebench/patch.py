"""``patch``: grade a predictions file (SWE-bench style) instead of running an agent.

``{name: my-model, kind: patch, predictions: preds.jsonl}``: records with ``instance_id``,
``model_name_or_path`` and ``model_patch``, in ``.jsonl``, or ``.json`` (a list, or an
object keyed by instance id). The subject applies the instance's ``model_patch`` in
/testbed as the SWE-bench harness does (git apply, --3way, patch --fuzz=5); a missing,
empty or non-applying prediction leaves the repository unchanged, which the verifier
rejects (agent_failure), never a crash.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, computed_field, field_validator

from ...core import inputs
from ...core.task import AGENT_LOGS_DIR, Task
from ...executors.base import Sandbox
from ...subjects.base import RunContext, SubjectBase, SubjectResult
from .adapter import APPLY_PATCH_SH

STAGE_DIR = "/tmp/maka-prediction"


def read_predictions(path: Path) -> dict[str, dict[str, Any]]:
    """``{instance_id: record}``; ValueError (one line) for anything malformed."""
    # The shared bounded readers: a SpecError naming this file for bad bytes, JSON or numbers.
    text = inputs.read_text(path, what="predictions file", limit=inputs.MAX_DATA_BYTES)
    if path.suffix.lower() == ".jsonl":
        rows: Any = inputs.load_jsonl(text, path)
    else:
        rows = inputs.load_json(text, path)
    if isinstance(rows, dict):  # keyed by instance id
        rows = [{"instance_id": k, **v} if isinstance(v, dict) else v for k, v in rows.items()]
    if not isinstance(rows, list):
        raise ValueError(f"{path.name}: expected a list of predictions or an object keyed by instance id")
    out: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise ValueError(f"{path.name}: prediction {i} has no instance_id")
        patch = row.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise ValueError(f"{path.name}: prediction {row['instance_id']}: model_patch must be a string")
        if row["instance_id"] in out:
            raise ValueError(f"{path.name}: two predictions for {row['instance_id']}")
        out[row["instance_id"]] = row
    return out


class PatchOptions(BaseModel):
    """``predictions`` (required): the predictions file, relative to the spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    predictions: Path = Field(exclude=True)  # identity comes from predictions_digest

    @field_validator("predictions")
    @classmethod
    def _readable(cls, value: Path, info: ValidationInfo) -> Path:
        resolved = (Path((info.context or {}).get("base_dir", ".")) / value).resolve()
        if not resolved.is_file():
            raise ValueError(f"no such file: {resolved}")
        read_predictions(resolved)
        return resolved

    @computed_field  # type: ignore[prop-decorator]
    @property
    def predictions_digest(self) -> str:
        """New predictions are new cells."""
        return hashlib.sha256(self.predictions.read_bytes()).hexdigest()


class Patch(SubjectBase):
    """Applies the instance's predicted patch; nothing else runs in the subject phase."""

    kind = "patch"
    reference = False  # the patch is model output, and the tests will run it
    Options = PatchOptions

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        self.predictions = read_predictions(spec.options.predictions)

    def unsupported(self, task: Task) -> str | None:
        if task.grading != "swe-bench":
            return "the patch subject grades SWE-bench predictions; this task is not a SWE-bench instance"
        return None

    def run(self, sandbox: Sandbox, task: Task, ctx: RunContext) -> SubjectResult:
        row = self.predictions.get(task.id)
        patch = (row or {}).get("model_patch") or ""
        claim: dict[str, Any] = {"model_name_or_path": (row or {}).get("model_name_or_path")}
        if not patch.strip():
            claim["prediction"] = "missing" if row is None else "empty"
            what = "no prediction" if row is None else "an empty model_patch"
            ctx.stdout_path.write_text(f"maka: {what} for {task.id}\n")
            ctx.stderr_path.write_bytes(b"")
            self._claim(sandbox, claim)
            return SubjectResult(exit_code=0, timed_out=False, duration_s=0.0, claim=claim)
        (ctx.stdout_path.parent / "prediction.patch").write_text(patch, encoding="utf-8")
        with tempfile.TemporaryDirectory(prefix="maka-prediction-") as tmp:
            stage = Path(tmp)
            (stage / "model.patch").write_text(patch, encoding="utf-8")
            (stage / "apply_patch.sh").write_text(APPLY_PATCH_SH, encoding="utf-8")
            sandbox.put(stage, STAGE_DIR)
        result = self._exec(
            sandbox, f"bash {STAGE_DIR}/apply_patch.sh {STAGE_DIR}/model.patch {task.workdir}", task, ctx
        )
        sandbox.remove(STAGE_DIR)
        applied = result.exit_code == 0 and not result.timed_out
        claim["prediction"] = "applied" if applied else "did not apply"
        self._claim(sandbox, claim)
        # A prediction that does not apply is the model's failure, not a crash of this subject:
        # the repository is left unchanged and the verifier rejects it.
        return SubjectResult(exit_code=0, timed_out=result.timed_out, duration_s=result.duration_s, claim=claim)

    def _claim(self, sandbox: Sandbox, claim: dict[str, Any]) -> None:
        with tempfile.TemporaryDirectory(prefix="maka-claim-") as tmp:
            path = Path(tmp) / "claim.json"
            path.write_text(json.dumps(claim))
            sandbox.put(path, f"{AGENT_LOGS_DIR}/claim.json")
