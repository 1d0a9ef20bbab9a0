"""The group protocol's records and pure decisions: group state, requests and answers, join, rebalance, reconcile."""
