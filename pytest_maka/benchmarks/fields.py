"""Field types shared by the task-file models of every adapter (strict, finite, runnable)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError

from ..core.errors import TaskError
from ..core.task import check_workdir
from ..core.validation import first_error


def _positive(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError("expected a number greater than 0")
    return value


def _positive_int(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1:
        raise ValueError("expected a whole number of at least 1")
    return int(value)


def _text(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value


#: Seconds, cpus, ...: a finite number (the loaders refuse NaN and infinities) above 0.
Positive = Annotated[float, BeforeValidator(_positive)]
#: Megabytes: a whole number (a float is rounded down), at least 1.
Count = Annotated[int, BeforeValidator(_positive_int)]
#: A name, image or instruction: a string that is not blank.
Text = Annotated[str, BeforeValidator(_text)]
#: A workdir inside the environment that the harness can use.
Workdir = Annotated[str, AfterValidator(check_workdir)]


class Section(BaseModel):
    """A section of a task file: known keys strictly typed, other keys kept for their owners."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)


def validate(model: type[BaseModel], data: Any, file: Path, prefix: str = "") -> Any:
    """``model.model_validate(data)``, a TaskError naming the file and key on failure."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise first_error(e, file, prefix=prefix, model=model, error=TaskError) from None
