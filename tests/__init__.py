"""Tessera's test suites, one package per part of the system."""
