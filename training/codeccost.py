"""What one step of the codec's decoder costs, per unit: the fitted times that the transforms
(``training.codectransforms``), the index codings (``training.indexcodings``) and the update's decode cost
(``protocol.wire.updatecost``) price a decode with, before any payload byte is read.

Times in nanoseconds, fitted on one busy CPU core (2 cores, load ~7; torch, float64, deterministic
settings) by the decodes of ``python -m tests.fuzz.campaign --measure`` (docs/security.md).
"""

from __future__ import annotations

NS_OUT = 60
"""Per decoded value: float64 zeros/scatter or tile, to fp32, concatenation."""
NS_QVALUE = 260
"""Per kept value at 2-8 bits: unpack to int64, dequantise in float64, finiteness."""
NS_FVALUE = 110
"""Per kept raw fp32 value: to float64, finiteness."""
NS_INDEX = 200
"""Per kept index at widths 1, 2, 4, 8, 12 (vectorised unpacking, range and order checks)."""
NS_INDEX_BIT = 25
"""Per index bit on numpy's generic unpacking path."""
NS_MAC = 2
"""Per multiply-add of the quantised inverse DCT (a batched matrix product)."""
NS_SLOT = 40
"""Per tile value per kept slot of the raw fp32 inverse DCT (an elementwise loop)."""
NS_TILE = 110
"""Per tile value of the quantised inverse DCT after the product (scale, fp32)."""
NS_PAYLOAD = 6
"""Per payload byte: reading the raw fields, finiteness, the canonical re-encoding."""
