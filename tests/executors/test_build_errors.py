"""Which build failures are retried: the pure classification, on the engines' real words."""

from __future__ import annotations

import pytest

from pytest_maka.executors.docker.build_errors import classify_build_failure

# The classic builder's and BuildKit's own messages (as the engine streams them).
LEGACY_RUN = "The command '/bin/sh -c echo step-fails && exit 7' returned a non-zero code: 7"
BUILDKIT_RUN = 'process "/bin/sh -c make test" did not complete successfully: exit code: 2'


@pytest.mark.parametrize(
    ("error", "tail", "expected"),
    [
        (LEGACY_RUN, "step-fails", "deterministic"),
        (BUILDKIT_RUN, "make: *** [test] Error 1", "deterministic"),
        ("COPY failed: file not found in build context or excluded by .dockerignore: stat app.py", "", "deterministic"),
        ("dockerfile parse error line 3: unknown instruction: RNU", "", "deterministic"),
        ("pull access denied for nosuch/image, repository does not exist", "", "deterministic"),
        # the step failed on a download: worth another try
        (
            LEGACY_RUN,
            "E: Failed to fetch http://deb.debian.org/ Temporary failure resolving 'deb.debian.org'",
            "transient",
        ),
        ("Get https://registry-1.docker.io/v2/: net/http: TLS handshake timeout", "", "transient"),
        ("toomanyrequests: You have reached your pull rate limit", "", "transient"),
        ("write /var/lib/docker/tmp/x: no space left on device", "", "transient"),
        ("something nobody has seen before", "", "transient"),
        # the failing command's own words (here: "timeout") say nothing about why it failed
        ("The command '/bin/sh -c timeout 5 ./configure' returned a non-zero code: 1", "", "deterministic"),
    ],
)
def test_build_failures_are_classified(error: str, tail: str, expected: str) -> None:
    assert classify_build_failure(error, tail) == expected
