"""How a job attaches to tally-server (a mixin of TallyServer): the handshake of a
job starting under tally-run, and the attachment of one migrating here from
another server (tally/server/migration_import.py).

Admission runs under the server's admission lock from the plugins' verdict
(tally/scheduler/hooks.py) to the session's registration, so what they counted
(the high-priority jobs attached, say) is still true when the job attaches; a
server shutting down, or one whose device was lost, refuses with the reason.
A job is listed in the session table before it hears that it is in, so status
and operator commands know it from then on.
"""
from __future__ import annotations

import logging
import socket

from tally import _core, protocol
from tally.backends.device_attributes import as_tally_provides
from tally.cluster.high_priority_jobs import AttachedJob
from tally.protocol.framing import send_record
from tally.protocol.messages_generated import DeviceInfo, Hello, HelloReply
from tally.scheduler import BEST_EFFORT, HIGH
from tally.scheduler.hooks import AdmissionRequest
from tally.server.admission import Refused, admit, check_version, hello_version
from tally.server.lifecycle import JobState
from tally.server.segments import segment_prefix
from tally.server.session import Session
from tally.units import format_bytes

log = logging.getLogger("tally.server")

# The executor's name for each scheduling class.
SCHEDULING_CLASS = {protocol.Priority.HIGH: HIGH, protocol.Priority.BEST_EFFORT: BEST_EFFORT}


class JobAttachment:
    """Uses TallyServer's config, backend, description, executor, levers, hooks,
    memory_limits, device_faults, sessions and their locks."""

    def _refuse(self, conn: socket.socket, status: int, message: str, pid: int) -> None:
        try:
            send_record(conn, HelloReply.KIND, HelloReply(
                status=status, protocol_version=protocol.PROTOCOL_VERSION, message=message.encode()[:191]).encode())
        finally:
            conn.close()
        level = logging.ERROR if status == protocol.HandshakeStatus.SERVER_ERROR else logging.WARNING
        log.log(level, "refused pid %d: %s", pid, message)

    def _handshake(self, conn: socket.socket, payload: bytes) -> None:
        try:
            check_version(hello_version(payload))
        except Refused as e:
            pid = int.from_bytes(payload[4:8], "little") if len(payload) >= 8 else 0
            self._refuse(conn, e.status, e.message, pid)
            return
        hello = Hello.decode(payload)
        try:
            admission = admit(hello, self.description.total_memory, be_sm_percent=self.config.be_sm_percent)
        except Refused as e:
            self._refuse(conn, e.status, e.message, hello.pid)
            return
        priority, asked, program = admission.priority, admission.quota_bytes, admission.program
        high = priority == protocol.Priority.HIGH
        request = AdmissionRequest(pid=hello.pid, program=program, high_priority=high, memory_quota_bytes=asked,
                                   sm_percent=admission.sm_percent)
        # Held from the plugins' verdict to the session's registration, so what they
        # counted (the high-priority jobs attached) is still true when the job attaches.
        with self._admit_lock:
            if not self._admitting:
                self._refuse(conn, protocol.HandshakeStatus.SERVER_ERROR,
                             "tally-server is shutting down; start the job again once a server runs", hello.pid)
                return
            if self.device_faults is not None and self.device_faults.device_lost is not None:
                self._refuse(conn, protocol.HandshakeStatus.SERVER_ERROR, self.device_faults.device_lost, hello.pid)
                return
            verdict = self.hooks.admit_client(request)
            if not verdict.allowed:
                self._refuse(conn, protocol.HandshakeStatus.QUOTA_UNAVAILABLE, verdict.reason, hello.pid)
                return
            client_id = next(self._client_ids)
            name = f"{segment_prefix()}{client_id}"
            sizes = self.config.segment_sizes
            try:
                segment = _core.Segment.create(name, sizes.request, sizes.completion, sizes.upload, sizes.download,
                                               spin_us=self.config.session_spin_us(self.backend.traits, high))
            except (_core.TransportError, OSError) as e:
                self._refuse(conn, protocol.HandshakeStatus.SERVER_ERROR,
                             f"tally-server cannot create this job's shared memory ({e}); is /dev/shm full?",
                             hello.pid)
                return
            # The job's liveness is its end of this socket, not its pid (which may be in
            # another pid namespace: a container's).
            segment.watch_peer_socket(conn.fileno())
            memory = self.memory_limits.account(high, asked)
            session = Session(self, client_id, hello.pid, priority, program, segment, conn, memory)
            # Listed before the job hears that it is in, so status and operator commands know it then.
            with self._sessions_lock:
                self.sessions[client_id] = session
            self.executor.add_client(client_id, SCHEDULING_CLASS[priority], sm_percent=admission.sm_percent)
            granted_sms = self.executor.sm_share(client_id)[1]
            try:
                send_record(conn, HelloReply.KIND, HelloReply(
                    status=protocol.HandshakeStatus.OK, protocol_version=protocol.PROTOCOL_VERSION,
                    client_id=client_id, segment_name=name.encode()).encode())
                send_record(conn, DeviceInfo.KIND, self._device_info().encode())
            except OSError:
                self.executor.remove_client(client_id)
                with self._sessions_lock:
                    self.sessions.pop(client_id, None)
                segment.unlink()
                segment.close()
                raise
            conn.settimeout(None)
            self.levers.client_added(client_id, not high, admission.sm_percent)
            session.add_cleanup(lambda: self.retire_client(client_id))
            session.start()
            self._watch_connection(conn, session)
        quota = memory.quota_bytes
        log.info("client %d attached: pid %d, %s, priority %s, quota %s, SM share %s", client_id, hello.pid,
                 program, protocol.priority_name(priority), "none" if quota is None else format_bytes(quota)
                 + (" (the server's --be-memory-quota)" if asked is None else ""),
                 "whole device" if admission.sm_percent is None else
                 f"{admission.sm_percent:g}% ({granted_sms} SMs)")
        if admission.sm_percent_asked is not None and admission.sm_percent != admission.sm_percent_asked:
            log.info("client %d asked for %g%% of the SMs; best-effort jobs get at most %g%% on this server "
                     "(tally-server --be-sm-percent)", client_id, admission.sm_percent_asked, admission.sm_percent)
        self._wake_w.send(b"x")  # make the selector pick up the new registration promptly

    def attach_migrated(self, conn: socket.socket, segment, pid: int, priority: protocol.Priority, program: str,
                        memory, sm_percent: float | None, setup) -> Session:
        """A job migrating here from another server on this node (tally/server/migration_import.py):
        a session on the segment and socket it already has; `setup(session)` gives it the
        job's state before its thread starts."""
        high = priority == protocol.Priority.HIGH
        with self._admit_lock:
            if not self._admitting:
                raise OSError("tally-server is shutting down")
            client_id = next(self._client_ids)
            segment.watch_peer_socket(conn.fileno())
            session = Session(self, client_id, pid, priority, program, segment, conn, memory)
            with self._sessions_lock:
                self.sessions[client_id] = session
            self.executor.add_client(client_id, SCHEDULING_CLASS[priority], sm_percent=sm_percent)
            try:
                setup(session)
            except BaseException:
                self.executor.remove_client(client_id)
                with self._sessions_lock:
                    self.sessions.pop(client_id, None)
                raise
            conn.settimeout(None)
            self.levers.client_added(client_id, not high, sm_percent)
            session.add_cleanup(lambda: self.retire_client(client_id))
            session.start(arrived_by_migration=True)
            self._watch_connection(conn, session)
        log.info("client %d attached: pid %d, %s, priority %s, migrated from another server", client_id, pid,
                 program, protocol.priority_name(priority))
        self._wake_w.send(b"x")
        return session

    def _attached_high_priority(self) -> list[AttachedJob]:
        # A job a device fault failed, or an evicted one, holds nothing: its replacement may attach.
        return [AttachedJob(s.client_id, s.pid, s.program) for s in self.attached_sessions()
                if s.priority == protocol.Priority.HIGH and s.life.state not in (JobState.FAULTED, JobState.EVICTED)]

    def _device_info(self) -> DeviceInfo:
        d = self.description
        attrs = [0] * protocol.spec.ATTRIBUTE_SLOTS
        for attr, value in as_tally_provides(d.attributes).items():
            if 0 <= attr < len(attrs):
                attrs[attr] = int(value)
        return DeviceInfo(
            driver_version=d.driver_version, cc_major=d.compute_capability[0],
            cc_minor=d.compute_capability[1], sm_count=d.sm_count, pci_domain=d.pci_domain,
            pci_bus=d.pci_bus, pci_device=d.pci_device, total_memory=d.total_memory,
            name=d.name.encode()[:255], uuid=d.uuid, attributes=tuple(attrs))
