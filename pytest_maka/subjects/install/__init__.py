"""Agents installed once per environment into a cache, mounted read-only into every sandbox."""
