"""Tiny arithmetic helpers."""


def add(a, b):
    return a + b


def clamp(value, low, high):
    """Limit ``value`` to the range [low, high]."""
    if value < low:
        return low
    return value
