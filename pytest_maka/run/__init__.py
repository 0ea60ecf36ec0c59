"""The cell lifecycle (DESIGN.md §3): the one place where a cell is executed and classified."""
