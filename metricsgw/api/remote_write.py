"""POST /api/v1/write: bound the body, decode, run the ingest pipeline, append, answer.

Orchestration only: remote/codec.py decodes, ingest/pipeline.py decides what is stored, storage
makes it durable. Status codes follow the sender's retry logic (design.md 3): 204 all
stored or dropped by the operator's relabel rules; 400 some series refused (invalid data or
an ingest limit; the rest *was* stored; no retry); 413/415 for a body we will not read; 503
only when storage fails (the sender retries). Remote-Write 2.0's written counts: remote/written.py.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from .. import compiled
from ..appkeys import CONFIG, PIPELINE, STORAGE, TELEMETRY
from ..errors import GatewayError, IngestRejected, Unavailable
from ..http.body import read_bounded
from ..remote import codec
from ..remote.written import written_headers

log = logging.getLogger(__name__)

MAX_LISTED_REJECTIONS = 10


def rejection_text(rejections: list, stored_samples: int, dropped_samples: int = 0) -> str:
    refused = sum(r.samples for r in rejections)
    dropped = f", {dropped_samples} dropped by relabel rules" if dropped_samples else ""
    lines = [f"{len(rejections)} series rejected, {refused} samples not stored "
             f"({stored_samples} samples of valid series were stored{dropped}):"]
    lines += [f"{r.reason}: {r.message}" for r in rejections[:MAX_LISTED_REJECTIONS]]
    if len(rejections) > MAX_LISTED_REJECTIONS:
        lines.append(f"and {len(rejections) - MAX_LISTED_REJECTIONS} more")
    return "\n".join(lines)


async def handle_write(request: web.Request) -> web.Response:
    app = request.app
    cfg, telemetry = app[CONFIG], app[TELEMETRY]
    ctype = request.headers.get("Content-Type")
    cenc = request.headers.get("Content-Encoding")
    version = "unknown"
    try:
        proto = codec.negotiate(ctype, cenc)  # 415 before reading anything
        version = str(proto)
        body = await read_bounded(request, cfg.remote_write_max_body_size)
        # An app that did not load the write path's kernels at its start (one built in a test) loads them now;
        # until they are in, the codec reads a known scrape in numpy.
        compiled.start_loading()
        pipeline = app[PIPELINE]
        # Decoded and processed back to back on the loop: the ids known_sids finds are the ones process uses.
        decoded = codec.decode_request(body, ctype, cenc, cfg.remote_write_max_decoded_size, known=pipeline.known_sids)
        batch, rejections = pipeline.process(decoded)
        nat = batch.native
        if len(batch) or batch.new_series or batch.metadata or nat:
            await _append(app[STORAGE], batch)
            pipeline.confirm(batch)
        stored = len(batch)
        if stored:
            telemetry.samples_ingested.inc(stored)
        refused = [r for r in rejections if not r.configured]
        dropped = sum(r.samples for r in rejections if r.configured)  # counted by reason in pipeline
        if nat is None:
            headers = written_headers(proto, stored + dropped)
        else:
            headers = written_headers(proto, stored + dropped, nat.histograms + nat.dropped_histograms,
                                      nat.exemplars + nat.dropped_exemplars)
        if refused:
            err = IngestRejected(rejection_text(refused, stored, dropped))
            err.headers = headers  # partial write: the 2.0 spec still wants the counts
            raise err
    except GatewayError as err:
        telemetry.write_requests.labels(version, str(err.status)).inc()
        raise
    telemetry.write_requests.labels(version, "204").inc()
    return web.Response(status=204, headers=headers)


async def _append(storage, batch) -> None:
    # Usually written and synced before append_nowait returns (no task, no trip round the loop). Else the wait is
    # shielded: a sender that disconnects meanwhile must not cancel a half-done WAL append; the append finishes
    # (or fails) on its own and the next request sees it.
    try:
        waiting = storage.append_nowait(batch)
        if waiting is not None:
            await asyncio.shield(waiting)
    except GatewayError:
        raise
    except asyncio.CancelledError:
        raise
    except Exception as err:  # disk full, I/O error...: our failure, the sender must retry
        log.exception("storage append failed")
        raise Unavailable(f"storage append failed: {err}") from None
