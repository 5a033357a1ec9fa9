//! std.Io `Batch` entries: wait for any of several operations, natively.
//!
//! A batch is waited for by readiness, as std.Io.Threaded does with `poll(2)`, but on the
//! loop: each call builds an epoll set of the submitted operations' descriptors (a pipe to
//! read, a pipe to write, a socket to receive from), and the task waits for that one epoll
//! descriptor to become readable, as a loop operation with the batch's deadline. That wait is
//! a cancelation point that cancels the kernel wait, and `error.Timeout` comes from the
//! executor's timer. The operations whose descriptor is ready are then performed (`operate`),
//! which does not wait, and move to the completed list. A descriptor epoll cannot watch (a
//! regular file) is always ready: its operation is performed at once.
//!
//! No task is spawned and nothing is left in flight when a call returns, so both awaits work
//! without concurrency, operations never sit on the `pending` list, and `batchCancel` has
//! nothing to stop. (Rejected: a fiber per operation, each waiting on the loop and reporting
//! to the awaiter. It needs an allocation per batch to find the fibers again at cancel time,
//! and canceling them is a round trip per operation; readiness needs neither.)
//!
//! The epoll set lives for one call (one `epoll_create1` and a `epoll_ctl` per descriptor):
//! keeping it in `batch.userdata` would leak it for callers that never call `cancel`, which
//! std does not require.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const Batch = Io.Batch;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const Executor = @import("../sched/Executor.zig");
const io_wait = @import("../sched/io_wait.zig");
const Op = @import("../loop/Completion.zig").Op;
const time = @import("time.zig");
const operate_mod = @import("operate.zig");
const complete = @import("../batch_list.zig").complete;

/// Ready descriptors taken from the epoll set per look; more are found at the next call.
const ready_max = 64;

const Index = Io.Operation.OptionalIndex;

/// Performs the submitted operations, without requiring concurrency. Returns once at least
/// one completed, or nothing is submitted. Cancelation point.
pub fn batchAwaitAsync(userdata: ?*anyopaque, b: *Batch) Io.Cancelable!void {
    awaitReady(userdata, b, null) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Timeout => unreachable, // no deadline
        // No epoll set (descriptors exhausted): perform the operations one after another.
        error.ConcurrencyUnavailable => return performInTurn(userdata, b),
    };
}

/// Waits until at least one submitted operation completed, or `timeout` passed
/// (`error.Timeout`, only if none completed). Cancelation point.
pub fn batchAwaitConcurrent(
    userdata: ?*anyopaque,
    b: *Batch,
    timeout: Io.Timeout,
) Batch.AwaitConcurrentError!void {
    return awaitReady(userdata, b, time.deadlineNs(timeout));
}

/// Nothing is ever left pending when an await returns (see the file doc), and `Batch.cancel`
/// has already returned the unstarted submissions to `unused`.
pub fn batchCancel(userdata: ?*anyopaque, b: *Batch) void {
    _ = userdata;
    assert(b.pending.head == .none);
    assert(b.userdata == null);
}

fn awaitReady(userdata: ?*anyopaque, b: *Batch, deadline_ns: ?u64) Batch.AwaitConcurrentError!void {
    if (b.submitted.head == .none) return;
    var set: ReadySet = try .init();
    defer set.deinit();
    try set.register(userdata, b);
    // Bounded by the deadline and by readiness: each round waits for the set, and a round
    // that completes nothing (a readiness another reader consumed) waits again.
    while (true) {
        if (b.completed.head == .none) try set.wait(deadline_ns);
        var events: [ready_max]linux.epoll_event = undefined;
        const ready = set.ready(&events);
        try performReady(userdata, b, ready);
        if (b.completed.head != .none or b.submitted.head == .none) return;
    }
}

/// The epoll set of one await.
const ReadySet = struct {
    epoll_fd: os.fd_t,

    fn init() Batch.AwaitConcurrentError!ReadySet {
        const rc = linux.epoll_create1(linux.EPOLL.CLOEXEC);
        return switch (os.errno(rc)) {
            .SUCCESS => .{ .epoll_fd = @intCast(rc) },
            .MFILE, .NFILE, .NOMEM => error.ConcurrencyUnavailable,
            else => |e| {
                os.unexpectedErrno(e) catch {};
                return error.ConcurrencyUnavailable;
            },
        };
    }

    fn deinit(set: *ReadySet) void {
        os.closeFd(set.epoll_fd);
    }

    /// Adds the descriptor of every submitted operation; performs at once those whose
    /// descriptor cannot be watched (always ready).
    fn register(set: *ReadySet, userdata: ?*anyopaque, b: *Batch) Batch.AwaitConcurrentError!void {
        var prev: Index = .none;
        var index = b.submitted.head;
        while (index != .none) {
            const submission = &b.storage[index.toIndex()].submission;
            const next = submission.node.next;
            const fd, _ = interest(submission.operation);
            if (try set.add(fd, interestOfFd(b, fd))) {
                prev = index;
            } else {
                const result = try operate_mod.operate(userdata, submission.operation);
                complete(b, prev, index, result);
            }
            index = next;
        }
    }

    /// Watches `fd` for `events`. False if epoll cannot watch it.
    fn add(set: *ReadySet, fd: os.fd_t, events: u32) Batch.AwaitConcurrentError!bool {
        var event: linux.epoll_event = .{ .events = events, .data = .{ .fd = fd } };
        switch (os.errno(linux.epoll_ctl(set.epoll_fd, linux.EPOLL.CTL_ADD, fd, &event))) {
            .SUCCESS => return true,
            .PERM => return false, // a regular file or a directory
            // A second operation on one descriptor: it was added for both (`interestOfFd`).
            .EXIST => return true,
            .NOMEM, .NOSPC => return error.ConcurrencyUnavailable,
            else => |e| {
                os.unexpectedErrno(e) catch {};
                return error.ConcurrencyUnavailable;
            },
        }
    }

    /// Parks until a descriptor of the set is ready or `deadline_ns` passes.
    fn wait(set: *ReadySet, deadline_ns: ?u64) Batch.AwaitConcurrentError!void {
        if (Executor.currentTask() == null) return set.waitThread(deadline_ns);
        const op: Op = .{ .poll = .{ .fd = set.epoll_fd, .events = linux.POLL.IN } };
        _ = io_wait.perform(op, deadline_ns) catch |err| return switch (err) {
            error.Canceled => error.Canceled,
            error.Timeout => error.Timeout,
            error.SystemResources => error.ConcurrencyUnavailable, // no memory for the timer
        };
    }

    /// On a thread weft does not run: block the thread in `epoll_wait`.
    fn waitThread(set: *ReadySet, deadline_ns: ?u64) Batch.AwaitConcurrentError!void {
        var event: [1]linux.epoll_event = undefined;
        while (true) {
            var timeout_ms: i32 = -1;
            if (deadline_ns) |deadline| {
                const now_ns = os.monotonicNs();
                if (now_ns >= deadline) return error.Timeout;
                const ms = std.math.divCeil(u64, deadline - now_ns, std.time.ns_per_ms) catch
                    unreachable; // the divisor is not zero
                timeout_ms = @intCast(@min(ms, std.math.maxInt(i32)));
            }
            const rc = linux.epoll_pwait(set.epoll_fd, &event, 1, timeout_ms, null);
            switch (os.errno(rc)) {
                .SUCCESS => if (rc > 0) return,
                .INTR => {},
                else => |e| {
                    os.unexpectedErrno(e) catch {};
                    return error.ConcurrencyUnavailable;
                },
            }
        }
    }

    /// The descriptors ready now (never waits).
    fn ready(set: *ReadySet, events: []linux.epoll_event) []const linux.epoll_event {
        while (true) {
            const rc = linux.epoll_wait(set.epoll_fd, events.ptr, @intCast(events.len), 0);
            switch (os.errno(rc)) {
                .SUCCESS => return events[0..rc],
                .INTR => continue,
                else => return events[0..0], // the set is ours and valid; nothing is ready
            }
        }
    }
};

/// The descriptor an operation waits on and the readiness it waits for.
fn interest(operation: Io.Operation) struct { os.fd_t, u32 } {
    return switch (operation) {
        .file_read_streaming => |o| .{ o.file.handle, linux.EPOLL.IN },
        .file_write_streaming => |o| .{ o.file.handle, linux.EPOLL.OUT },
        .device_io_control => |o| .{ o.file.handle, linux.EPOLL.IN | linux.EPOLL.OUT },
        .net_receive => |o| .{ o.socket_handle, linux.EPOLL.IN },
    };
}

/// What the submitted operations on `fd` wait for, together (a descriptor is added to an
/// epoll set once). Batches are small: a scan per descriptor is cheaper than a map.
fn interestOfFd(b: *const Batch, fd: os.fd_t) u32 {
    var events: u32 = 0;
    var index = b.submitted.head;
    while (index != .none) {
        const submission = &b.storage[index.toIndex()].submission;
        const op_fd, const op_events = interest(submission.operation);
        if (op_fd == fd) events |= op_events;
        index = submission.node.next;
    }
    assert(events != 0);
    return events;
}

/// Performs each submitted operation whose descriptor is in `ready` with the readiness it
/// waits for (an error or hang-up counts: the operation then reports it).
fn performReady(
    userdata: ?*anyopaque,
    b: *Batch,
    ready: []const linux.epoll_event,
) Io.Cancelable!void {
    var prev: Index = .none;
    var index = b.submitted.head;
    while (index != .none) {
        const submission = &b.storage[index.toIndex()].submission;
        const next = submission.node.next;
        const fd, const events = interest(submission.operation);
        const wanted = events | linux.EPOLL.ERR | linux.EPOLL.HUP;
        const is_ready = for (ready) |event| {
            if (event.data.fd == fd and event.events & wanted != 0) break true;
        } else false;
        if (is_ready) {
            const result = try operate_mod.operate(userdata, submission.operation);
            complete(b, prev, index, result);
        } else {
            prev = index;
        }
        index = next;
    }
}

/// Without an epoll set: performs every submitted operation in turn (each waits as long as
/// it must).
fn performInTurn(userdata: ?*anyopaque, b: *Batch) Io.Cancelable!void {
    while (b.submitted.head != .none) {
        const index = b.submitted.head;
        const operation = b.storage[index.toIndex()].submission.operation;
        const result = try operate_mod.operate(userdata, operation);
        complete(b, .none, index, result);
    }
}
