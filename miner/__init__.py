"""The miner node: fetch the checkpoint, train the assignment, package, commit, serve."""
