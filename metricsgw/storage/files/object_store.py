"""The object store a table lives on (``--storage.table-url=s3://bucket/prefix``): the S3 calls the table makes
besides the Delta log's (which delta-rs makes with ``storage_options``), and the proof at start that the store
keeps concurrent commits apart.

Keys are the table's paths relative to --storage.path, under the prefix: ``<prefix>/table/samples/hour=.../part-
gw0-00000001.parquet``. Credentials come from the AWS chain (environment, shared credentials and config files,
container and instance roles), or from ``--storage.s3.credentials-file`` (the AWS INI format); they are held here
only, never logged, never part of a message, and scrubbed from any error text that passes through ``plain``.

Every failure to reach or use the store is a ``StoreUnavailable``: a 503 for a query (its message says what the
store did in plain words, no class or socket names) and an ``OSError`` for the flush, which keeps the head and
its WAL and retries.
"""

from __future__ import annotations

import email.utils
import logging
import os
import re
import uuid
from dataclasses import dataclass
from urllib.parse import urlparse

from ...errors import Unavailable

log = logging.getLogger(__name__)

# How long one call to the store may take before it counts as failed: the flush and the follower retry on their
# own schedule, and a query waiting on the store is better answered 503 than held past its deadline.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
ATTEMPTS = 3
# delta-rs's client, told the same (its defaults retry for three minutes).
DELTA_CLIENT_OPTIONS = {"connect_timeout": f"{CONNECT_TIMEOUT_S}s", "timeout": f"{READ_TIMEOUT_S}s",
                        "max_retries": str(ATTEMPTS - 1), "retry_timeout": "15s"}
# Where the conditional-write proof writes its scratch objects (removed after).
CHECK_PREFIX = "_metricsgw/conditional-write-check"
# Each writer id's claim (claim_writer): renewed at every follow, another gateway's once it is this old.
CLAIM_PREFIX = "_metricsgw/writers"
CLAIM_STALE_S = 60


class StoreUnavailable(Unavailable, OSError):
    """The object store cannot be read or written now (unreachable, 5xx, too slow, refused credentials)."""


class StoreRefused(ValueError):
    """The store cannot hold a table several writers share; the message says why, for the operator."""


@dataclass(frozen=True)
class S3Settings:
    url: str  # s3://bucket/prefix
    endpoint: str = ""  # http(s)://host:port for MinIO, Ceph RGW...; empty: AWS
    region: str = ""
    force_path_style: bool = False
    credentials_file: str = ""  # AWS shared credentials format; empty: the standard chain
    cache_bytes: int = 0  # other writers' sample files copied on demand within this budget; 0: every file, always


def parse_table_url(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix without slashes at either end)."""
    u = urlparse(url)
    if u.scheme != "s3" or not u.netloc:
        raise ValueError(f"not an s3://bucket/prefix URL: {url!r}")
    return u.netloc, u.path.strip("/")


class ObjectStore:
    def __init__(self, settings: S3Settings) -> None:
        import boto3  # only a gateway with its table on a store pays for importing it
        import botocore.config
        import botocore.session

        self.bucket, self.prefix = parse_table_url(settings.url)
        self.cache_bytes = settings.cache_bytes  # the table's copies' budget (table.py, copies.py)
        self._claim: tuple[str, str] | None = None  # (key, holder) of this writer id's claim, once taken
        self._claim_etag = ""
        core = botocore.session.Session()
        if settings.credentials_file:
            core.set_config_variable("credentials_file", settings.credentials_file)
        session = boto3.Session(botocore_session=core, region_name=settings.region or None)
        creds = session.get_credentials()
        cfg = botocore.config.Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                                     retries={"mode": "standard", "max_attempts": ATTEMPTS},
                                     s3={"addressing_style": "path" if settings.force_path_style else "virtual"})
        self._client = session.client("s3", endpoint_url=settings.endpoint or None, config=cfg)
        self._secrets = [s for s in (creds.secret_key, creds.token) if s] if creds else []
        options = dict(DELTA_CLIENT_OPTIONS)
        if settings.endpoint:
            options["AWS_ENDPOINT_URL"] = settings.endpoint
            options["AWS_ALLOW_HTTP"] = str(settings.endpoint.startswith("http://")).lower()
        if settings.region or session.region_name:
            options["AWS_REGION"] = settings.region or session.region_name
        # both clients address the bucket alike: in the host name (AWS's way), or in the path when forced
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = str(not settings.force_path_style).lower()
        # Static keys (environment, credentials files) are handed on; a role's expiring keys are not: delta-rs
        # reads the container and instance roles itself, and renews them.
        if creds and creds.method in ("env", "shared-credentials-file", "config-file", "explicit"):
            frozen = creds.get_frozen_credentials()
            options["AWS_ACCESS_KEY_ID"] = frozen.access_key
            options["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
            if frozen.token:
                options["AWS_SESSION_TOKEN"] = frozen.token
        self._delta_options = options

    def __repr__(self) -> str:  # never the keys
        return f"ObjectStore(s3://{self.bucket}/{self.prefix})"

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    # ------------------------------------------------------------------ what delta-rs is given
    def delta_url(self, rel: str) -> str:
        return f"s3://{self.bucket}/{self.key(rel)}"

    @property
    def delta_options(self) -> dict[str, str]:
        return dict(self._delta_options)

    # ------------------------------------------------------------------ objects
    def key(self, rel: str) -> str:
        rel = rel.replace(os.sep, "/")
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def put(self, local_path: str, rel: str) -> None:
        self._call("write", self._client.upload_file, local_path, self.bucket, self.key(rel))

    def get(self, rel: str, local_path: str) -> None:
        """Download to ``local_path`` atomically (a temporary name, then a rename): a reader never meets half a file,
        and two processes fetching the same object both end with a whole one."""
        os.makedirs(os.path.dirname(local_path), exist_ok=True)
        tmp = f"{local_path}.fetch-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            self._call("read", self._client.download_file, self.bucket, self.key(rel), tmp)
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def delete(self, rel: str) -> None:
        self._call("delete from", self._client.delete_object, Bucket=self.bucket, Key=self.key(rel))

    def list(self, rel_prefix: str) -> list[str]:
        """Every object under ``rel_prefix``, as paths relative to the table's prefix."""
        out: list[str] = []
        cut = len(self.prefix) + 1 if self.prefix else 0
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.key(rel_prefix))
        for page in self._call("list", list, pages):
            out.extend(o["Key"][cut:] for o in page.get("Contents", ()))
        return out

    # ------------------------------------------------------------------ the proof at start
    def check_conditional_writes(self) -> None:
        """Write a scratch object twice with ``If-None-Match: *``: the second write must be refused (412). delta-rs
        commits each log entry so; a store that overwrites instead lets two writers' commits take the same entry
        and one of them is lost while both report success."""
        from botocore.exceptions import ClientError

        key = self.key(f"{CHECK_PREFIX}/{uuid.uuid4().hex}")
        try:
            self._call("write", self._client.put_object, Bucket=self.bucket, Key=key, Body=b"1", IfNoneMatch="*")
        except FileNotFoundError:
            raise StoreRefused(f"the bucket {self.bucket!r} does not exist at the object store: create it "
                               "first") from None
        try:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=b"2", IfNoneMatch="*")
        except ClientError as err:
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status != 412:
                raise StoreRefused(f"the object store at {self.where} answered a conditional write (If-None-Match: *) "
                                   f"with HTTP {status} instead of 412: it does not support them, and several "
                                   "gateways committing to one table there could overwrite each other's commits "
                                   "unnoticed. Use a store that honours conditional writes.") from None
        except Exception as err:  # noqa: BLE001 - unreachable midway: plain words, as for any call
            raise self.plain("write", err) from None
        else:
            raise StoreRefused(f"the object store at {self.where} overwrote an object that a conditional write "
                               "(If-None-Match: *) must have kept: it ignores conditional writes, so several gateways "
                               "committing to one table there would silently lose each other's commits (every write "
                               "would still report success). Refusing to use it; use a store that answers 412 there "
                               "(AWS S3, a recent MinIO or Ceph RGW).")
        finally:
            try:
                self._client.delete_object(Bucket=self.bucket, Key=key)
            except Exception:  # noqa: BLE001 - a scratch object left behind harms nothing
                log.warning("could not delete the scratch object of the conditional-write check in %s", self.where)

    # ------------------------------------------------------------------ one gateway per writer id
    def claim_writer(self, writer_id: str, holder: str) -> None:
        """Take ``writer_id`` for ``holder`` (host and --storage.path): refused while another holder renewed its claim
        within ``CLAIM_STALE_S``. Two gateways with one writer id would number, upload and remove the same files; on
        one host the lock file under --storage.path refuses the second, across hosts this claim does."""
        from botocore.exceptions import ClientError

        key = self.key(f"{CLAIM_PREFIX}/{writer_id}")
        try:
            got = self._call("read", self._client.get_object, Bucket=self.bucket, Key=key)
        except FileNotFoundError:
            cond = {"IfNoneMatch": "*"}
        else:
            other = got["Body"].read().decode(errors="replace")
            age = (_http_date(got) - got["LastModified"]).total_seconds()
            if other != holder and age < CLAIM_STALE_S:
                raise StoreRefused(f"--storage.writer-id={writer_id} is in use by another gateway ({other}, "
                                   f"{age:.0f}s ago) on the table at {self.where}: give each gateway its own")
            cond = {"IfMatch": got["ETag"]}
        try:
            self._claim_etag = self._client.put_object(Bucket=self.bucket, Key=key, Body=holder.encode(),
                                                       **cond)["ETag"]
        except ClientError as err:
            if _status(err) == 412:  # another gateway took it between our read and write
                raise StoreRefused(f"--storage.writer-id={writer_id} was just taken by another gateway on the table "
                                   f"at {self.where}: give each gateway its own") from None
            raise self.plain("write", err) from None
        except Exception as err:  # noqa: BLE001 - unreachable midway: plain words, as for any call
            raise self.plain("write", err) from None
        self._claim = (key, holder)

    def renew_claim(self) -> None:
        """Refresh the claim (the follower's step, every few seconds); raises StoreRefused when another gateway took
        it meanwhile (ours went stale: this process was stopped or cut off for longer than ``CLAIM_STALE_S``)."""
        from botocore.exceptions import ClientError

        if self._claim is None:
            return
        key, holder = self._claim
        try:
            self._claim_etag = self._client.put_object(Bucket=self.bucket, Key=key, Body=holder.encode(),
                                                       IfMatch=self._claim_etag)["ETag"]
        except ClientError as err:
            if _status(err) == 412:
                raise StoreRefused(f"this gateway's writer id was taken by another gateway on the table at "
                                   f"{self.where} while this one could not renew it; it writes no more") from None
            raise self.plain("write", err) from None
        except Exception as err:  # noqa: BLE001 - unreachable: the claim is renewed at the next step
            raise self.plain("write", err) from None

    def release_claim(self) -> None:
        if self._claim is None:
            return
        key, _ = self._claim
        self._claim = None
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key, IfMatch=self._claim_etag)
        except Exception:  # noqa: BLE001 - a claim left behind goes stale
            log.warning("could not release this writer id's claim in %s; it goes stale in %ss", self.where,
                        CLAIM_STALE_S)

    # ------------------------------------------------------------------ errors
    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError:
            raise
        except Exception as err:  # noqa: BLE001 - every failure of the store, in one plain form
            if _status(err) == 404:  # a file removed meanwhile: the caller's to judge, as a local file's absence
                raise FileNotFoundError(f"an object is not in the object store at {self.where}") from None
            raise self.plain(what, err) from None

    def plain(self, what: str, err: BaseException) -> StoreUnavailable:
        """``err`` (of boto or delta-rs) as a message for people: what was tried, on which store, what it answered."""
        text = str(err)
        found = _HTTP_STATUS.search(text)
        status = _status(err) or (int(found.group(1)) if found else None)
        if status:
            why = f"it answered HTTP {status}"
        elif "timeout" in type(err).__name__.lower() or "timed out" in text.lower():
            why = "it did not answer in time"
        elif any(w in (type(err).__name__ + text).lower() for w in ("connect", "error sending request")):
            why = "it cannot be reached"
        else:
            why = self.scrub(text.splitlines()[0][:200] if text else "it failed")
        return StoreUnavailable(f"could not {what} the object store at {self.where}: {why}", retry_after_s=5)

    def scrub(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "<secret>")
        return text


# delta-rs's messages carry the store's answer as text: "Server returned non-2xx status code ... 503 Service ..."
_HTTP_STATUS = re.compile(r"\b([45]\d\d) [A-Z][a-z]")


def _http_date(resp: dict):
    """The store's clock at its answer (a claim's age is measured on the store's clock, not this host's)."""
    return email.utils.parsedate_to_datetime(resp["ResponseMetadata"]["HTTPHeaders"]["date"])


def _status(err: BaseException) -> int | None:
    resp = getattr(err, "response", None)
    if isinstance(resp, dict):
        return resp.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None
