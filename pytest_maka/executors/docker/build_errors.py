"""Which image-build failures are worth another try: a small pure classification.

A deterministic failure is the task's own: a Dockerfile step that exits non-zero, a COPY of a
file the context lacks, a syntax error, a base image that does not exist. Building again
fails the same way, so it is not retried. A transient one is the engine's or the network's
(a dropped connection, a registry rate limit, a full disk, a timeout): it is retried after
the lifecycle's backoff. A step that failed because a download failed is transient.
"""

from __future__ import annotations

import re
from typing import Literal

BuildFailure = Literal["deterministic", "transient"]

TRANSIENT = re.compile(
    r"connection (reset|refused|closed)|broken pipe|i/o timeout|tls handshake timeout|timed? ?out|"
    r"temporary failure|could not resolve|name resolution|no such host|network is unreachable|"
    r"toomanyrequests|too many requests|rate limit|\b50[0234]\b|service unavailable|bad gateway|"
    r"unexpected eof|no space left on device|context deadline exceeded|server misbehaving|"
    r"failed to fetch|hash sum mismatch|error reading from server|the engine still answers|stopped answering",
    re.IGNORECASE,
)
DETERMINISTIC = re.compile(
    r"returned a non-zero code|did not complete successfully|exit code: ?\d+|"
    r"copy failed|failed to compute cache key|no such file or directory|not found: not found|"
    r"dockerfile parse error|unknown instruction|unknown flag|syntax error|"
    r"pull access denied|manifest unknown|repository does not exist|invalid reference format|"
    r"the build ended without an image",
    re.IGNORECASE,
)

QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def classify_build_failure(error: str, log_tail: str = "") -> BuildFailure:
    """``error``: the engine's one-line build error; ``log_tail``: the last lines of the build log.

    Transient evidence anywhere wins (a RUN step that failed on a download is worth a retry);
    otherwise a recognised task error is deterministic; anything unknown is transient.
    """
    error = QUOTED.sub("", error)  # the failing command's own words say nothing about why it failed
    if TRANSIENT.search(error) or TRANSIENT.search(log_tail):
        return "transient"
    if DETERMINISTIC.search(error):
        return "deterministic"
    return "transient"
