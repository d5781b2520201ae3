"""The GPU runs of issue 29: one prepared script (``run_issue29.sh``) and the measurements it calls."""
