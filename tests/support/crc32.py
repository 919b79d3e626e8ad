"""Forging a body with a chosen CRC-32: what an attacker of PayPal's scheme (which signs only the
body's CRC-32) does in microseconds."""

from __future__ import annotations

import zlib

PAD = b"a" * 64  # the run a template carries where the forger may write; each byte stays a or c


def crc_twin(template: bytes, target: int) -> bytes:
    """``template`` with its run of 64 ``a`` rewritten (each ``a`` or ``c``) so its CRC-32 is ``target``.

    CRC-32 is affine over GF(2): flipping bit 1 of a byte XORs a fixed delta into the CRC, so a
    subset of flips reaching ``target`` is a linear system (64 unknowns span the 32 bits).
    """
    start = template.index(PAD)
    base = zlib.crc32(template)
    basis: list[tuple[int, int]] = []  # (delta with a leading bit, mask of the flips that make it)
    for k in range(len(PAD)):
        flipped = bytearray(template)
        flipped[start + k] ^= 0x02
        delta, mask = zlib.crc32(flipped) ^ base, 1 << k
        for vector, made in basis:
            if delta ^ vector < delta:
                delta, mask = delta ^ vector, mask ^ made
        if delta:
            basis.append((delta, mask))
            basis.sort(reverse=True)
    want, mask = base ^ target, 0
    for vector, made in basis:
        if want ^ vector < want:
            want, mask = want ^ vector, mask ^ made
    assert want == 0, "rank too low"
    forged = bytearray(template)
    for k in range(len(PAD)):
        if mask >> k & 1:
            forged[start + k] ^= 0x02
    assert zlib.crc32(forged) == target
    return bytes(forged)
