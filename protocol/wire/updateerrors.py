"""The update wire format's errors: one class per way an update can be refused, under :class:`UpdateError`."""

from __future__ import annotations

from protocol.errors import ProtocolError


class UpdateError(ProtocolError):
    """Root of the update wire format's errors."""


class UpdateTooLarge(UpdateError):
    """The message, its header or its payload exceeds a size cap."""


class TruncatedUpdate(UpdateError):
    """The message ends before its declared lengths (or has trailing bytes)."""


class BadMagic(UpdateError):
    """The message does not start with the update magic."""


class MalformedHeader(UpdateError):
    """The header is not canonical JSON or a field is missing or of the wrong type."""


class UnsupportedVersion(UpdateError):
    """The header's version is not :data:`VERSION`."""


class UnknownCodec(UpdateError):
    """The header names a codec (or codec parameters) this node does not implement."""


class HeaderMismatch(UpdateError):
    """The tensors do not match the header (names, modules, expected parameters)."""


class BadTensorDtype(UpdateError):
    """A tensor has the wrong dtype for its codec field."""


class BadTensorShape(UpdateError):
    """A tensor has the wrong shape for its codec field."""


class NonFiniteValues(UpdateError):
    """A float field holds NaN or infinity."""


class InvalidPayload(UpdateError):
    """The payload's encoded values do not decode (indices out of order or range, and the like)."""


class NonCanonicalUpdate(UpdateError):
    """The bytes decode but are not the canonical encoding of their content."""


class DecodeTooCostly(UpdateTooLarge):
    """Decoding what the header declares would cost more memory or work than the caps allow."""


class CodecMismatch(UpdateError):
    """The header's codec is not the run's codec."""


class TranscriptMismatch(UpdateError):
    """A served transcript is not the one the header commits to (``transcript.root``)."""
