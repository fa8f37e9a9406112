"""docs/runners.md (and the fake GitHub's part of docs/simulator.md) say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from keel import words
from keel.runners import lifecycle, spec
from keel.runners.metrics import METRICS
from keel.runners.service import RunnerService
from keel.runners.settings import parse
from keel.sim.github.scenario import FAULT_KINDS

DOCS = Path(__file__).resolve().parents[2] / "docs"
TEXT = (DOCS / "runners.md").read_text()


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_the_config_reference_is_accepted_whole_with_the_defaults_it_shows():
    block = next(b for b in blocks(TEXT, "yaml") if b.startswith("runners:\n  version: 1"))
    settings = parse(yaml.safe_load(block)["runners"])
    [small] = settings.scale_sets
    assert settings.reconcile_interval_s == spec.DEFAULT_RECONCILE_INTERVAL_S
    assert small.start_timeout_s == spec.DEFAULT_START_TIMEOUT_S and small.placement == "spread"
    assert small.providers[0].runner.jit_path == spec.DEFAULT_JIT_PATH
    assert settings.metrics.listen == spec.DEFAULT_METRICS_LISTEN
    assert settings.webhook.listen == spec.DEFAULT_WEBHOOK_LISTEN
    assert settings.events_max_count == spec.DEFAULT_EVENTS_MAX_COUNT
    assert settings.providers[0].timeout_s == spec.DEFAULT_PROVIDER_TIMEOUT_S
    assert small.schedule.windows[1].extra["max_runners"] == 0


def test_the_quick_start_config_is_accepted():
    block = next(b for b in blocks(TEXT, "yaml") if "keel-c2-m4" in b and "version" not in b)
    assert parse(yaml.safe_load(block)["runners"]).scale_sets[0].max_runners == 16


def test_every_metric_is_documented_and_every_documented_one_exists():
    documented = set(re.findall(r"^\| `(keel_[a-z_]+)` \|", TEXT, re.M))
    assert documented == set(METRICS)


def test_the_state_words_are_the_codes():
    table = TEXT.split("Scale set states:", 1)[1].split("Provider states:", 1)[0]
    documented = re.findall(r"^\| `([A-Z ]+)` \|", table, re.M)
    assert documented == [words.LISTENING, words.HOLDING_BACK, words.BACKING_OFF, words.PAUSED,
                          words.DRAINING, words.OFF_SCHEDULE, words.RATE_LIMITED, words.DEGRADED,
                          words.STANDBY, words.STARTING, words.UNREACHABLE,
                          words.MISCONFIGURED]
    for word in (words.OK, words.HELD, words.UNREACHABLE, words.DISABLED):
        assert f"`{word}`" in TEXT.split("Provider states:", 1)[1].split("\n\n", 1)[0]


def test_the_cleanup_reasons_are_the_codes():
    table = TEXT.split("### Cleanup", 1)[1].split("\n\n", 2)[1]
    reasons = re.findall(r"^\| `([a-z_]+)` \|", table, re.M)
    assert reasons == list(lifecycle.REMOVED_REASONS + lifecycle.LOST_REASONS)


def test_the_engines_interface_is_documented():
    section = TEXT.split("## Running it", 1)[1]
    for method in ("adopt", "reconcile_once", "run", "status", "metrics", "handle_webhook", "control", "close"):
        assert f"`{method}(" in section and callable(getattr(RunnerService, method))


def test_the_fake_githubs_faults_are_documented():
    text = (DOCS / "simulator.md").read_text().split("## The fake GitHub", 1)[1]
    documented = re.findall(r"^\| `([a-z_]+)[:` ]", text.split("**Faults**", 1)[1], re.M)
    assert sorted(documented) == sorted(FAULT_KINDS)
