"""Tests of `validator/`."""
