//! The epoll backend: readiness, then the syscall. Used where io_uring is missing or
//! forbidden (seccomp, old kernels), or when forced with `WEFT_BACKEND=epoll`.
//!
//! Each operation registers a `dup` of its descriptor (EPOLLONESHOT), because epoll keys its
//! interest set by descriptor: two fibers waiting on one fd (a reader and a writer) would
//! otherwise overwrite each other's registration. A descriptor epoll cannot watch (a regular
//! file: EPERM) is always ready, so its operation runs at once, as Linux would run it anyway.
const EpollBackend = @This();

const std = @import("std");
const linux = std.os.linux;
const posix = std.posix;
const assert = std.debug.assert;
const config = @import("../../config.zig");
const os = @import("../../os/linux.zig");
const Completion = @import("../Completion.zig");
const nonblocking = @import("../nonblocking.zig");

epoll_fd: os.fd_t,
wake_fd: os.fd_t,
/// Operations that finished without waiting, reported at the next poll.
ready: Completion.Queue = .{},
/// Reads and writes a rescuer found ready but could not run without risking to block its
/// thread (`performForRescuer`): the loop's thread runs them at its next poll.
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
    var event: linux.epoll_event = .{ .events = linux.EPOLL.IN, .data = .{ .ptr = 0 } };
    switch (os.errno(linux.epoll_ctl(epoll_fd, linux.EPOLL.CTL_ADD, wake_fd, &event))) {
        .SUCCESS => {},
        .NOMEM, .NOSPC => return error.SystemResources,
        else => |e| return os.unexpectedErrno(e),
    }
    backend.* = .{ .epoll_fd = epoll_fd, .wake_fd = wake_fd };
}

pub fn deinit(backend: *EpollBackend) void {
    assert(backend.owner_ready.isEmpty());
    os.closeFd(backend.epoll_fd);
    os.closeFd(backend.wake_fd);
    backend.* = undefined;
}

const interest = nonblocking.interest;

/// Only readiness operations: epoll has no asynchronous form of a file system or process
/// call (weft runs those on its blocking lane).
pub fn supports(backend: *const EpollBackend, tag: Completion.Op.Tag) bool {
    _ = backend;
    return Completion.Op.isReadiness(tag);
}

/// Socket operations try their syscall first: most find their socket ready (bytes waiting,
/// buffer space, a pending connection), and an `EAGAIN` costs less than an epoll round trip.
pub fn submit(backend: *EpollBackend, completion: *Completion) void {
    assert(completion.epoll_fd == -1);
    assert(Completion.Op.isReadiness(completion.op)); // callers check `supports`
    if (completion.op.triesFirst()) {
        const result = nonblocking.attempt(&completion.op);
        const eagain = -@as(i32, @intFromEnum(linux.E.AGAIN));
        if (result != eagain) return backend.finish(completion, result);
    }
    // A positional read or write is made only on a seekable descriptor (fs/file.zig asks
    // first): a regular file or a device, which epoll cannot watch. Told so without a `dup`,
    // which also fails where the process has no descriptor left.
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
    const dup_rc = linux.dup(fd);
    const dup_errno = os.errno(dup_rc);
    const watched: os.fd_t = switch (dup_errno) {
        .SUCCESS => @intCast(dup_rc),
        // No descriptor left for the dup (a server at its limit): the descriptor itself is
        // watched, as long as no other operation watches it so (`EEXIST` below). A dup never
        // has the number of the descriptor it copies, so `unregister` tells them apart.
        .MFILE, .NFILE => fd,
        else => |e| return backend.finish(completion, -@as(i32, @intFromEnum(e))),
    };
    var event: linux.epoll_event = .{
        .events = interest(completion.op) | linux.EPOLL.ONESHOT,
        .data = .{ .ptr = @intFromPtr(completion) },
    };
    switch (os.errno(linux.epoll_ctl(backend.epoll_fd, linux.EPOLL.CTL_ADD, watched, &event))) {
        .SUCCESS => completion.epoll_fd = watched,
        .PERM => {
            // Not pollable (regular file, directory): "always ready", but the syscall may
            // still block on the disk, so it does not run here (see `result_unpollable`).
            if (watched != fd) os.closeFd(watched);
            switch (completion.op) {
                .read, .write => backend.finish(completion, Completion.result_unpollable),
                else => backend.finish(completion, -@as(i32, @intFromEnum(linux.E.PERM))),
            }
        },
        else => |e| {
            if (watched != fd) os.closeFd(watched);
            // Watching the descriptor itself failed: the cause to report is the dup's.
            const reported = if (watched == fd) dup_errno else e;
            backend.finish(completion, -@as(i32, @intFromEnum(reported)));
        },
    }
}

pub fn cancel(backend: *EpollBackend, completion: *Completion) void {
    assert(completion.state == .submitted);
    // Already finished and waiting in `ready`, or ready and waiting in `owner_ready` to run:
    // the result stands.
    if (completion.epoll_fd == -1) return;
    backend.unregister(completion);
    backend.finish(completion, -@as(i32, @intFromEnum(linux.E.CANCELED)));
}

fn unregister(backend: *EpollBackend, completion: *Completion) void {
    assert(completion.epoll_fd != -1);
    _ = linux.epoll_ctl(backend.epoll_fd, linux.EPOLL.CTL_DEL, completion.epoll_fd, null);
    // The descriptor itself was watched where no dup could be made (see `submit`).
    if (completion.epoll_fd != completion.op.fd()) os.closeFd(completion.epoll_fd);
    completion.epoll_fd = -1;
}

fn finish(backend: *EpollBackend, completion: *Completion, result: i32) void {
    completion.result = result;
    backend.ready.push(completion);
}

/// Runs the syscall of a ready operation.
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
        .accept, .connect, .recvmsg, .sendmsg, .recv, .send => unreachable, // see `retry`
        .openat, .statx, .fsync, .ftruncate, .unlinkat, .renameat => unreachable, // `supports`
        .mkdirat, .symlinkat, .linkat, .waitid => unreachable, // `supports`
    };
    const result: i32 = switch (os.errno(rc)) {
        .SUCCESS => @intCast(rc),
        else => |e| -@as(i32, @intFromEnum(e)),
    };
    backend.finish(completion, result);
}

/// `perform` on a rescuer's thread, which must not block: a read or write of a pipe or a
/// terminal opened blocking, whose readiness went stale or whose room is smaller than the
/// write, would block in `readv`/`writev`. `RWF_NOWAIT` says so instead: not ready after all
/// re-arms the registration; a file that refuses the flag (a terminal) is left for the loop's
/// thread, which runs it as before.
fn performForRescuer(backend: *EpollBackend, completion: *Completion) void {
    const rc: usize = switch (completion.op) {
        .read => |op| linux.preadv2(op.fd, op.iovecs.ptr, op.iovecs.len, -1, linux.RWF.NOWAIT),
        .write => |op| linux.pwritev2(op.fd, op.iovecs.ptr, op.iovecs.len, -1, linux.RWF.NOWAIT),
        else => unreachable, // sockets retry; polls need no syscall
    };
    switch (os.errno(rc)) {
        .SUCCESS => {
            backend.unregister(completion);
            backend.finish(completion, @intCast(rc));
        },
        .AGAIN => backend.rearm(completion),
        // The file refuses the flag (a terminal), or the kernel (or an emulator) lacks the
        // call: the loop's thread runs it, as it would have.
        .OPNOTSUPP, .INVAL, .NOSYS => {
            backend.unregister(completion);
            backend.owner_ready.push(completion);
        },
        else => |e| {
            backend.unregister(completion);
            backend.finish(completion, -@as(i32, @intFromEnum(e)));
        },
    }
}

/// Arms the one-shot registration of a still-waiting operation again; a failure ends it.
fn rearm(backend: *EpollBackend, completion: *Completion) void {
    var event: linux.epoll_event = .{
        .events = interest(completion.op) | linux.EPOLL.ONESHOT,
        .data = .{ .ptr = @intFromPtr(completion) },
    };
    const ctl = linux.EPOLL.CTL_MOD;
    const rc = linux.epoll_ctl(backend.epoll_fd, ctl, completion.epoll_fd, &event);
    switch (os.errno(rc)) {
        .SUCCESS => {},
        else => |e| {
            backend.unregister(completion);
            backend.finish(completion, -@as(i32, @intFromEnum(e)));
        },
    }
}

/// A socket operation's descriptor became ready: try the syscall again. A stale readiness
/// (someone else took the data or the connection) re-arms the one-shot registration.
fn retry(backend: *EpollBackend, completion: *Completion) void {
    assert(completion.epoll_fd != -1);
    const result = nonblocking.attempt(&completion.op);
    if (result == -@as(i32, @intFromEnum(linux.E.AGAIN))) return backend.rearm(completion);
    backend.unregister(completion);
    backend.finish(completion, result);
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
        if (event.data.ptr == 0) {
            sorted.woken = true;
            _ = os.eventFdDrain(backend.wake_fd);
            continue;
        }
        const completion: *Completion = @ptrFromInt(event.data.ptr);
        if (completion.op.triesFirst()) {
            // Never blocks, on a rescuer's thread too: weft's sockets are non-blocking (and
            // receives and sends add MSG_DONTWAIT).
            backend.retry(completion);
            continue;
        }
        if (reaper == .rescuer and completion.op != .poll) {
            backend.performForRescuer(completion);
            continue;
        }
        backend.unregister(completion);
        switch (completion.op) {
            .poll => backend.finish(completion, @intCast(event.events)),
            .read, .write => backend.perform(completion),
            // Handled by `retry`.
            .accept, .connect, .recvmsg, .sendmsg, .recv, .send => unreachable,
            .openat, .statx, .fsync, .ftruncate, .unlinkat, .renameat => unreachable,
            .mkdirat, .symlinkat, .linkat, .waitid => unreachable, // never submitted here
        }
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
