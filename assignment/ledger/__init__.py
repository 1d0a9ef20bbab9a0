"""The fenced offset ledger: committed ranges, resets, retention folds, and the audit trail's marks."""
