"""Suspensions, resumes and migrations in /metrics: the collector reads the status
record's `mobility` and each client's `suspended_bytes` (tally/server/suspend.py,
migration.py), rendered and parsed back by prometheus_client."""
from __future__ import annotations

from test_metrics_exporter import DEVICE, scrape, status

from tally.cluster.metrics_exporter import TallyCollector
from tally.server.counters import ServerCounters


def test_mobility_figures():
    mobility = {"suspensions": 3, "resumes": 2, "last_suspend_ms": 20.5, "last_resume_ms": 12.0,
                "migrations": 1, "migrations_failed": 4, "last_migration_ms": 1500.0,
                "last_migration_bytes": 16 << 20, "last_migration_failure": "target refused",
                "saved_host_bytes": 40 << 20, "saved_spilled_bytes": 24 << 20, "saved_kept_bytes": 8 << 20,
                "saved_host_limit": None}

    def with_mobility() -> dict:
        record = status(mobility=mobility)
        record["clients"][0]["suspended_bytes"] = 64 << 20
        return record

    got = scrape(TallyCollector(with_mobility, lambda: None, ServerCounters(), DEVICE))
    assert got["tally_suspensions_total"] == [({}, 3.0)] and got["tally_resumes_total"] == [({}, 2.0)]
    assert got["tally_migrations_total"] == [({}, 1.0)] and got["tally_migrations_failed_total"] == [({}, 4.0)]
    assert got["tally_last_suspend_seconds"] == [({}, 0.0205)]
    assert got["tally_last_migration_seconds"] == [({}, 1.5)]
    assert got["tally_last_migration_bytes"] == [({}, float(16 << 20))]
    assert got["tally_suspended_host_bytes"] == [({}, float(40 << 20))]
    assert got["tally_suspended_spilled_bytes"] == [({}, float(24 << 20))]
    assert got["tally_suspend_kept_host_bytes"] == [({}, float(8 << 20))]
    ((labels, value),) = got["tally_client_suspended_bytes"]
    assert labels["client"] == "7" and value == float(64 << 20)


def test_no_mobility_record_no_figures():
    got = scrape(TallyCollector(status, lambda: None, ServerCounters(), DEVICE))
    assert "tally_suspensions_total" not in got and "tally_client_suspended_bytes" not in got
