"""Executors: where an attempt runs (local sandbox, docker, ... via plugins)."""
