"""Verifiers: how a task's hidden verifier is run after the subject stopped, and how its verdict is read."""
