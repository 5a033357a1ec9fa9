//! One runtime's share of a `weft.Server`: its accept loop, its table of connections, the
//! reaper that enforces the timeouts of every phase, and the drain when the server stops.
//!
//! A worker lives on one runtime, whose connection tasks may run on several executor threads
//! (`Server.Options.runtime.executors`). The slot table is guarded by `lock` (a spin lock: each
//! section is a few stores or one `shutdown(2)`, never a switch); a connection's phase and
//! count of phase changes are atomics its own task writes and the reaper and the drain read.
//! A slot's stream is shut down only under the lock while the slot is in use, and closed only
//! after its phase turned `free` under the lock, so a cut never reaches a descriptor number
//! already reused.
//! `Server.stop` shuts the listener down (`shutdown(2)` wakes the pending accept with
//! `SocketNotListening`, as std's `AcceptError` documents). A forked worker, whose listener
//! other processes share, stops alone through an eventfd instead, and a worker on the
//! threaded runtime through a word whose waiter cancels its accept (`Stop`).
//!
//! Connection phases (`Connection.Phase`), owned by the connection's task:
//!
//!   free --accept--> idle --first byte--> head --head parsed--> busy --response--> idle ...
//!                                                               busy <--> body (a body read waits)
//!                                                   head, busy <--> send (a write waits)
//!
//! Each phase but `busy` has a timeout: `idle_timeout_ns` (the next request's first byte),
//! `header_timeout_ns` (first byte to complete head), `body_timeout_ns` (one wait for body
//! bytes) and `send_timeout_ns` (one wait for the client to take response bytes); a
//! `body`/`send` phase entered again after progress is a new phase, so those two bound the
//! time between two reads or writes, as nginx's `client_body_timeout` and `send_timeout` do.
//! `request_timeout_ns`, when set, bounds a whole request from its first byte to its last
//! response byte, whatever the phase (a trickling uploader makes progress, yet is cut).
//! The reaper cuts a connection past a timeout with `shutdown(SHUT_RDWR)`: the task's pending
//! read or write ends, the handler returns and the slot becomes `free`. It times a phase from
//! the first sweep that saw it (the change count tells a phase that lasted from a new one), so
//! a connection reads no clock per request, and no phase is cut before its timeout. Cutting
//! through the socket rather than canceling the task keeps one task per connection; the
//! alternative of a timer task per connection (or a `Select` racing `sleep` on every read)
//! doubles the tasks or allocates per request. A handler computing in `busy` is cut by no
//! phase timeout, only by the request timeout.
//!
//! Shutdown: accept ends → `draining`. For the grace period (`Limits.graceNs`) every
//! connection is still read and each request answered with `Connection: close` (decided
//! before its head is written, by the HTTP layer); a response already under way finishes as
//! it began, and its connection may answer one more. Then (`endGrace`) the connections still
//! idle get `shutdown(SHUT_RD)`: one with a request already in the socket reads and answers
//! it, the others end at once; `head`/`busy` ones finish their request and close instead of
//! reading another; after `drain_timeout_ns` the rest are cut and counted in
//! `Report.cut_at_drain`. Rejected: shutting idle connections at once (the grace of 0), which
//! loses the request a keep-alive client has on the wire at that moment: one per active
//! connection under load.
//!
//! A full worker (`connections_max` open) admits a new connection by closing its
//! longest-idle one (`WhenFull`, `admit`), timed by the reaper's sightings.
const Worker = @This();

const std = @import("std");
const Io = std.Io;
const net = Io.net;
const assert = std.debug.assert;
const config = @import("../config.zig");
const platform = @import("../platform.zig");
const SpinLock = @import("../os/SpinLock.zig");
const Metrics = @import("../Metrics.zig");
const State = @import("../std_io/State.zig");
const BufferPool = @import("BufferPool.zig");

io: Io,
listener: net.Server,
handler: Handler,
limits: Limits,
/// `limits.connections_max` entries; a slot's index is its place in `free_slots` when free.
slots: []Connection,
/// Stack of free slot indices; `free_count` of them are valid.
free_slots: []u32,
free_count: u32,
/// Highest slot index ever used, plus one: the reaper and the drain scan only below it.
slots_used: u32 = 0,
group: Io.Group = .init,
/// Guards `free_slots`, `free_count`, `slots_used` and the shutdown of a slot's stream.
lock: SpinLock = .{},
draining: std.atomic.Value(bool) = .init(false),
/// Set (under `lock`) once the drain's grace period is over: a connection that finds it set
/// as it turns idle ends instead of waiting for another request.
grace_over: std.atomic.Value(bool) = .init(false),
/// Set by the last connection to end while draining.
drained: Io.Event = .unset,
/// Whether the accept task waits for a slot that an idle connection closed to admit a new one
/// gives back (`admit`). Under `lock`.
admission_waiting: bool = false,
/// Set by `release` when `admission_waiting`.
slot_freed: Io.Event = .unset,
/// The buffers connections hold while a request is under way (`Connection.takeBuffer`),
/// trimmed by the reaper.
buffers: BufferPool = .{},
report: Report = .{},

/// What a handler is given for each accepted connection. The handler reads and writes
/// `stream` (the worker closes it afterwards) and reports its phase, so that timeouts and
/// the drain know which connections may be closed.
pub const Connection = struct {
    stream: net.Stream = undefined,
    worker: *Worker,
    /// Written by the connection's task (and by the worker as the slot is taken and freed).
    phase: std.atomic.Value(Phase) = .init(.free),
    /// Bumped with every phase change. One writer at a time (the task, or the worker while
    /// the slot is taken and freed), so a plain load and store, no locked instruction.
    changes: std.atomic.Value(u32) = .init(0),
    /// The reaper's, under `lock`: the phase it is timing. Null until its first sweep over
    /// this connection.
    watch: ?Watch = null,
    /// Bumped as each request's head begins (one writer: the task); the reaper times a
    /// request by it as it times a phase by `changes`.
    requests: std.atomic.Value(u32) = .init(0),
    /// The reaper's, under `lock`: the request it is timing (`request_timeout_ns`).
    request_watch: ?Watch = null,
    /// The task's own counts, added to the report when the slot is released. Written by the
    /// task alone (`countRequest`, `countRejected`), read by `figures` from any thread.
    counts: Counts = .{},

    pub const Counts = struct {
        /// Requests handed to the handler.
        requests: u64 = 0,
        /// Requests refused with an error status before or instead of the handler.
        rejected: u64 = 0,
    };

    /// Call as a request is handed to the handler.
    pub fn countRequest(connection: *Connection) void {
        assert(connection.phase.load(.monotonic) != .free);
        bump(&connection.counts.requests, 1);
    }

    /// Call as the server itself answers a request with an error status.
    pub fn countRejected(connection: *Connection) void {
        assert(connection.phase.load(.monotonic) != .free);
        bump(&connection.counts.rejected, 1);
    }

    const Watch = struct {
        /// `changes` when the reaper first saw this phase.
        changes: u32,
        /// When it first saw it: the phase began at or before. `cut_ns` once cut.
        since_ns: u64,

        /// A `since_ns` no timeout reaches: the phase was cut already.
        const cut_ns = std.math.maxInt(u64);
    };

    pub const Phase = enum(u8) { free, idle, head, busy, body, send };

    pub fn io(connection: *const Connection) Io {
        return connection.worker.io;
    }

    /// Call before waiting for the next request. Returns false when the server is stopping
    /// and the drain's grace period is over: the handler should then return (the worker
    /// closes the connection). While the server stops, a connection that turns idle within
    /// the grace period is still read: its last response may have promised more (its head
    /// went out before the stop), and a request the client sent on that promise is answered,
    /// with `Connection: close`, rather than lost.
    pub fn awaitRequest(connection: *Connection) bool {
        assert(connection.phase.load(.monotonic) != .free);
        connection.changes.store(connection.changes.load(.monotonic) +% 1, .monotonic);
        // Sequentially consistent, the store and the load, as `Worker.endGrace`'s store and
        // loads are: either this connection sees the grace over, or the drain sees it idle
        // and shuts its reading side. Release and acquire would let both miss, and an idle
        // connection would wait out the drain deadline. One locked store per request.
        connection.phase.store(.idle, .seq_cst);
        return !connection.worker.grace_over.load(.seq_cst);
    }

    fn enter(connection: *Connection, phase: Phase) void {
        // Stored before the phase (release): a reaper that sees the new phase (acquire) sees
        // this count or a newer one, so it never times the new phase from an old sighting.
        connection.changes.store(connection.changes.load(.monotonic) +% 1, .monotonic);
        connection.phase.store(phase, .release);
    }

    /// Call when a request's first bytes have arrived: its head must be complete within the
    /// header timeout, the whole request within the request timeout.
    pub fn receivingHead(connection: *Connection) void {
        const phase = connection.phase.load(.monotonic);
        assert(phase == .idle or phase == .busy);
        // Before the phase's release store, like `changes`.
        connection.requests.store(connection.requests.load(.monotonic) +% 1, .monotonic);
        connection.enter(.head);
    }

    /// Call when the request's head is read: no phase timeout cuts it while the handler
    /// works. Also ends a `waitingBody`.
    pub fn handling(connection: *Connection) void {
        assert(connection.phase.load(.monotonic) != .free);
        connection.enter(.busy);
    }

    /// Call before waiting for bytes of a request body, and `handling` once they came: the
    /// body timeout bounds each such wait.
    pub fn waitingBody(connection: *Connection) void {
        assert(connection.phase.load(.monotonic) == .busy);
        connection.enter(.body);
    }

    /// Call before reading what a rejected client still sends, ahead of the close: the
    /// header timeout bounds it.
    pub fn lingering(connection: *Connection) void {
        assert(connection.phase.load(.monotonic) != .free);
        connection.enter(.head);
    }

    /// Call before a write that may wait for the client to take bytes; returns the phase to
    /// give back to `sent` after it. The send timeout bounds each such wait.
    pub fn sending(connection: *Connection) Phase {
        const phase = connection.phase.load(.monotonic);
        assert(phase == .head or phase == .busy);
        connection.enter(.send);
        return phase;
    }

    pub fn sent(connection: *Connection, previous: Phase) void {
        assert(connection.phase.load(.monotonic) == .send);
        assert(previous == .head or previous == .busy);
        connection.enter(previous);
    }

    /// Whether the server is stopping (the response should be the connection's last).
    pub fn stopping(connection: *const Connection) bool {
        return connection.worker.draining.load(.acquire);
    }

    pub const Buffer = BufferPool.Buffer;
    pub const buffer_bytes = BufferPool.buffer_bytes;

    /// A buffer of `buffer_bytes` (`config.server_buffer_bytes`) from the worker's pool, for
    /// the time a request is under way; contents undefined. Give it back with `giveBuffer`
    /// before waiting for the next request, so that an idle connection holds no buffer (the
    /// HTTP helper does: an idle keep-alive connection is then its task's top stack pages).
    /// `error.SystemResources`: none free and the kernel refused to map one.
    pub fn takeBuffer(connection: *Connection) BufferPool.TakeError!Buffer {
        assert(connection.phase.load(.monotonic) != .free);
        return connection.worker.buffers.take();
    }

    pub fn giveBuffer(connection: *Connection, buffer: Buffer) void {
        connection.worker.buffers.give(buffer);
    }
};

/// Serves one connection. It returns when it is done with the connection; errors are its
/// own to handle (answer, log, or just return), only cancelation propagates.
pub const Handler = struct {
    context: ?*anyopaque = null,
    serveFn: *const fn (context: ?*anyopaque, connection: *Connection) Io.Cancelable!void,
};

pub const Limits = struct {
    connections_max: u32,
    /// What a worker with `connections_max` open does with the next connection.
    when_full: WhenFull,
    idle_timeout_ns: u64,
    header_timeout_ns: u64,
    body_timeout_ns: u64,
    send_timeout_ns: u64,
    /// Null: no bound on a request as a whole.
    request_timeout_ns: ?u64,
    drain_timeout_ns: u64,
    /// How long a stop keeps reading idle keep-alive connections; at most half the drain
    /// timeout is used (`graceNs`).
    drain_idle_grace_ns: u64,

    /// The grace period a drain gives idle connections: `drain_idle_grace_ns`, but at most
    /// half of `drain_timeout_ns`, so that a request that arrives at its end has the other
    /// half to be answered before the drain deadline cuts it.
    pub fn graceNs(limits: Limits) u64 {
        return @min(limits.drain_idle_grace_ns, limits.drain_timeout_ns / 2);
    }
};

/// What a worker does with a connection accepted while `connections_max` are open.
pub const WhenFull = enum {
    /// Closes its longest-idle keep-alive connection (the reading side: a request already
    /// there is still answered) and serves the new one in its slot; refuses the new one as
    /// `refuse` does when none is idle or no slot comes back within
    /// `config.server_admission_wait_ns_max`. Counted in `Report.closed_idle_for_admission`.
    /// nginx does the same when it runs out of connections.
    close_idle,
    /// Closes the new connection at once (`Report.rejected_full`): idle clients hold their
    /// slots until the idle timeout, and new ones are locked out meanwhile.
    refuse,
};

/// What one worker (or, summed with `add`, one server) saw: the counts `weft.Metrics` also
/// reports, defined there (`Metrics.ServerCounts`) because Metrics.zig may not import server/.
/// Each count has one writer at a time (the accept task, or a task under `lock`), which adds
/// with `bump`, so that `figures` may read them from another thread while the worker runs.
pub const Report = Metrics.ServerCounts;

pub fn init(
    worker: *Worker,
    gpa: std.mem.Allocator,
    io: Io,
    listener: net.Socket,
    handler: Handler,
    limits: Limits,
) error{OutOfMemory}!void {
    assert(limits.connections_max > 0);
    const slots = try gpa.alloc(Connection, limits.connections_max);
    errdefer gpa.free(slots);
    const free_slots = try gpa.alloc(u32, limits.connections_max);
    for (slots) |*slot| slot.* = .{ .worker = worker };
    // Lowest index on top, so that a lightly loaded worker scans few slots.
    for (free_slots, 0..) |*entry, i| entry.* = @intCast(limits.connections_max - 1 - i);
    // Windows' accept names what it accepts (a TCP stream here); elsewhere nothing.
    const accept_options: net.Server.AcceptOptions =
        if (net.Server.AcceptOptions == void) {} else .{ .mode = .stream, .protocol = .tcp };
    worker.* = .{
        .io = io,
        .listener = .{ .socket = listener, .options = accept_options },
        .handler = handler,
        .limits = limits,
        .slots = slots,
        .free_slots = free_slots,
        .free_count = limits.connections_max,
    };
}

pub fn deinit(worker: *Worker, gpa: std.mem.Allocator) void {
    assert(worker.free_count == worker.limits.connections_max); // every connection ended
    const kept = worker.buffers.deinit();
    if (kept > 0) {
        // A handler's bug, not the worker's: its buffers stay mapped, nothing else is lost.
        std.log.scoped(.weft_server).warn(
            "handlers returned without giving back {d} connection buffers (takeBuffer)",
            .{kept},
        );
    }
    gpa.free(worker.slots);
    gpa.free(worker.free_slots);
    worker.* = undefined;
}

/// Why a worker cannot start.
pub const StartError = error{
    /// `io.concurrent` could not start one of the worker's own tasks (the reaper, and for a
    /// forked worker the one reading its stop eventfd), so it could start no connection's
    /// task either: no fiber stack could be mapped (the address space or memory is short; a
    /// weft runtime logs which), or `tasks_max` tasks live. std.Io's name for it.
    ConcurrencyUnavailable,
};

pub const RunError = StartError || Io.Cancelable;

/// How a worker learns that its server stops accepting.
pub const Stop = union(enum) {
    /// The listener is shut down (`shutdown(2)`: Linux wakes the pending accept with
    /// `SocketNotListening`): `Server.stop` on the fiber runtime, or the caller of `serve`.
    listener_shutdown,
    /// This eventfd is signalled: a forked worker, whose listener other processes share, and
    /// `shutdown(2)` acts on the socket, not on one process's descriptor, so it would stop them
    /// all. An eventfd because a signal handler may write one (async-signal-safe) and a task
    /// can wait on it like any read; rejected: a `signalfd`, whose blocked signal mask every
    /// process a handler spawns would inherit through `exec`.
    eventfd: std.posix.fd_t,
    /// This word turns nonzero, and its setter wakes it (a futex wake): `Server.stop` on the
    /// threaded runtime. Its accept is std.Io.Threaded's blocking one, which a shutdown does
    /// not wake off Linux (a BSD listener refuses `shutdown(2)`); the cancel of its task does,
    /// on every OS (std.Io's contract for a cancelation point).
    word: *const std.atomic.Value(u32),
};

/// Accepts and serves until `stop` says so, then drains. Returns this worker's report. Runs
/// on the runtime's main task. What `stop` names is the caller's; it stays valid.
///
/// Fails with a `StartError` before its first accept when its own tasks cannot start: a
/// worker that could start no connection's task would otherwise accept every connection
/// only to close it (`Report.rejected_no_task`), looking alive while serving nothing.
pub fn run(worker: *Worker, stop: Stop) RunError!Report {
    const io = worker.io;
    // A task like a connection's: when it cannot start, neither could they.
    var reaper = try io.concurrent(reap, .{worker});
    defer reaper.cancel(io) catch {};
    // `weft.Metrics` of the runtime reports this worker while it runs (after the drain, too).
    const state = if (platform.fibers) State.of(io) else null;
    if (state) |s| s.attachServer(.{ .context = worker, .readFn = readFigures });
    defer if (state) |s| s.detachServer();
    // Canceled or not, the connections are drained before the worker's memory goes.
    const accepted = switch (stop) {
        .listener_shutdown => worker.acceptLoop(),
        .eventfd, .word => worker.acceptUntilSignalled(stop),
    };
    worker.drain();
    assert(worker.free_count == worker.limits.connections_max);
    try accepted;
    return worker.report;
}

/// `acceptLoop` until `stop` (an eventfd or a word, `Stop`) is signalled, or the listener is
/// shut down. The accept loop and a task waiting for the signal run side by side; whichever
/// ends first cancels the other (a canceled accept returns `error.Canceled` on every
/// runtime; one it completed despite the cancel still hands its connection to
/// `startConnection`).
///
/// A task that cannot start fails it with `error.ConcurrencyUnavailable`, before any accept.
/// Rejected: accepting on the calling task with the signal unwatched, a worker that only its
/// supervisor's SIGKILL, after the drain deadline, would stop.
fn acceptUntilSignalled(worker: *Worker, stop: Stop) RunError!void {
    const io = worker.io;
    const Ended = union(enum) { accept: Io.Cancelable!void, signalled: Io.Cancelable!void };
    var buffer: [2]Ended = undefined;
    var select: Io.Select(Ended) = .init(io, &buffer);
    try select.concurrent(.signalled, awaitSignalled, .{ io, stop });
    select.concurrent(.accept, acceptLoop, .{worker}) catch |err| {
        select.cancelDiscard();
        return err;
    };
    const first = select.await() catch |err| {
        select.cancelDiscard();
        return err;
    };
    // Waits for the other task to end: no accept runs once the drain begins.
    select.cancelDiscard();
    return switch (first) {
        .accept => |result| result,
        .signalled => |result| result,
    };
}

/// Returns once `stop` is signalled. Cancelation point.
fn awaitSignalled(io: Io, stop: Stop) Io.Cancelable!void {
    switch (stop) {
        .listener_shutdown => unreachable, // `acceptLoop` alone sees it
        .eventfd => |fd| return awaitEventFd(io, fd),
        .word => |word| while (word.load(.acquire) == 0) try io.futexWait(u32, &word.raw, 0),
    }
}

/// Returns once `stop_fd` (an eventfd, blocking: io_uring completes a read of a non-blocking
/// one with `EAGAIN` instead of waiting) is signalled. Cancelation point.
fn awaitEventFd(io: Io, stop_fd: std.posix.fd_t) Io.Cancelable!void {
    const file: Io.File = .{ .handle = stop_fd, .flags = .{ .nonblocking = false } };
    var counter: [@sizeOf(u64)]u8 = undefined;
    _ = file.readStreaming(io, &.{&counter}) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        // An eventfd read fails only when misused (a short buffer, a closed fd): stop rather
        // than serve on with no way to stop this worker alone.
        else => |e| std.log.scoped(.weft_server).err("stop eventfd: {t}; stopping", .{e}),
    };
}

fn acceptLoop(worker: *Worker) Io.Cancelable!void {
    const io = worker.io;
    var backoff_ns: u64 = config.server_accept_backoff_ns_min;
    while (true) {
        const stream = worker.listener.accept(io) catch |err| switch (err) {
            error.SocketNotListening => return, // Server.stop shut the listener down
            error.Canceled => return error.Canceled,
            error.ConnectionAborted => continue, // the peer left before we took it
            error.ProcessFdQuotaExceeded,
            error.SystemFdQuotaExceeded,
            error.SystemResources,
            => {
                // The connection stays queued in the kernel; wait for fds to come back
                // rather than spin on an accept that fails at once.
                bump(&worker.report.accept_backoffs, 1);
                try io.sleep(.fromNanoseconds(backoff_ns), .awake);
                backoff_ns = @min(backoff_ns * 2, config.server_accept_backoff_ns_max);
                continue;
            },
            else => |e| {
                bump(&worker.report.accept_errors, 1);
                std.log.scoped(.weft_server).warn("accept: {t}; retrying", .{e});
                try io.sleep(.fromNanoseconds(backoff_ns), .awake);
                backoff_ns = @min(backoff_ns * 2, config.server_accept_backoff_ns_max);
                continue;
            },
        };
        backoff_ns = config.server_accept_backoff_ns_min;
        bump(&worker.report.accepted, 1);
        try worker.startConnection(stream);
    }
}

fn startConnection(worker: *Worker, stream: net.Stream) Io.Cancelable!void {
    const io = worker.io;
    worker.lock.lock();
    if (worker.free_count == 0) {
        const admitted = switch (worker.limits.when_full) {
            // Unlocks while it waits; returns locked, but unlocked when canceled.
            .close_idle => worker.admit() catch |err| {
                stream.close(io);
                return err;
            },
            .refuse => false,
        };
        if (!admitted) {
            worker.lock.unlock();
            bump(&worker.report.rejected_full, 1);
            stream.close(io);
            return;
        }
    }
    assert(worker.free_count > 0);
    worker.free_count -= 1;
    const index = worker.free_slots[worker.free_count];
    const connection = &worker.slots[index];
    assert(connection.phase.load(.monotonic) == .free);
    connection.* = .{ .worker = worker, .stream = stream, .phase = .init(.busy) };
    worker.slots_used = @max(worker.slots_used, index + 1);
    worker.lock.unlock();
    worker.group.concurrent(io, serveConnection, .{ worker, index }) catch {
        bump(&worker.report.rejected_no_task, 1);
        worker.release(index);
    };
}

/// Frees a slot for a new connection by closing the longest-idle one: shuts its reading side
/// (its task sees the end of stream, or first answers a request already there) and waits, for
/// at most `config.server_admission_wait_ns_max`, for its task to give the slot back. Returns
/// whether a slot is free. Caller holds `lock` with every slot in use; `lock` is held again
/// on return. Only the accept task calls it, so one wait at a time.
fn admit(worker: *Worker) Io.Cancelable!bool {
    assert(worker.free_count == 0);
    assert(!worker.admission_waiting);
    const victim = worker.longestIdle() orelse return false;
    // Not chosen again, and not cut by the reaper meanwhile.
    markPhaseCut(victim);
    victim.stream.shutdown(worker.io, .recv) catch {}; // already closed by the peer
    bump(&worker.report.closed_idle_for_admission, 1);
    worker.admission_waiting = true;
    // No waiter yet, and `release` sets it only under `lock` after seeing `admission_waiting`.
    worker.slot_freed.reset();
    worker.lock.unlock();
    const waited = worker.slot_freed.waitTimeout(worker.io, .{ .duration = .{
        .raw = .fromNanoseconds(config.server_admission_wait_ns_max),
        .clock = .awake,
    } });
    worker.lock.lock();
    worker.admission_waiting = false;
    waited catch |err| switch (err) {
        error.Timeout => {},
        error.Canceled => {
            worker.lock.unlock();
            return error.Canceled;
        },
    };
    return worker.free_count > 0;
}

/// The idle connection the reaper has seen idle the longest (one it has not seen yet is the
/// newest idle), or null when none is idle. Caller holds `lock`. A scan of the slots in use:
/// it runs only when the worker is full, and nothing on a request's path pays for an order.
fn longestIdle(worker: *Worker) ?*Connection {
    var oldest: ?*Connection = null;
    var oldest_since_ns: u64 = std.math.maxInt(u64);
    for (worker.slots[0..worker.slots_used]) |*connection| {
        if (connection.phase.load(.acquire) != .idle) continue;
        const changes = connection.changes.load(.monotonic);
        const since_ns = if (connection.watch) |watch| since: {
            if (watch.since_ns == Connection.Watch.cut_ns) continue; // on its way out
            break :since if (watch.changes == changes) watch.since_ns else idle_since_unseen_ns;
        } else idle_since_unseen_ns;
        if (oldest == null or since_ns < oldest_since_ns) {
            oldest = connection;
            oldest_since_ns = since_ns;
        }
    }
    return oldest;
}

/// The `since_ns` of an idle connection the reaper has not timed yet: idle for less than a
/// sweep, so the newest.
const idle_since_unseen_ns = std.math.maxInt(u64) - 1;

fn serveConnection(worker: *Worker, index: u32) Io.Cancelable!void {
    defer worker.release(index);
    const connection = &worker.slots[index];
    assert(connection.phase.load(.monotonic) != .free);
    try worker.handler.serveFn(worker.handler.context, connection);
}

/// Closes a connection's stream and returns its slot.
fn release(worker: *Worker, index: u32) void {
    const connection = &worker.slots[index];
    // Free first, under the lock: from here no cut touches the stream, so closing it (and
    // the kernel reusing its number) cannot race a `shutdown`.
    worker.lock.lock();
    assert(connection.phase.load(.monotonic) != .free);
    connection.enter(.free);
    // With the slot freed, under the lock: a snapshot counts these requests either here or
    // in the slot, never both (`figures`).
    bump(&worker.report.requests, connection.counts.requests);
    bump(&worker.report.requests_rejected, connection.counts.rejected);
    worker.lock.unlock();
    connection.stream.close(worker.io);
    worker.lock.lock();
    assert(worker.free_count < worker.limits.connections_max);
    worker.free_slots[worker.free_count] = index;
    worker.free_count += 1;
    const all_free = worker.free_count == worker.limits.connections_max;
    if (worker.admission_waiting) worker.slot_freed.set(worker.io);
    worker.lock.unlock();
    if (all_free and worker.draining.load(.acquire)) worker.drained.set(worker.io);
}

/// Adds `amount` to a count with one writer at a time, with a relaxed load and store (no
/// locked instruction) that a reader on another thread never sees torn.
fn bump(count: *u64, amount: u64) void {
    @atomicStore(u64, count, @atomicLoad(u64, count, .monotonic) +% amount, .monotonic);
}

/// What `weft.Metrics` reports of this worker, read under `lock`: the report so far, and the
/// open connections with the requests they have served, so that every request is counted as
/// soon as its head was read, not when its connection ends.
pub fn figures(worker: *Worker) Metrics.Server {
    worker.lock.lock();
    defer worker.lock.unlock();
    var result: Metrics.Server = .{
        .connections_max = worker.limits.connections_max,
        .buffers_held = worker.buffers.heldCount(),
        .buffers_mapped = worker.buffers.mappedCount(),
    };
    inline for (@typeInfo(Report).@"struct".fields) |field| {
        const count = &@field(worker.report, field.name);
        @field(result, field.name) = @atomicLoad(u64, count, .monotonic);
    }
    for (worker.slots[0..worker.slots_used]) |*connection| {
        if (connection.phase.load(.acquire) == .free) continue;
        result.connections_open += 1;
        result.requests += @atomicLoad(u64, &connection.counts.requests, .monotonic);
        result.requests_rejected += @atomicLoad(u64, &connection.counts.rejected, .monotonic);
    }
    assert(result.connections_open <= result.connections_max);
    return result;
}

fn readFigures(context: *anyopaque) Metrics.Server {
    const worker: *Worker = @ptrCast(@alignCast(context));
    return worker.figures();
}

/// Whether every slot is free (a snapshot).
fn allFree(worker: *Worker) bool {
    worker.lock.lock();
    defer worker.lock.unlock();
    return worker.free_count == worker.limits.connections_max;
}

/// Ends a connection's pending and future reads and writes; its task then returns. Caller
/// holds `lock`, and the connection is in use.
fn cut(worker: *Worker, connection: *Connection) void {
    assert(connection.phase.load(.monotonic) != .free);
    connection.stream.shutdown(worker.io, .both) catch {}; // already closed by the peer
    // Not cut (nor counted) again in this phase or request.
    markPhaseCut(connection);
    connection.request_watch = .{
        .changes = connection.requests.load(.monotonic),
        .since_ns = Connection.Watch.cut_ns,
    };
}

/// Marks `connection`'s current phase as cut: the reaper times it no more, and `longestIdle`
/// passes it over. Caller holds `lock`.
fn markPhaseCut(connection: *Connection) void {
    connection.watch = .{
        .changes = connection.changes.load(.monotonic),
        .since_ns = Connection.Watch.cut_ns,
    };
}

/// Period of the reaper: an eighth of the shortest timeout, within [10 ms, 1 s]. A phase is
/// first seen within a period of its start and cut within a period of its timeout from
/// there, so at most two periods late: 25 % of the timeout (or 20 ms).
fn reapPeriodNs(limits: Limits) u64 {
    var shortest = @min(limits.idle_timeout_ns, limits.header_timeout_ns);
    shortest = @min(shortest, limits.body_timeout_ns, limits.send_timeout_ns);
    if (limits.request_timeout_ns) |timeout_ns| shortest = @min(shortest, timeout_ns);
    return std.math.clamp(shortest / 8, 10 * std.time.ns_per_ms, std.time.ns_per_s);
}

fn reap(worker: *Worker) Io.Cancelable!void {
    const period_ns = reapPeriodNs(worker.limits);
    while (true) {
        try worker.io.sleep(.fromNanoseconds(period_ns), .awake);
        const now_ns = awakeNs(worker.io);
        {
            worker.lock.lock();
            defer worker.lock.unlock();
            for (worker.slots[0..worker.slots_used]) |*connection| {
                worker.sweep(connection, now_ns);
            }
        }
        _ = worker.buffers.trim(config.server_buffers_hot);
    }
}

/// The worker's `io`'s monotonic clock: the time its sleeps and timeouts run on (a weft.Sim's
/// is virtual).
fn awakeNs(io: Io) u64 {
    return @intCast(@max(0, Io.Clock.awake.now(io).nanoseconds));
}

/// Cuts `connection` if its phase or its request outlasted its timeout. Caller holds `lock`.
fn sweep(worker: *Worker, connection: *Connection, now_ns: u64) void {
    const limits = worker.limits;
    const phase = connection.phase.load(.acquire);
    const phase_timeout_ns: ?u64 = switch (phase) {
        .free => return,
        .idle => limits.idle_timeout_ns,
        .head => limits.header_timeout_ns,
        .body => limits.body_timeout_ns,
        .send => limits.send_timeout_ns,
        .busy => null, // the handler's: only the request timeout applies
    };
    const changes = connection.changes.load(.monotonic);
    if (expired(&connection.watch, changes, now_ns, phase_timeout_ns)) {
        switch (phase) {
            .idle => bump(&worker.report.cut_idle_timeout, 1),
            .head => bump(&worker.report.cut_header_timeout, 1),
            .body => bump(&worker.report.cut_body_timeout, 1),
            .send => bump(&worker.report.cut_send_timeout, 1),
            .free, .busy => unreachable, // no phase timeout
        }
        worker.cut(connection);
        return;
    }
    // A request runs from its head's first byte until the connection is idle again.
    const request_timeout_ns = if (phase == .idle) null else limits.request_timeout_ns;
    const requests = connection.requests.load(.monotonic);
    if (expired(&connection.request_watch, requests, now_ns, request_timeout_ns)) {
        bump(&worker.report.cut_request_timeout, 1);
        worker.cut(connection);
    }
}

/// Whether what `watch` times (identified by `count`) has lasted `timeout_ns` since the first
/// sweep that saw it; a new `count` starts timing anew. Never true twice for one cut.
fn expired(watch: *?Connection.Watch, count: u32, now_ns: u64, timeout_ns: ?u64) bool {
    if (watch.* == null or watch.*.?.changes != count) {
        watch.* = .{ .changes = count, .since_ns = now_ns };
        return false;
    }
    const since_ns = watch.*.?.since_ns;
    if (since_ns == Connection.Watch.cut_ns) return false;
    return now_ns -| since_ns >= (timeout_ns orelse return false);
}

/// Stops a worker whose accepting has ended: for the grace period (`Limits.graceNs`) every
/// connection is still served, each request answered with `Connection: close`; then idle
/// connections have their reading side shut (`endGrace`); the rest finish within the drain
/// timeout, and what remains at its deadline is cut.
fn drain(worker: *Worker) void {
    const io = worker.io;
    assert(!worker.draining.load(.monotonic));
    assert(!worker.grace_over.load(.monotonic));
    worker.draining.store(true, .release);
    const start_ns = awakeNs(io);
    const deadline_ns = start_ns + worker.limits.drain_timeout_ns;
    const grace_end_ns = start_ns + worker.limits.graceNs();
    assert(grace_end_ns <= deadline_ns);
    const canceled = worker.awaitAllFree(grace_end_ns);
    worker.endGrace();
    if (!canceled) _ = worker.awaitAllFree(deadline_ns);
    worker.lock.lock();
    for (worker.slots[0..worker.slots_used]) |*connection| {
        if (connection.phase.load(.acquire) == .free) continue;
        bump(&worker.report.cut_at_drain, 1);
        worker.cut(connection);
    }
    worker.lock.unlock();
    // Cut connections end at their next read or write; cancel covers a handler that waits
    // on something else.
    worker.group.cancel(io);
    assert(worker.free_count == worker.limits.connections_max);
}

/// Waits until every slot is free or `deadline_ns` passed; returns true if canceled (the
/// drain then cuts at once).
fn awaitAllFree(worker: *Worker, deadline_ns: u64) bool {
    const io = worker.io;
    // Bounded: each pass either returns or sleeps until the deadline (a spurious wake-up
    // recomputes what is left).
    while (!worker.allFree()) {
        const now_ns = awakeNs(io);
        if (now_ns >= deadline_ns) return false;
        worker.drained.waitTimeout(io, .{ .duration = .{
            .raw = .fromNanoseconds(deadline_ns - now_ns),
            .clock = .awake,
        } }) catch |err| switch (err) {
            error.Timeout => {},
            error.Canceled => return true,
        };
    }
    return false;
}

/// Ends the grace period: from here a connection turning idle ends (`awaitRequest`), and one
/// idle now has its reading side shut, so that it sees the end of stream at once, or first
/// reads and answers a request already in the socket. A request a client sends after this is
/// not read: the client sees the connection close without an answer.
fn endGrace(worker: *Worker) void {
    worker.lock.lock();
    defer worker.lock.unlock();
    // Sequentially consistent with the phase loads below, as `awaitRequest`'s store and load:
    // a connection turning idle now sees the grace over, or is seen idle here.
    worker.grace_over.store(true, .seq_cst);
    for (worker.slots[0..worker.slots_used]) |*connection| {
        if (connection.phase.load(.seq_cst) != .idle) continue;
        bump(&worker.report.closed_idle_at_drain, 1);
        connection.stream.shutdown(worker.io, .recv) catch {}; // already closed by the peer
    }
}
