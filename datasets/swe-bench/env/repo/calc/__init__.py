from .ops import add, clamp

__all__ = ["add", "clamp"]
