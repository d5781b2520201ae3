"""One module per ``tessera`` subcommand; each exposes ``register(subparsers)``.

Handlers import their heavy dependencies lazily so that ``tessera --help`` stays fast.
"""
