//! Socket operations of a `Completion` as direct, non-blocking syscalls.
//!
//! Two users: the epoll backend, which tries a socket operation at once and waits for
//! readiness only on `EAGAIN`; and threads weft does not run, which have no loop and wait in
//! `poll(2)` instead (`performBlocking`).
//!
//! Why each syscall here must not block whatever the socket's mode: epoll reports readiness,
//! and a readiness report can be stale (another thread took the connection or the bytes), so
//! the syscall that follows must be able to say `EAGAIN` rather than stall the executor, and
//! `connect` must return `EINPROGRESS` to be waited for at all. Receives and sends add
//! `MSG_DONTWAIT`, so they never block on the blocking sockets weft hands out (for C code
//! that uses their descriptors: `net/socket.zig`). `accept4` and `connect` have no such
//! per-call flag: they rely on the socket's own `O_NONBLOCK`, which weft's listeners keep and
//! its sockets have while they connect. io_uring does not need any of it: checked on Linux
//! 6.18, an accept, connect, recv or readv submitted on an `O_NONBLOCK` socket waits inside
//! the kernel (internal poll) exactly as on a blocking one. Kernels that hand `-EAGAIN` back
//! instead are handled by the fiber bridge, which then waits for readiness and retries
//! (`sched/io_wait.zig`).
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const Completion = @import("Completion.zig");

const eagain: i32 = -@as(i32, @intFromEnum(linux.E.AGAIN));

/// The readiness an operation waits for, as EPOLL bits (on Linux the POLL bits have the same
/// values, so `poll(2)` takes them as they are).
pub fn interest(op: Completion.Op) u32 {
    comptime assert(linux.EPOLL.IN == linux.POLL.IN and linux.EPOLL.OUT == linux.POLL.OUT);
    return switch (op) {
        .read, .recvmsg, .recv => linux.EPOLL.IN | linux.EPOLL.RDHUP,
        .accept => linux.EPOLL.IN,
        .write, .connect, .sendmsg, .send => linux.EPOLL.OUT,
        .poll => |p| p.events,
        .openat, .statx, .fsync, .ftruncate, .unlinkat, .renameat => unreachable, // no readiness
        .mkdirat, .symlinkat, .linkat, .waitid => unreachable, // no readiness
    };
}

/// Runs a socket operation's syscall once without blocking (an accept or connect: on a
/// non-blocking socket). Returns its result, `-errno` on failure, and `-EAGAIN` when it has to
/// wait for readiness (call again once ready).
pub fn attempt(op: *Completion.Op) i32 {
    assert(op.triesFirst());
    while (true) {
        const rc: usize = switch (op.*) {
            .accept => |o| linux.accept4(o.fd, o.addr, o.addr_len, o.flags),
            .connect => |*o| return attemptConnect(o),
            .recvmsg => |o| linux.recvmsg(o.fd, o.msg, o.flags | linux.MSG.DONTWAIT),
            .sendmsg => |o| linux.sendmsg(o.fd, o.msg, o.flags | linux.MSG.DONTWAIT),
            .recv => |o| linux.recvfrom(
                o.fd,
                o.buffer.ptr,
                o.buffer.len,
                o.flags | linux.MSG.DONTWAIT,
                null,
                null,
            ),
            .send => |o| linux.sendto(
                o.fd,
                o.buffer.ptr,
                o.buffer.len,
                o.flags | linux.MSG.DONTWAIT,
                null,
                0,
            ),
            .read, .write, .poll => unreachable, // not a socket operation
            .openat, .statx, .fsync, .ftruncate, .unlinkat, .renameat => unreachable,
            .mkdirat, .symlinkat, .linkat, .waitid => unreachable, // not a socket operation
        };
        switch (os.errno(rc)) {
            .SUCCESS => return @intCast(rc),
            .INTR => continue,
            else => |e| return -@as(i32, @intFromEnum(e)),
        }
    }
}

/// First call: `connect`, which on a non-blocking socket says `EINPROGRESS`. Later calls (once
/// the socket is writable): the outcome, from `SO_ERROR`. A second `connect` is not used to
/// learn it: after a failure Linux would start a new attempt instead of reporting.
fn attemptConnect(o: *@FieldType(Completion.Op, "connect")) i32 {
    if (!o.started) {
        while (true) switch (os.errno(linux.connect(o.fd, o.addr, o.addr_len))) {
            .SUCCESS => return 0,
            .INTR => continue,
            .INPROGRESS => {
                o.started = true;
                return eagain;
            },
            else => |e| return -@as(i32, @intFromEnum(e)),
        };
    }
    var so_error: i32 = 0;
    var len: posix.socklen_t = @sizeOf(i32);
    const rc = linux.getsockopt(o.fd, linux.SOL.SOCKET, linux.SO.ERROR, @ptrCast(&so_error), &len);
    return switch (os.errno(rc)) {
        .SUCCESS => -so_error,
        else => |e| -@as(i32, @intFromEnum(e)),
    };
}

/// Runs a socket operation on a thread without a loop: tries it, and on `EAGAIN` blocks the
/// thread in `poll(2)` until the socket is ready or `deadline_ns` (CLOCK_MONOTONIC) passes.
/// Returns the result as `attempt` does, or null when the deadline passed first.
pub fn performBlocking(op: *Completion.Op, deadline_ns: ?u64) ?i32 {
    while (true) {
        const result = attempt(op);
        if (result != eagain) return result;
        var timeout_ms: i32 = -1;
        if (deadline_ns) |deadline| {
            const now_ns = os.monotonicNs();
            if (now_ns >= deadline) return null;
            const ms = std.math.divCeil(u64, deadline - now_ns, std.time.ns_per_ms) catch
                unreachable; // the divisor is not zero
            timeout_ms = @intCast(@min(ms, std.math.maxInt(i32)));
        }
        const events: i16 = @intCast(interest(op.*));
        var fds = [_]linux.pollfd{.{ .fd = op.fd(), .events = events, .revents = 0 }};
        switch (os.errno(linux.poll(&fds, 1, timeout_ms))) {
            // Ready, timed out or interrupted alike: the next attempt (or deadline) decides.
            .SUCCESS, .INTR, .AGAIN => {},
            .NOMEM => {},
            .FAULT, .INVAL => unreachable, // one pollfd on our own stack
            else => {},
        }
    }
}

const Loop = @import("Loop.zig");
const qemu = @import("../testing/qemu.zig");

fn testDone(c: *Completion) void {
    c.state = .idle;
}

/// Polls until `completions` are all idle again (bounded: the test fails rather than hangs).
fn testPollUntilIdle(loop: *Loop, completions: []const *Completion) !void {
    var polls: usize = 0;
    while (polls < 1000) : (polls += 1) {
        for (completions) |c| {
            if (c.state != .idle) break;
        } else return;
        _ = loop.poll(10 * std.time.ns_per_ms);
    }
    return error.TestTimedOut;
}

fn testSocket() !os.fd_t {
    const flags = linux.SOCK.STREAM | linux.SOCK.CLOEXEC | linux.SOCK.NONBLOCK;
    const rc = linux.socket(linux.AF.INET, flags, 0);
    try std.testing.expectEqual(linux.E.SUCCESS, os.errno(rc));
    return @intCast(rc);
}

fn testSocketOps(choice: Loop.Choice) !void {
    var loop: Loop = undefined;
    try loop.init(choice);
    defer loop.deinit();

    const listener = try testSocket();
    defer os.closeFd(listener);
    var addr: linux.sockaddr.in = .{ .port = 0, .addr = std.mem.nativeToBig(u32, 0x7f00_0001) };
    var addr_len: posix.socklen_t = @sizeOf(linux.sockaddr.in);
    try std.testing.expectEqual(@as(usize, 0), linux.bind(listener, @ptrCast(&addr), addr_len));
    try std.testing.expectEqual(@as(usize, 0), linux.listen(listener, 8));
    const name_rc = linux.getsockname(listener, @ptrCast(&addr), &addr_len);
    try std.testing.expectEqual(@as(usize, 0), name_rc);

    // A pending accept is canceled with ECANCELED.
    var peer: linux.sockaddr.in = undefined;
    var peer_len: posix.socklen_t = @sizeOf(linux.sockaddr.in);
    const accept_op: Completion.Op = .{ .accept = .{
        .fd = listener,
        .addr = @ptrCast(&peer),
        .addr_len = &peer_len,
        .flags = linux.SOCK.CLOEXEC | linux.SOCK.NONBLOCK,
    } };
    var accept: Completion = .{ .op = accept_op, .callback = &testDone };
    loop.submit(&accept);
    _ = loop.poll(0);
    loop.cancel(&accept);
    try testPollUntilIdle(&loop, &.{&accept});
    try std.testing.expectEqual(linux.E.CANCELED, accept.err().?);

    // Accept and connect meet; bytes go through sendmsg and come out of recvmsg.
    const client = try testSocket();
    defer os.closeFd(client);
    accept = .{ .op = accept_op, .callback = &testDone };
    var connect: Completion = .{
        .op = .{ .connect = .{ .fd = client, .addr = @ptrCast(&addr), .addr_len = addr_len } },
        .callback = &testDone,
    };
    loop.submit(&accept);
    loop.submit(&connect);
    try testPollUntilIdle(&loop, &.{ &accept, &connect });
    try std.testing.expectEqual(@as(i32, 0), connect.result);
    try std.testing.expect(accept.result >= 0);
    const server: os.fd_t = accept.result;
    defer os.closeFd(server);

    var in_buffer: [16]u8 = undefined;
    var in_iov = [_]posix.iovec{.{ .base = &in_buffer, .len = in_buffer.len }};
    var in_msg: linux.msghdr = .{
        .name = null,
        .namelen = 0,
        .iov = &in_iov,
        .iovlen = 1,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    var recv: Completion = .{
        .op = .{ .recvmsg = .{ .fd = server, .msg = &in_msg, .flags = 0 } },
        .callback = &testDone,
    };
    loop.submit(&recv); // nothing to read yet: it waits
    _ = loop.poll(0);
    const out_iov = [_]posix.iovec_const{.{ .base = "hello", .len = 5 }};
    const out_msg: linux.msghdr_const = .{
        .name = null,
        .namelen = 0,
        .iov = &out_iov,
        .iovlen = 1,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    var send: Completion = .{
        .op = .{ .sendmsg = .{ .fd = client, .msg = &out_msg, .flags = linux.MSG.NOSIGNAL } },
        .callback = &testDone,
    };
    loop.submit(&send);
    try testPollUntilIdle(&loop, &.{ &send, &recv });
    try std.testing.expectEqual(@as(i32, 5), send.result);
    try std.testing.expectEqual(@as(i32, 5), recv.result);
    try std.testing.expectEqualStrings("hello", in_buffer[0..5]);

    // The same with the one-buffer `recv` and `send`, the other way round.
    var plain_recv: Completion = .{
        .op = .{ .recv = .{ .fd = client, .buffer = &in_buffer, .flags = 0 } },
        .callback = &testDone,
    };
    loop.submit(&plain_recv); // nothing to read yet: it waits
    _ = loop.poll(0);
    var plain_send: Completion = .{
        .op = .{ .send = .{ .fd = server, .buffer = "weft!!", .flags = linux.MSG.NOSIGNAL } },
        .callback = &testDone,
    };
    loop.submit(&plain_send);
    try testPollUntilIdle(&loop, &.{ &plain_send, &plain_recv });
    try std.testing.expectEqual(@as(i32, 6), plain_send.result);
    try std.testing.expectEqual(@as(i32, 6), plain_recv.result);
    try std.testing.expectEqualStrings("weft!!", in_buffer[0..6]);

    // A `recv` waiting for bytes is canceled with ECANCELED, and its buffer is untouched.
    in_buffer[0] = 'x';
    plain_recv = .{
        .op = .{ .recv = .{ .fd = client, .buffer = &in_buffer, .flags = 0 } },
        .callback = &testDone,
    };
    loop.submit(&plain_recv);
    _ = loop.poll(0);
    loop.cancel(&plain_recv);
    try testPollUntilIdle(&loop, &.{&plain_recv});
    try std.testing.expectEqual(linux.E.CANCELED, plain_recv.err().?);
    try std.testing.expectEqual(@as(u8, 'x'), in_buffer[0]);
    try std.testing.expectEqual(@as(usize, 0), loop.inFlight());
}

test "Loop: io_uring accept, connect, sendmsg, recvmsg, send, recv, cancel" {
    try qemu.skipUnderQemu(.io_uring, @src());
    try testSocketOps(.io_uring);
}

test "Loop: epoll accept, connect, sendmsg, recvmsg, send, recv, cancel" {
    try testSocketOps(.epoll);
}
