"""Exception root of the tessera (CLI / composition) package."""


class TesseraError(Exception):
    """Root of every error raised by ``tessera``; the CLI prints it and exits with status 2."""
