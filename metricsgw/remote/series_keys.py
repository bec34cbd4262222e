"""The key a series is known by while a process runs: for 1.0 requests, the seeded XXH3-128 of its raw label
records (the bytes the sender sent); for 2.0 requests, its tuple of label symbols.

In the remote layer because the codec makes these keys while it decodes (scrape_scan.py hashes in its
compiled pass); the ingest pipeline's cache is keyed by them.
"""

from __future__ import annotations

import os

import numpy as np
import xxhash

# Seeded per process: the keys live and die with the process, and a sender cannot aim label bytes at another
# series' key without knowing the seed.
SEED = int.from_bytes(os.urandom(8), "little")


def cache_keys(raw_keys) -> list:
    """Keys for raw label keys: the 128-bit XXH3 of a v1 key, seeded (16 bytes, 49 as a Python object instead
    of ~300 for the label bytes; a random collision is 2**-64-unlikely even among a billion series), the v2
    symbol tuple as is, None (undecodable) kept. XXH3 rather than blake2b: a tenth of the cost (0.14 against
    1.04 ms for a request of 2,000 series); the key needs no cryptographic strength, only to tell series
    apart."""
    h, seed = xxhash.xxh3_128_digest, SEED
    return [h(k, seed) if type(k) is bytes else k for k in raw_keys]


def halves(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """16-byte v1 keys -> their high and low 64-bit halves (big-endian, as the digest is written), the form
    the compiled scan gives them in (``scrape_scan.py``) and the ingest's table of known series takes."""
    joined = b"".join(keys)
    if len(joined) != 16 * len(keys):
        raise ValueError("v1 series keys are 16 bytes each")
    both = np.frombuffer(joined, ">u8").reshape(-1, 2)
    return both[:, 0].astype(np.uint64), both[:, 1].astype(np.uint64)
