"""``${VAR}`` in a Harbor task's env tables, filled from the host's environment as Harbor fills them.

A value that is exactly ``${NAME}`` or ``${NAME:-default}`` takes ``NAME`` from the environment
pytest runs in (else the default); any other value is literal. A template whose variable is unset
and has no default leaves the task unrunnable (Harbor refuses the trial): the task is skipped
with one line naming the table, the key and the variable. The values taken from the host are
kept apart (``Task.host_values``) so that every artifact and record is scrubbed of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Harbor 0.25's template: the whole value, ``${NAME}`` or ``${NAME:-default}``.
TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")


@dataclass
class HostEnv:
    """The tables filled so far: the host's values used, and the templates it could not fill."""

    host: Mapping[str, str]
    values: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def fill(self, table: str, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with every template filled (an unset one stays as written and is noted)."""
        out = {}
        for key, value in env.items():
            match = TEMPLATE.fullmatch(value)
            if match is None:
                out[key] = value
            elif match.group(1) in self.host:
                out[key] = self.host[match.group(1)]
                self.values.append(out[key])
            elif match.group(2) is not None:
                out[key] = match.group(2)
            else:
                out[key] = value
                self.missing.append(f"{table}.{key} = {value!r}")
        return out

    def problem(self) -> str | None:
        """Why the task cannot run here, or None."""
        if not self.missing:
            return None
        names = ", ".join(dict.fromkeys(self.missing))  # a table every step shares is named once
        return f"{names}: takes a variable the host environment does not set (set it, or give a default)"
