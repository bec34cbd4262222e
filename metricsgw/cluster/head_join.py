"""Joining the ingest shards' remote-read answers of a head read into one, at the wire level. Pure.

Each shard of a gateway holds its own series (the distributor splits by series hash), so the front's answer to
``POST /api/v1/read?scope=head`` (gateway_head.py) is the concatenation of its shards': the series of query i are
shard 0's, then shard 1's... (no series is in two shards, so nothing is merged).

The shards' answers are SAMPLES ``ReadResponse`` messages (remote_read.proto); they are cut and joined at the
wire level (field 1 of ReadResponse is the QueryResult of each query; QueryResult is its repeated field 1,
the series, so joining two QueryResults' bytes joins their series), never decoded sample by sample.
"""

from __future__ import annotations

from ..errors import BadData
from ..remote import read_codec


def query_results(response: bytes) -> list[bytes]:
    """The QueryResult payloads of a decoded ReadResponse, in query order."""
    out, pos, end = [], 0, len(response)
    while pos < end:
        tag, pos = _varint(response, pos)
        if tag != (1 << 3 | 2):  # field 1, length-delimited: the only field of ReadResponse
            raise BadData(f"unexpected field tag {tag} in a remote-read response")
        size, pos = _varint(response, pos)
        if pos + size > end:
            raise BadData("truncated remote-read response")
        out.append(response[pos:pos + size])
        pos += size
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data):
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise BadData("truncated varint in a remote-read response")


def join(answers: list[bytes]) -> bytes:
    """One snappy ReadResponse of decoded ReadResponses, query by query."""
    per_shard = [query_results(a) for a in answers]
    queries = max((len(r) for r in per_shard), default=0)
    if any(len(r) != queries for r in per_shard):
        raise BadData("shards answered different numbers of queries")
    return read_codec.encode_samples_response([b"".join(r[i] for r in per_shard) for i in range(queries)])
