//! The epoll backend: readiness, then the syscall. Used where io_uring is missing or
//! forbidden (seccomp, old kernels), or when forced with `WEFT_BACKEND=epoll`.
//!
//! ## One registration per descriptor
//!
//! epoll keys its interest set by descriptor, so a reader and a writer waiting on one socket
//! share its one registration. A table (`Watches.zig`) gives each descriptor the completions
//! waiting on it, and the registration is `EPOLLONESHOT`, armed (`EPOLL_CTL_MOD`) for the
//! union of their interests whenever one starts to wait and after an event that leaves some
//! waiting. An event wakes the waiters whose interest it names (all of them on an error or a
//! hang-up); each runs its syscall, and one that finds it not ready after all waits on. A
//! canceled waiter leaves the others registered. So a connection costs its socket and nothing
//! else, as on io_uring, and all that weft's bookkeeping takes from `accept` are each loop's
//! two descriptors (its epoll set and its wake-up eventfd). Rejected: a `dup` registered per
//! waiting operation (weft before issue 33: two descriptors per idle connection, half of
//! io_uring's connections under one RLIMIT_NOFILE, and near the limit the dups took the
//! descriptors `accept` needed), and edge-triggered registration once per descriptor (no
//! `epoll_ctl` per wait, but every segment and acknowledgement wakes the loop, and a pipe's
//! read, which does not try its syscall first, would need each edge remembered).
//!
//! ## Descriptors closed under a registration
//!
//! Linux drops a registration when the last descriptor of its file closes, and a number closed
//! comes back naming another file. So each registration carries a generation in its events,
//! and the table holds the current one of each descriptor:
//! - a close through weft's std.Io calls `forget` first: this loop's waiters on the descriptor
//!   end with `-ECANCELED` and its registration is forgotten, so that an event from it (its
//!   file still open in another descriptor or process) is stale, and the number, reused, is
//!   registered afresh;
//! - a close weft did not see (C code; weft's on another executor) shows at the next arming:
//!   `EPOLL_CTL_MOD` fails with `ENOENT`, the waiters from before end with `-ECANCELED`, and
//!   the descriptor is registered afresh under a new generation.
//! A waiter therefore runs its syscall only on the file it waited on, but in one case nothing
//! keyed by descriptor can see: its number closed unseen, given to another file, and the old
//! file, still open elsewhere, turns ready first. The cost of the stale entries is nil: a
//! forgotten registration of a file still open elsewhere fires at most once (one-shot).
//!
//! A descriptor epoll cannot watch (a regular file: EPERM) is always ready: a read or write of
//! it is handed back (`Completion.result_unpollable`) to run where blocking is allowed.
const EpollBackend = @This();

const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const config = @import("../../config.zig");
const os = @import("../../os/linux.zig");
const Completion = @import("../Completion.zig");
const nonblocking = @import("../nonblocking.zig");
const Watches = @import("Watches.zig");
const Watch = Watches.Watch;

epoll_fd: os.fd_t,
wake_fd: os.fd_t,
/// The descriptors this loop watches: their waiters and registrations.
watches: Watches = .{},
/// The generation of the newest registration (see "Descriptors closed under a registration");
/// never 0 once used, which means "none" in `Watch.generation`, and the wake-up's event data.
generation_last: u32 = 0,
/// Operations that finished without waiting, reported at the next poll.
ready: Completion.Queue = .{},
/// Reads and writes a rescuer found ready but could not run without risking to block its
/// thread (`performReady`): the loop's thread runs them at its next poll.
owner_ready: Completion.Queue = .{},
events: [config.reap_batch_max]linux.epoll_event = undefined,

pub const InitError = error{ SystemResources, ProcessFdQuotaExceeded, SystemFdQuotaExceeded } ||
    os.UnexpectedError;

pub fn init(backend: *EpollBackend) InitError!void {
    const rc = linux.epoll_create1(linux.EPOLL.CLOEXEC);
    const epoll_fd: os.fd_t = switch (os.errno(rc)) {
        .SUCCESS => @intCast(rc),
        .MFILE => return error.ProcessFdQuotaExceeded,
        .NFILE => return error.SystemFdQuotaExceeded,
        .NOMEM => return error.SystemResources,
        else => |e| return os.unexpectedErrno(e),
    };
    errdefer os.closeFd(epoll_fd);
    const wake_fd = try os.eventFd();
    errdefer os.closeFd(wake_fd);
    // Data 0: no registration of a descriptor has it (their generation is never 0).
    var event: linux.epoll_event = .{ .events = linux.EPOLL.IN, .data = .{ .u64 = 0 } };
    switch (os.errno(linux.epoll_ctl(epoll_fd, linux.EPOLL.CTL_ADD, wake_fd, &event))) {
        .SUCCESS => {},
        .NOMEM, .NOSPC => return error.SystemResources,
        else => |e| return os.unexpectedErrno(e),
    }
    backend.* = .{ .epoll_fd = epoll_fd, .wake_fd = wake_fd };
}

pub fn deinit(backend: *EpollBackend) void {
    assert(backend.owner_ready.isEmpty());
    assert(backend.ready.isEmpty());
    backend.watches.deinit(); // asserts that no completion waits
    os.closeFd(backend.epoll_fd);
    os.closeFd(backend.wake_fd);
    backend.* = undefined;
}

const interest = nonblocking.interest;
const eagain = failure(.AGAIN);

/// An errno as a completion's result.
fn failure(e: linux.E) i32 {
    return -@as(i32, @intFromEnum(e));
}

/// Only readiness operations: epoll has no asynchronous form of a file system or process
/// call (weft runs those on its blocking lane).
pub fn supports(backend: *const EpollBackend, tag: Completion.Op.Tag) bool {
    _ = backend;
    return Completion.Op.isReadiness(tag);
}

/// Socket operations try their syscall first: most find their socket ready (bytes waiting,
/// buffer space, a pending connection), and an `EAGAIN` costs less than an epoll round trip.
/// The others, and those that found it not ready, wait in their descriptor's watch.
pub fn submit(backend: *EpollBackend, completion: *Completion) void {
    assert(completion.epoll_fd == -1);
    assert(Completion.Op.isReadiness(completion.op)); // callers check `supports`
    if (completion.op.triesFirst()) {
        const result = nonblocking.attempt(&completion.op);
        if (result != eagain) return backend.finish(completion, result);
    }
    // A positional read or write is made only on a seekable descriptor (fs/file.zig asks
    // first): a regular file or a device, which epoll cannot watch. Told so at once.
    switch (completion.op) {
        .read => |op| if (op.offset != null) {
            return backend.finish(completion, Completion.result_unpollable);
        },
        .write => |op| if (op.offset != null) {
            return backend.finish(completion, Completion.result_unpollable);
        },
        else => {},
    }
    const fd = completion.op.fd();
    // No entry for a negative number (a caller's bug): the kernel would say EBADF too.
    if (fd < 0) return backend.finish(completion, failure(.BADF));
    const watch = backend.watches.obtain(fd) catch
        return backend.finish(completion, failure(.NOMEM));
    watch.push(completion);
    completion.epoll_fd = fd;
    backend.arm(fd, watch, completion);
}

/// Arms `fd`'s one-shot registration for the union of its waiters' interests: modified when
/// it has one, added under a new generation when not. `fresh` is the waiter that has just
/// started to wait (null after an event). A registration found gone means the descriptor was
/// closed under the waiters from before: they end with `-ECANCELED`. A failure ends every
/// waiter with its errno.
fn arm(backend: *EpollBackend, fd: os.fd_t, watch: *Watch, fresh: ?*Completion) void {
    assert(watch.waiters != null);
    assert(fresh == null or fresh.?.epoll_fd == fd);
    if (watch.generation != 0) {
        switch (backend.control(linux.EPOLL.CTL_MOD, fd, watch)) {
            .SUCCESS => return,
            .NOENT => {
                backend.endWaiters(watch, fresh, .CANCELED);
                watch.generation = 0;
                if (fresh == null) return;
            },
            else => |e| return backend.endWaiters(watch, null, e),
        }
    }
    // A descriptor without a registration has had no waiter since (`endWaiters` ended them).
    assert(fresh != null);
    assert(watch.waiters == fresh and fresh.?.next == null);
    backend.generation_last +%= 1;
    if (backend.generation_last == 0) backend.generation_last = 1;
    watch.generation = backend.generation_last;
    const e: linux.E = switch (backend.control(linux.EPOLL.CTL_ADD, fd, watch)) {
        .SUCCESS => return,
        // Registered, but forgotten (`forget`), and the number names that file again (a
        // `dup2` over it): taken over under the new generation.
        .EXIST => switch (backend.control(linux.EPOLL.CTL_MOD, fd, watch)) {
            .SUCCESS => return,
            else => |e| e,
        },
        else => |e| e,
    };
    watch.generation = 0;
    backend.endWaiters(watch, null, e);
}

fn control(backend: *EpollBackend, op: u32, fd: os.fd_t, watch: *const Watch) linux.E {
    assert(watch.generation != 0);
    var event: linux.epoll_event = .{
        .events = watch.interest | linux.EPOLL.ONESHOT,
        .data = .{ .u64 = @as(u64, watch.generation) << 32 | @as(u32, @intCast(fd)) },
    };
    return os.errno(linux.epoll_ctl(backend.epoll_fd, op, fd, &event));
}

/// Ends the waiters of `watch` but `except` with errno `e`; a read or write of a descriptor
/// epoll cannot watch (`EPERM`: a regular file) with `result_unpollable`.
fn endWaiters(backend: *EpollBackend, watch: *Watch, except: ?*Completion, e: linux.E) void {
    var waiter = watch.takeAll();
    while (waiter) |completion| {
        waiter = completion.next;
        completion.next = null;
        if (completion == except) {
            watch.push(completion);
            continue;
        }
        const result = switch (completion.op) {
            .read, .write => if (e == .PERM) Completion.result_unpollable else failure(e),
            else => failure(e),
        };
        backend.end(completion, result);
    }
    assert(watch.waiters == except);
}

pub fn cancel(backend: *EpollBackend, completion: *Completion) void {
    assert(completion.state == .submitted);
    // Already finished and waiting in `ready`, or ready and waiting in `owner_ready` to run:
    // the result stands.
    if (completion.epoll_fd == -1) return;
    const watch = backend.watches.find(completion.epoll_fd).?; // it waits there
    const removed = watch.remove(completion);
    assert(removed);
    // The registration stays armed for the canceled interest as well: an event for it finds
    // no waiter and arms for those left, if any. Rejected: `EPOLL_CTL_MOD` now, a syscall
    // for every canceled wait (a timeout), most of whose descriptors are closed next.
    backend.end(completion, failure(.CANCELED));
}

/// Before `fd` is closed through weft, on the loop's thread: ends this loop's operations
/// waiting on it with `-ECANCELED` (the close would leave them waiting on nothing, or on the
/// next file given the number) and forgets its registration (see "Descriptors closed under a
/// registration"). No syscall: the close removes the registration, or, if the file is still
/// open elsewhere, leaves it to fire once, stale.
pub fn forget(backend: *EpollBackend, fd: os.fd_t) void {
    if (fd < 0) return;
    // A read or write a rescuer left to the loop's thread would run on the closed number.
    var kept: Completion.Queue = .{};
    while (backend.owner_ready.pop()) |completion| {
        if (completion.op.fd() == fd) {
            backend.finish(completion, failure(.CANCELED));
        } else {
            kept.push(completion);
        }
    }
    backend.owner_ready = kept;
    const watch = backend.watches.find(fd) orelse return;
    backend.endWaiters(watch, null, .CANCELED);
    watch.generation = 0;
}

/// Ends a waiting operation with `result`: it leaves its watch's bookkeeping.
fn end(backend: *EpollBackend, completion: *Completion, result: i32) void {
    assert(completion.next == null);
    completion.epoll_fd = -1;
    backend.finish(completion, result);
}

fn finish(backend: *EpollBackend, completion: *Completion, result: i32) void {
    assert(completion.epoll_fd == -1);
    completion.result = result;
    backend.ready.push(completion);
}

/// Runs the plain syscall of a ready read or write on the loop's thread: only for a file that
/// refuses `RWF_NOWAIT` (`performReady`), where it may block.
fn perform(backend: *EpollBackend, completion: *Completion) void {
    const rc: usize = switch (completion.op) {
        .read => |op| if (op.offset) |offset|
            linux.preadv(op.fd, op.iovecs.ptr, op.iovecs.len, @intCast(offset))
        else
            linux.readv(op.fd, op.iovecs.ptr, op.iovecs.len),
        .write => |op| if (op.offset) |offset|
            linux.pwritev(op.fd, op.iovecs.ptr, op.iovecs.len, @intCast(offset))
        else
            linux.writev(op.fd, op.iovecs.ptr, op.iovecs.len),
        .poll => unreachable, // a poll is finished by its readiness event alone
        .accept, .connect, .recvmsg, .sendmsg, .recv, .send => unreachable, // see `wakeWaiter`
        .openat, .statx, .fsync, .ftruncate, .unlinkat, .renameat => unreachable, // `supports`
        .mkdirat, .symlinkat, .linkat, .waitid => unreachable, // `supports`
    };
    const result: i32 = switch (os.errno(rc)) {
        .SUCCESS => @intCast(rc),
        else => |e| -@as(i32, @intFromEnum(e)),
    };
    backend.finish(completion, result);
}

/// Runs a ready read or write without blocking the thread, the loop's own as a rescuer's. A
/// descriptor in blocking mode (a socket weft handed out, a pipe, a terminal) whose readiness
/// went stale or whose room is smaller than the write would block `readv`/`writev` until it
/// could finish: the executor's other tasks would wait that long. `RWF_NOWAIT` says so
/// instead (sockets take it as MSG_DONTWAIT, pipes as a non-blocking read or write), and the
/// operation waits on (returns true); a write of more than the room writes what fits. A file
/// that refuses the flag (a terminal), or a kernel without it, runs the plain syscall on the
/// loop's thread, as weft did for all of them before: there it may block. Same cost as the
/// plain syscall when ready: one call.
fn performReady(backend: *EpollBackend, completion: *Completion, reaper: Reaper) bool {
    const nowait = linux.RWF.NOWAIT;
    const rc: usize = switch (completion.op) {
        .read => |op| linux.preadv2(op.fd, op.iovecs.ptr, op.iovecs.len, -1, nowait),
        .write => |op| linux.pwritev2(op.fd, op.iovecs.ptr, op.iovecs.len, -1, nowait),
        else => unreachable, // sockets retry; polls need no syscall
    };
    switch (os.errno(rc)) {
        .SUCCESS => backend.end(completion, @intCast(rc)),
        .AGAIN, .INTR => return true,
        // The file refuses the flag, or the kernel (or an emulator) lacks the call.
        .OPNOTSUPP, .INVAL, .NOSYS => {
            completion.epoll_fd = -1;
            switch (reaper) {
                .loop_thread => backend.perform(completion),
                .rescuer => backend.owner_ready.push(completion), // run at the loop's next poll
            }
        },
        else => |e| backend.end(completion, failure(e)),
    }
    return false;
}

/// A waiter's readiness came (`events`): runs its syscall, or ends it for a poll. Returns
/// true when it waits on: its readiness was stale (someone else took the data or the
/// connection), or its read or write would have blocked.
fn wakeWaiter(backend: *EpollBackend, completion: *Completion, events: u32, reaper: Reaper) bool {
    if (completion.op.triesFirst()) {
        // Never blocks, on a rescuer's thread too: receives and sends add MSG_DONTWAIT, and
        // the sockets weft accepts on and connects are non-blocking (`net/socket.zig`).
        const result = nonblocking.attempt(&completion.op);
        if (result == eagain) return true;
        backend.end(completion, result);
        return false;
    }
    switch (completion.op) {
        .poll => |op| {
            const reported = events & (op.events | linux.EPOLL.ERR | linux.EPOLL.HUP);
            backend.end(completion, @intCast(reported));
        },
        .read, .write => return backend.performReady(completion, reaper),
        // Try first (above).
        .accept, .connect, .recvmsg, .sendmsg, .recv, .send => unreachable,
        .openat, .statx, .fsync, .ftruncate, .unlinkat, .renameat => unreachable,
        .mkdirat, .symlinkat, .linkat, .waitid => unreachable, // never submitted here
    }
    return false;
}

/// One event of a descriptor's registration: wakes the waiters whose interest it names (every
/// one on an error or a hang-up) and arms the registration again for those still waiting.
fn dispatch(backend: *EpollBackend, event: linux.epoll_event, reaper: Reaper) void {
    const fd: os.fd_t = @intCast(@as(u32, @truncate(event.data.u64)));
    const generation: u32 = @intCast(event.data.u64 >> 32);
    assert(generation != 0);
    // Every registration has its entry, kept until the loop ends.
    const watch = backend.watches.find(fd).?;
    // A registration forgotten since: its descriptor was closed (the file lives on elsewhere)
    // and the number may name another file now.
    if (generation != watch.generation) return;
    var waiter = watch.takeAll();
    while (waiter) |completion| {
        waiter = completion.next;
        completion.next = null;
        const woken_by = interest(completion.op) | linux.EPOLL.ERR | linux.EPOLL.HUP;
        const waits_on = woken_by & event.events == 0 or
            backend.wakeWaiter(completion, event.events, reaper);
        if (waits_on) watch.push(completion);
    }
    if (watch.waiters != null) backend.arm(fd, watch, null);
}

pub fn poll(backend: *EpollBackend, timeout_ns: ?u64, reaped: *Completion.Queue) Reaped {
    while (backend.owner_ready.pop()) |completion| backend.perform(completion);
    return backend.reapReady(timeout_ns, reaped, .loop_thread);
}

const Reaped = Completion.Reaped;
const Reaper = Completion.Reaper;

/// Waits up to `timeout_ns` for readiness, runs the ready operations' syscalls and moves the
/// finished operations to `reaped`. Any thread may call it, one at a time (the loop's reap
/// lock): a rescuer (`Loop.rescue`) calls it with a timeout of 0. The wake-up eventfd is
/// drained.
pub fn reapReady(
    backend: *EpollBackend,
    timeout_ns: ?u64,
    reaped: *Completion.Queue,
    reaper: Reaper,
) Reaped {
    var sorted: Reaped = .{};
    const wait_ns: ?u64 = if (backend.ready.isEmpty()) timeout_ns else 0;
    const count = backend.wait(wait_ns);
    for (backend.events[0..count]) |event| {
        if (event.data.u64 == 0) {
            sorted.woken = true;
            _ = os.eventFdDrain(backend.wake_fd);
            continue;
        }
        backend.dispatch(event, reaper);
    }
    while (backend.ready.pop()) |completion| {
        reaped.push(completion);
        sorted.completions += 1;
    }
    return sorted;
}

fn wait(backend: *EpollBackend, timeout_ns: ?u64) usize {
    var ts: linux.timespec = undefined;
    if (timeout_ns) |ns| ts = os.timespecFromNs(ns);
    // epoll_pwait2 (5.11+) takes nanoseconds; plain epoll_wait would round sleeps to ms.
    const rc = linux.syscall6(
        .epoll_pwait2,
        @as(usize, @bitCast(@as(isize, backend.epoll_fd))),
        @intFromPtr(&backend.events),
        backend.events.len,
        if (timeout_ns != null) @intFromPtr(&ts) else 0,
        0,
        linux.NSIG / 8,
    );
    switch (os.errno(rc)) {
        .SUCCESS => return rc,
        .INTR => return 0,
        .NOSYS => {},
        else => |e| std.debug.panic("weft: epoll_pwait2 failed: {t}", .{e}),
    }
    const timeout_ms: i32 = if (timeout_ns) |ns|
        @intCast(@min(
            std.math.divCeil(u64, ns, std.time.ns_per_ms) catch unreachable,
            std.math.maxInt(i32),
        ))
    else
        -1;
    const fallback_rc =
        linux.epoll_wait(backend.epoll_fd, &backend.events, backend.events.len, timeout_ms);
    return switch (os.errno(fallback_rc)) {
        .SUCCESS => fallback_rc,
        .INTR => 0,
        else => |e| std.debug.panic("weft: epoll_wait failed: {t}", .{e}),
    };
}

pub fn wake(backend: *EpollBackend) void {
    os.eventFdSignal(backend.wake_fd);
}

const Loop = @import("../Loop.zig");
const qemu = @import("../../testing/qemu.zig");

fn testDone(c: *Completion) void {
    c.state = .idle;
}

/// Polls until `completions` are all idle again (bounded: the test fails rather than hangs).
fn testPollUntilIdle(loop: *Loop, completions: []const *Completion) !void {
    for (0..1000) |_| {
        for (completions) |c| {
            if (c.state != .idle) break;
        } else return;
        _ = loop.poll(10 * std.time.ns_per_ms);
    }
    return error.TestTimedOut;
}

/// A connected pair of non-blocking Unix stream sockets.
fn testPair() ![2]os.fd_t {
    var fds: [2]i32 = undefined;
    const flags = linux.SOCK.STREAM | linux.SOCK.CLOEXEC | linux.SOCK.NONBLOCK;
    try std.testing.expectEqual(@as(usize, 0), linux.socketpair(linux.AF.UNIX, flags, 0, &fds));
    return fds;
}

/// Sends into `fd` until its buffer is full, so that a send waits.
fn testFill(fd: os.fd_t) !void {
    const chunk: [4096]u8 = @splat('f');
    for (0..100_000) |_| {
        const rc = linux.sendto(fd, &chunk, chunk.len, linux.MSG.DONTWAIT, null, 0);
        switch (os.errno(rc)) {
            .SUCCESS => {},
            .AGAIN => return,
            else => return error.TestUnexpectedResult,
        }
    }
    return error.TestBufferNeverFull;
}

/// Receives from `fd` until nothing is left, so that its peer can send again.
fn testDrain(fd: os.fd_t) !void {
    var chunk: [4096]u8 = undefined;
    for (0..100_000) |_| {
        const rc = linux.recvfrom(fd, &chunk, chunk.len, linux.MSG.DONTWAIT, null, null);
        switch (os.errno(rc)) {
            .SUCCESS => {},
            .AGAIN => return,
            else => return error.TestUnexpectedResult,
        }
    }
    return error.TestBufferNeverEmpty;
}

fn testSend(fd: os.fd_t, bytes: []const u8) !void {
    const rc = linux.sendto(fd, bytes.ptr, bytes.len, linux.MSG.DONTWAIT, null, 0);
    try std.testing.expectEqual(bytes.len, rc);
}

/// A receive and a send waiting on one socket at once (its send buffer full, nothing to
/// read). `outcome` says, per step, which of them is made ready and which canceled.
const TestStep = enum { read_ready, write_ready, read_canceled, write_canceled };

fn testReadAndWrite(choice: Loop.Choice, steps: [2]TestStep) !void {
    var loop: Loop = undefined;
    try loop.init(choice);
    defer loop.deinit();
    const pair = try testPair();
    defer for (pair) |fd| os.closeFd(fd);
    try testFill(pair[0]);
    var in_buffer: [8]u8 = @splat('x');
    var recv: Completion = .{
        .op = .{ .recv = .{ .fd = pair[0], .buffer = &in_buffer, .flags = 0 } },
        .callback = &testDone,
    };
    var send: Completion = .{
        .op = .{ .send = .{ .fd = pair[0], .buffer = "more", .flags = linux.MSG.NOSIGNAL } },
        .callback = &testDone,
    };
    loop.submit(&recv);
    loop.submit(&send);
    _ = loop.poll(0);
    try std.testing.expectEqual(Completion.State.submitted, recv.state);
    try std.testing.expectEqual(Completion.State.submitted, send.state);
    if (choice == .epoll) {
        // One registration of the socket itself for both, and no descriptor of their own.
        const watch = loop.backend.epoll.watches.find(pair[0]).?;
        const both = linux.EPOLL.IN | linux.EPOLL.RDHUP | linux.EPOLL.OUT;
        try std.testing.expectEqual(both, watch.interest);
        try std.testing.expectEqual(pair[0], recv.epoll_fd);
        try std.testing.expectEqual(pair[0], send.epoll_fd);
    }
    for (steps, 0..) |step, index| {
        const subject = switch (step) {
            .read_ready, .read_canceled => &recv,
            .write_ready, .write_canceled => &send,
        };
        const other = if (subject == &recv) &send else &recv;
        switch (step) {
            .read_ready => try testSend(pair[1], "abc"),
            .write_ready => try testDrain(pair[1]),
            .read_canceled, .write_canceled => loop.cancel(subject),
        }
        try testPollUntilIdle(&loop, &.{subject});
        switch (step) {
            .read_ready => {
                try std.testing.expectEqual(@as(i32, 3), recv.result);
                try std.testing.expectEqualStrings("abc", in_buffer[0..3]);
            },
            .write_ready => try std.testing.expectEqual(@as(i32, 4), send.result),
            .read_canceled, .write_canceled => {
                try std.testing.expectEqual(linux.E.CANCELED, subject.err().?);
            },
        }
        // The other one still waits, until its own step.
        if (index == 0) try std.testing.expectEqual(Completion.State.submitted, other.state);
    }
    if (steps[0] == .write_canceled or steps[1] == .write_canceled) {
        try std.testing.expectEqual(@as(u8, 'x'), in_buffer[3]);
    }
    try std.testing.expectEqual(@as(usize, 0), loop.inFlight());
}

const test_step_orders = [_][2]TestStep{
    .{ .read_ready, .write_ready },
    .{ .write_ready, .read_ready },
    .{ .read_canceled, .write_ready },
    .{ .write_canceled, .read_ready },
};

test "EpollBackend: a read and a write wait on one socket; either completes or is canceled first" {
    for (test_step_orders) |steps| try testReadAndWrite(.epoll, steps);
}

test "EpollBackend: the same read and write on io_uring, for comparison" {
    try qemu.skipUnderQemu(.io_uring, @src());
    for (test_step_orders) |steps| try testReadAndWrite(.io_uring, steps);
}

/// How a waiter's descriptor is closed under it, in `testClosedAndReused`.
const TestClose = enum {
    /// By code weft does not see; its file closes with it.
    unseen,
    /// By code weft does not see; its file stays open in another descriptor, and turns ready.
    unseen_file_open,
    /// Through weft (`Loop.forget` first); its file stays open elsewhere and turns ready.
    forgotten_file_open,
};

fn testClosedAndReused(close: TestClose) !void {
    var loop: Loop = undefined;
    try loop.init(.epoll);
    defer loop.deinit();
    const first = try testPair();
    defer os.closeFd(first[1]);
    const kept: ?os.fd_t = if (close == .unseen) null else @intCast(linux.dup(first[0]));
    defer if (kept) |fd| os.closeFd(fd);
    var stale_buffer: [8]u8 = @splat('x');
    var stale: Completion = .{
        .op = .{ .recv = .{ .fd = first[0], .buffer = &stale_buffer, .flags = 0 } },
        .callback = &testDone,
    };
    loop.submit(&stale);
    _ = loop.poll(0);
    try std.testing.expectEqual(Completion.State.submitted, stale.state);
    if (close == .forgotten_file_open) {
        loop.forget(first[0]);
        try testPollUntilIdle(&loop, &.{&stale});
    }
    os.closeFd(first[0]);
    // The lowest free number: the one just closed.
    const second = try testPair();
    defer for (second) |fd| os.closeFd(fd);
    try std.testing.expectEqual(first[0], second[0]);
    if (close != .unseen) try testSend(first[1], "old"); // the old file turns ready
    var fresh_buffer: [8]u8 = undefined;
    var fresh: Completion = .{
        .op = .{ .recv = .{ .fd = second[0], .buffer = &fresh_buffer, .flags = 0 } },
        .callback = &testDone,
    };
    loop.submit(&fresh);
    // The old waiter ends canceled, whether its registration was found gone (unseen), it
    // woke and found the number's new file not ready (file open), or it was forgotten.
    try testPollUntilIdle(&loop, &.{&stale});
    try std.testing.expectEqual(linux.E.CANCELED, stale.err().?);
    try std.testing.expectEqual(@as(u8, 'x'), stale_buffer[0]);
    // The old file's registration, if it outlived the close, wakes nobody.
    for (0..3) |_| _ = loop.poll(std.time.ns_per_ms);
    try std.testing.expectEqual(Completion.State.submitted, fresh.state);
    try testSend(second[1], "new");
    try testPollUntilIdle(&loop, &.{&fresh});
    try std.testing.expectEqual(@as(i32, 3), fresh.result);
    try std.testing.expectEqualStrings("new", fresh_buffer[0..3]);
    try std.testing.expectEqual(@as(usize, 0), loop.inFlight());
}

test "EpollBackend: a descriptor closed and reused under a waiter gives it no wrong completion" {
    try testClosedAndReused(.unseen);
    try testClosedAndReused(.unseen_file_open);
    try testClosedAndReused(.forgotten_file_open);
}

test "EpollBackend: random receives, sends, cancels and readiness on shared sockets end once" {
    var loop: Loop = undefined;
    try loop.init(.epoll);
    defer loop.deinit();
    const pairs_count = 3;
    var pairs: [pairs_count][2]os.fd_t = undefined;
    for (&pairs) |*pair| pair.* = try testPair();
    defer for (pairs) |pair| for (pair) |fd| os.closeFd(fd);
    const Slot = struct { completion: Completion, submitted: u32 = 0 };
    var buffers: [pairs_count][4]u8 = undefined;
    // Per pair: a receive and a send on its first socket, each waiting at most once at a time.
    var slots: [pairs_count][2]Slot = undefined;
    for (&slots, &pairs, &buffers) |*pair_slots, pair, *buffer| {
        pair_slots[0] = .{ .completion = .{
            .op = .{ .recv = .{ .fd = pair[0], .buffer = buffer, .flags = 0 } },
            .callback = &testDone,
        } };
        pair_slots[1] = .{ .completion = .{
            .op = .{ .send = .{ .fd = pair[0], .buffer = "s", .flags = linux.MSG.NOSIGNAL } },
            .callback = &testDone,
        } };
        try testFill(pair[0]);
    }
    var prng: std.Random.DefaultPrng = .init(std.testing.random_seed);
    const random = prng.random();
    for (0..2_000) |_| {
        const pair = random.uintLessThan(usize, pairs_count);
        const slot = &slots[pair][random.uintLessThan(usize, 2)];
        switch (random.uintLessThan(u8, 5)) {
            0 => if (slot.completion.state == .idle) {
                slot.completion.next = null;
                loop.submit(&slot.completion);
                slot.submitted += 1;
            },
            1 => loop.cancel(&slot.completion),
            2 => try testSend(pairs[pair][1], "r"),
            3 => try testDrain(pairs[pair][1]),
            else => _ = loop.poll(0),
        }
        for (slots, buffers) |pair_slots, buffer| for (pair_slots, 0..) |s, index| {
            // Every result is bytes moved or a cancel: a receive gets only what its peer sent.
            if (s.completion.state != .idle or s.submitted == 0) continue;
            const result = s.completion.result;
            if (result == failure(.CANCELED)) continue;
            try std.testing.expect(result >= 1);
            if (index == 1) try std.testing.expectEqual(@as(i32, 1), result);
            const received: usize = @intCast(result);
            if (index == 0) for (buffer[0..received]) |byte| {
                try std.testing.expectEqual(@as(u8, 'r'), byte);
            };
        };
    }
    // The end: every waiter canceled or completed, each once.
    for (&slots) |*pair_slots| for (pair_slots) |*s| loop.cancel(&s.completion);
    var all: [2 * pairs_count]*Completion = undefined;
    for (0..pairs_count) |i| for (0..2) |j| {
        all[2 * i + j] = &slots[i][j].completion;
    };
    try testPollUntilIdle(&loop, &all);
    try std.testing.expectEqual(@as(usize, 0), loop.inFlight());
    for (pairs) |pair| {
        const watch = loop.backend.epoll.watches.find(pair[0]) orelse continue;
        try std.testing.expect(watch.waiters == null);
        try std.testing.expectEqual(@as(u32, 0), watch.interest);
    }
}
