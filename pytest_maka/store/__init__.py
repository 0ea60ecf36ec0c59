"""Store: the attempts ledger, the derived results file, artifacts and the provenance lock."""
