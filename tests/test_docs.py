"""Every setting is documented, and the flags, config keys and docs/settings.md agree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metricsgw.config import SETTINGS, ConfigError, load, markdown_table

ROOT = Path(__file__).resolve().parents[1]


def test_settings_page_table_is_current():
    page = (ROOT / "docs" / "settings.md").read_text()
    assert markdown_table() in page, "docs/settings.md's table is stale: paste `python -m metricsgw.config`"


def test_help_lists_every_flag_with_its_default():
    out = subprocess.run([sys.executable, "-m", "metricsgw", "serve", "--help"], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    for s in SETTINGS:
        assert s.flag in out, s.flag
    assert out.count("(default:") >= len(SETTINGS)


def test_config_file_keys_nested_or_dotted_and_flags_override(tmp_path):
    cfg_file = tmp_path / "metricsgw.yml"
    cfg_file.write_text("query:\n  timeout: 30s\n  max-samples: 1000\nstorage.path: /tmp/x\n")
    cfg = load({"query.max-samples": "2000"}, str(cfg_file))
    assert cfg.query_timeout == 30.0 and cfg.query_max_samples == 2000 and cfg.storage_path == "/tmp/x"


@pytest.mark.parametrize("flag, value, needle", [
    ("--query.timeout", "soon", "--query.timeout"),
    ("--query.max-samples", "-5", "--query.max-samples"),
    ("--web.listen-address", "nohost", "--web.listen-address"),
    ("--remote-write.max-body-size", "huge", "--remote-write.max-body-size"),
])
def test_bad_flag_value_stops_start_up_naming_it(flag, value, needle):
    proc = subprocess.run([sys.executable, "-m", "metricsgw", "serve", f"{flag}={value}"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert needle in proc.stderr


def test_unknown_config_key_is_refused(tmp_path):
    cfg_file = tmp_path / "bad.yml"
    cfg_file.write_text("query:\n  timeoutt: 30s\n")
    with pytest.raises(ConfigError, match="query.timeoutt"):
        load({}, str(cfg_file))


def test_defaults_are_shown_as_a_prometheus_user_writes_them():
    table = markdown_table()
    assert "| `--storage.retention.time` | `15d` |" in table
    assert "| `--query.max-memory` | `1GiB` |" in table
    assert "| `--storage.wal-segment-size` | `64MiB` |" in table
    assert "| `--storage.flush-interval` | `2m` |" in table
    out = subprocess.run([sys.executable, "-m", "metricsgw", "serve", "--help"], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert "(default: 15d)" in " ".join(out.split())  # argparse wraps lines
    assert "e+" not in out and "1073741824" not in out
    # and what is shown parses back to the default
    shown = {s.name: s.shown_default for s in SETTINGS if not s.repeated}
    assert load(shown).values == load({}).values


@pytest.mark.parametrize("text, seconds", [("15d", 15 * 86400), ("1h30m", 5400), ("250ms", 0.25), ("2w", 14 * 86400),
                                            ("90", 90), ("1.5", 1.5)])
def test_durations_parse_as_prometheus_writes_them(text, seconds):
    assert load({"storage.retention.time": text}).storage_retention_time == seconds


@pytest.mark.parametrize("text, size", [("2GiB", 2 << 30), ("64MiB", 64 << 20), ("512KB", 512_000), ("1000", 1000),
                                        ("1000B", 1000)])
def test_sizes_parse_with_units(text, size):
    assert load({"query.max-memory": text}).query_max_memory == size
