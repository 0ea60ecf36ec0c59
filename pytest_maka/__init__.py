"""pytest-maka: AI-agent evaluations as pytest experiments."""

__version__ = "0.1.0"
