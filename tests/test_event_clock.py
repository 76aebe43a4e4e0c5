"""Elapsed time with an event recorded before a migration
(tally/server/client/event_clock.py), on the executor over the sim backend,
whose events keep a virtual clock of their own: two carried events time each
other from their carried times; a carried event and one recorded here cannot
be timed, and the error says why; an event carried twice keeps its time (the
emulator end to end: tests/test_e2e_migrate_memory.py)."""
from __future__ import annotations

import pytest

from tally.backends.sim import SimBackend
from tally.backends.sim.variants import SimVariantProvider
from tally.protocol.errors import CUDA_ERROR_INVALID_HANDLE, DeviceError
from tally.scheduler import EventRecord, StreamExecutor, make_policy
from tally.server.client import event_clock
from tally.server.client.events import EventTable


@pytest.fixture
def executor():
    sim = SimBackend()
    executor = StreamExecutor(sim, make_policy("fifo"), SimVariantProvider(), clock=sim.clock)
    executor.add_client("job")
    return executor


@pytest.fixture
def table(executor):
    return EventTable(executor, "job")


def test_two_events_recorded_before_the_migration_time_each_other(executor, table):
    table.create(1, True, recorded_elsewhere=100.25)
    table.create(2, True, recorded_elsewhere=100.75)
    start, end = table.get(1), table.get(2)
    assert event_clock.carried(start) and event_clock.carried(end)
    assert event_clock.elapsed_across_servers_ms(executor, start, end) == 500.0


def test_a_device_with_its_own_event_clock_refuses_to_time_across_the_migration(executor, table):
    table.create(1, True, recorded_elsewhere=100.25)
    table.create(2, True)
    executor.submit("job", 0, EventRecord(table.get(2)))
    executor.event_synchronize(table.get(2))
    assert not event_clock.carried(table.get(2))
    with pytest.raises(DeviceError) as e:
        event_clock.elapsed_across_servers_ms(executor, table.get(1), table.get(2))
    assert e.value.code == CUDA_ERROR_INVALID_HANDLE and "clock of its own" in e.value.message


def test_a_carried_event_not_recorded_again_is_carried_on(table):
    table.create(1, True, recorded_elsewhere=42.5)
    table.create(2, False)
    table.create(3, True)                       # never recorded anywhere
    assert table.describe() == [[1, True, 42.5], [2, False, None], [3, True, None]]
