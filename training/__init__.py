"""Tessera's training core: the math miners and validators must compute identically.

Pure functions and torch modules only: no files, sockets, clocks or chain access here.
"""
