"""Replays: the content digest of a range's output and the replay determinism check."""
