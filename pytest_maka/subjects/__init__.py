"""Subjects: the things under test (oracle, nop, command, ... via plugins)."""
