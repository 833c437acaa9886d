"""HighwayHash-64 in pure Python, as test support: what nats-server's file store hashes each
message record with, so a test can edit the stopped server's block files the way an attacker
who can write them would, with the record's own checksum recomputed.

Follows the portable reference (google/highwayhash, as minio/highwayhash's generic Go code
implements it): a 256-bit state of four 64-bit lanes in four vectors, 32-byte packets, the
tail packed as the reference packs it, four permute-and-update rounds to finish. Checked
against the reference's published test vectors (tests/test_highwayhash64.py). Slow (pure
Python), which is fine for the few records a test edits.
"""

from __future__ import annotations

import struct

_M = (1 << 64) - 1
_INIT0 = (0xDBE6D5D5FE4CCE2F, 0xA4093822299F31D0, 0x13198A2E03707344, 0x243F6A8885A308D3)
_INIT1 = (0x3BD39E10CB0EF593, 0xC0ACF169B5F18A8C, 0xBE5466CF34E90C6C, 0x452821E638D01377)
_LANES = struct.Struct("<4Q")


def _swap32(x: int) -> int:
    return ((x >> 32) | (x << 32)) & _M


def _zipper(v0: int, v1: int) -> tuple[int, int]:
    """The reference's ZipperMerge of lanes (v0, v1): what is added to the other vector's pair."""
    res = v0 & (0xFF << 16)
    res2 = (v0 & (0xFF << 56)) + (v1 & (0xFF << 16))
    res += (v1 & (0xFF << 56)) >> 8
    res2 += (v0 & (0xFF << 48)) >> 8
    res += ((v0 & (0xFF << 40)) + (v1 & (0xFF << 48))) >> 16
    res2 += (v1 & (0xFF << 40)) >> 16
    res += ((v0 & (0xFF << 24)) + (v1 & (0xFF << 32))) >> 24
    res2 += ((v1 & (0xFF << 24)) + (v0 & (0xFF << 32))) >> 24
    res += (v0 & (0xFF << 8)) << 32
    res2 += (v1 & 0xFF) << 48
    res += v0 << 56
    res2 += (v1 & (0xFF << 8)) << 24
    return res & _M, res2 & _M


class _State:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("a HighwayHash key is 32 bytes")
        k = _LANES.unpack(key)
        self.mul0 = list(_INIT0)
        self.mul1 = list(_INIT1)
        self.v0 = [i ^ x for i, x in zip(_INIT0, k, strict=True)]
        self.v1 = [i ^ _swap32(x) for i, x in zip(_INIT1, k, strict=True)]

    def update(self, packet: bytes) -> None:
        v0, v1, mul0, mul1 = self.v0, self.v1, self.mul0, self.mul1
        for i, lane in enumerate(_LANES.unpack(packet)):
            v1[i] = (v1[i] + lane + mul0[i]) & _M
            mul0[i] ^= ((v1[i] & 0xFFFFFFFF) * (v0[i] >> 32)) & _M
            v0[i] = (v0[i] + mul1[i]) & _M
            mul1[i] ^= ((v0[i] & 0xFFFFFFFF) * (v1[i] >> 32)) & _M
        for a, b, src, dst in ((0, 1, v1, v0), (2, 3, v1, v0), (0, 1, v0, v1), (2, 3, v0, v1)):
            add0, add1 = _zipper(src[a], src[b])
            dst[a] = (dst[a] + add0) & _M
            dst[b] = (dst[b] + add1) & _M

    def remainder(self, tail: bytes) -> None:
        """The last 1..31 bytes, packed into one packet as the reference does."""
        n = len(tail)
        for i in range(4):
            self.v0[i] = (self.v0[i] + ((n << 32) + n)) & _M
            lo, hi = self.v1[i] & 0xFFFFFFFF, self.v1[i] >> 32
            lo = ((lo << n) | (lo >> (32 - n))) & 0xFFFFFFFF
            hi = ((hi << n) | (hi >> (32 - n))) & 0xFFFFFFFF
            self.v1[i] = (hi << 32) | lo
        mod4 = n & 3
        whole = n - mod4
        packet = bytearray(32)
        packet[:whole] = tail[:whole]
        if n >= 16:
            packet[28:32] = tail[n - 4:n]
        elif mod4:
            packet[16] = tail[whole]
            packet[17] = tail[whole + (mod4 >> 1)]
            packet[18] = tail[n - 1]
        self.update(bytes(packet))

    def finish(self) -> int:
        for _ in range(4):
            v0 = self.v0
            self.update(_LANES.pack(_swap32(v0[2]), _swap32(v0[3]), _swap32(v0[0]), _swap32(v0[1])))
        return (self.v0[0] + self.v1[0] + self.mul0[0] + self.mul1[0]) & _M


def digest64(key: bytes, data: bytes) -> bytes:
    """HighwayHash-64 of ``data`` under the 32-byte ``key``, as 8 bytes little-endian (what
    Go's ``Digest64.Sum`` appends)."""
    state = _State(key)
    whole = len(data) - len(data) % 32
    for at in range(0, whole, 32):
        state.update(data[at:at + 32])
    if whole < len(data):
        state.remainder(data[whole:])
    return struct.pack("<Q", state.finish())
