"""Field types shared by the task-file models of every adapter (strict, finite, runnable)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationError

from ..core.errors import TaskError
from ..core.task import MAX_CPUS, MAX_MEGABYTES, MAX_TIMEOUT_SEC, check_workdir
from ..core.validation import every_error, first_error


def _number(value: Any, low: float, high: float, what: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > low:
        raise ValueError(f"expected {what} greater than {low:g}")
    if value > high:
        raise ValueError(f"expected {what} of at most {high:g}")
    return value


def _seconds(value: Any) -> Any:
    return _number(value, 0, MAX_TIMEOUT_SEC, "a number")


def _wait(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError("expected a number of at least 0")
    return _number(value, -1, MAX_TIMEOUT_SEC, "a number")


def _cpus(value: Any) -> Any:
    return _number(value, 0, MAX_CPUS, "a number")


def _megabytes(value: Any) -> Any:
    return int(_number(value, 0, MAX_MEGABYTES, "a number"))


def _text(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value


#: Seconds: a finite number (the loaders refuse NaN and infinities) above 0, at most 30 days.
Seconds = Annotated[float, BeforeValidator(_seconds)]
#: A grace period in seconds: 0 or more, at most 30 days.
WaitSeconds = Annotated[float, BeforeValidator(_wait)]
#: CPUs: above 0, at most MAX_CPUS.
Cpus = Annotated[float, BeforeValidator(_cpus)]
#: Megabytes: above 0 (a float is rounded down), at most MAX_MEGABYTES.
Megabytes = Annotated[int, BeforeValidator(_megabytes)]
#: A name, image or instruction: a string that is not blank.
Text = Annotated[str, BeforeValidator(_text)]
#: A workdir inside the environment that the harness can use.
Workdir = Annotated[str, AfterValidator(check_workdir)]


T = TypeVar("T")


class Problems:
    """Every problem of one task dir, so its error names all of them (not the first of many)."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def check(self, fn: Callable[[], T]) -> T | None:
        """``fn()``, or None with its TaskError noted."""
        try:
            return fn()
        except TaskError as e:
            self.found.append(str(e))
            return None

    def raise_any(self) -> None:
        """One TaskError naming every problem noted (``; `` between them), if any."""
        if self.found:
            raise TaskError(None, None, "; ".join(self.found))


class Section(BaseModel):
    """A section of a task file: known keys strictly typed, other keys kept for their owners."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)


class StrictSection(Section):
    """A section whose keys are all known: an unknown key is a typo worth an error."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def validate(model: type[BaseModel], data: Any, file: Path, prefix: str = "") -> Any:
    """``model.model_validate(data)``, a TaskError naming the file and every key at fault on failure."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise every_error(e, file, prefix=prefix, model=model, error=TaskError) from None


def source_options(model: type[BaseModel], raw: dict[str, Any], spec_path: Path, fmt: str) -> Any:
    """A ``tasks:`` entry's adapter options validated by ``model``; errors name ``tasks[].KEY``."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        if err["type"] == "extra_forbidden":
            key = ".".join(str(p) for p in err["loc"])
            expected = ", ".join(["path", "format", "include", "exclude", "limit", *model.model_fields])
            raise TaskError(
                spec_path, f"tasks[].{key}", f"unknown key for the {fmt} format; expected: {expected}"
            ) from None
        raise first_error(e, spec_path, prefix="tasks[]", error=TaskError) from None
