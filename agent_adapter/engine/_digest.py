"""The canonical digest of validated arguments.

Canonical encoding, pinned (the golden-digest tests hold it): msgspec JSON with
``order="sorted"`` (object keys and Struct/dataclass fields sorted by name), no
whitespace, non-ASCII text as raw UTF-8 (never ``\\u`` escapes), floats in msgspec's
shortest round-trip form (``1.0``, ``1e16``, ``1.5e-07`` is written ``1.5e-7``), enums by
value, tuples as arrays. The digest is the SHA-256 of those bytes, in hex: SHA-256
because it binds approvals (a non-cryptographic hash would let a collision carry an
approval to other arguments), and because on this hardware it beats BLAKE2 and BLAKE3
at the sizes tool arguments have.
"""

from __future__ import annotations

from hashlib import sha256
from typing import Any

import msgspec

__all__ = ["canonical", "digest"]

_encode = msgspec.json.Encoder(order="sorted").encode


def canonical(args: Any) -> bytes:
    """The canonical bytes of ``args`` (what :func:`digest` hashes)."""
    return _encode(args)


def digest(args: Any) -> str:
    """SHA-256 hex of the canonical encoding: equal values give equal digests, key order aside."""
    return sha256(_encode(args)).hexdigest()
