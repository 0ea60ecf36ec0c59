"""The live view of a run: attempt hooks, per-process status, the terminal display."""
