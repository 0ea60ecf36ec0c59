"""Benchmark adapters: turn a task source (task dirs, instance files) into Task objects."""
