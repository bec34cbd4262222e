"""Blocked query patterns from --query.blocked."""

from __future__ import annotations

import pytest

from metricsgw import config
from metricsgw.config import ConfigError
from metricsgw.errors import ExecError
from metricsgw.limits.blocked import BlockedQueries


def test_plain_pattern_blocks_whole_query_match():
    b = BlockedQueries([r'.*\{le!=""\}.*'])
    with pytest.raises(ExecError) as err:
        b.check('count({le!=""})', None, None)
    assert err.value.status == 422
    assert str(err.value).startswith("query blocked by --query.blocked rule 1: ")
    b.check("up", None, None)  # anchored: no match, no error


def test_anchored_not_substring():
    b = BlockedQueries(["up"])
    b.check("sum(up)", None, None)
    with pytest.raises(ExecError):
        b.check("  up \n", None, None)


def test_min_range_and_min_step_and_reason():
    b = BlockedQueries(["up", "rate\\(.*;min_range=1d;reason=use the recording rule job:rate5m",
                        ".*DCGM.*;min_step=1m;reason=DCGM; at a step of 1m or more"])
    b.check("rate(x[5m])", 3600, 15)  # range shorter than 1d
    with pytest.raises(ExecError, match="rule 2: use the recording rule job:rate5m$"):
        b.check("rate(x[5m])", 2 * 86400, 60)
    b.check("DCGM_FI_DEV_GPU_UTIL", 3600, 60)  # step not below 1m
    b.check("DCGM_FI_DEV_GPU_UTIL", None, None)  # instant query: no step
    with pytest.raises(ExecError, match="rule 3: DCGM; at a step of 1m or more"):
        b.check("DCGM_FI_DEV_GPU_UTIL", 3600, 15)


def test_pattern_may_contain_semicolons():
    b = BlockedQueries(["a;b"])
    with pytest.raises(ExecError):
        b.check("a;b")


@pytest.mark.parametrize("rule,match", [
    ("(unclosed", "invalid regex '\\(unclosed'"),
    ("x;min_range=forever", "min_range"),
    (";reason=nothing", "empty pattern"),
])
def test_bad_rules_fail_at_start_up(rule, match):
    with pytest.raises(ConfigError, match=match):
        BlockedQueries(["ok", rule])


def test_from_config_repeated_flag():
    cfg = config.load({"query.blocked": ["foo.*", "bar"]})
    b = BlockedQueries.from_config(cfg)
    assert len(b) == 2
    with pytest.raises(ExecError, match="rule 2"):
        b.check("bar")
