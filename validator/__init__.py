"""The validator node: intake, verify, recompute, score, settle, merge, serve the API."""
