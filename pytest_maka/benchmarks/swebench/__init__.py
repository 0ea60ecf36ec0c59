"""SWE-bench: the adapter (instances -> tasks, ``adapter``), its plugin (``plugin``) and the
``patch`` subject that applies an instance's gold or a given patch, in one package."""

from .adapter import (
    APPLY_PATCH_SH,
    FORMAT,
    GRADING,
    WORKDIR,
    Instance,
    SweBenchOptions,
    derive_test_files,
    load_instances,
    parse_options,
    parse_test_list,
    patch_files,
    read_instances,
)

__all__ = [
    "APPLY_PATCH_SH",
    "FORMAT",
    "GRADING",
    "WORKDIR",
    "Instance",
    "SweBenchOptions",
    "derive_test_files",
    "load_instances",
    "parse_options",
    "parse_test_list",
    "patch_files",
    "read_instances",
]
