"""The local executor: every attempt in a bubblewrap sandbox on this host (or none, ``sandbox: none``).

``executor`` is the Executor; ``sandbox`` the lease's Sandbox with its parts (``files``: the
lease's directories and verdict channel, ``spawn``: live processes, ``egress``: the allowlist
proxy, ``full``: the full-disk watch, ``ahead``: a verifier sandbox set up ahead); ``bwrap``,
``limits``, ``disk`` and ``process`` are the host mechanisms under them.
"""

from .executor import MISSING_BWRAP, LocalExecutor
from .options import LocalOptions
from .sandbox import LocalSandbox

__all__ = ["MISSING_BWRAP", "LocalExecutor", "LocalOptions", "LocalSandbox"]
