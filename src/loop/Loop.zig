//! The completion loop of one executor: submit operations, wait for their completions with a
//! timeout, be woken from other threads. The backend is chosen when the loop is created.
//!
//! Completions are reaped into a queue first and their callbacks run afterwards, so a callback
//! never runs inside the reap loop and never recursively inside another callback.
const Loop = @This();

const std = @import("std");
const assert = std.debug.assert;
const Counter = @import("../os/Counter.zig");
pub const Completion = @import("Completion.zig");
pub const IoUringBackend = @import("backend/io_uring.zig");
pub const EpollBackend = @import("backend/epoll.zig");

backend: union(Kind) {
    io_uring: IoUringBackend,
    epoll: EpollBackend,
},
/// True while the owning thread is (about to be) blocked in `poll`; a waker that clears it
/// pays for the eventfd write, every other waker knows the loop will look on its own.
sleeping: std.atomic.Value(bool) = .init(false),
reaped: Completion.Queue = .{},
/// The backend's eventfd, copied here so that other threads can wake the loop without reading
/// `backend` (whose reap buffer the owning thread writes while they do).
wake_fd: std.posix.fd_t = -1,
/// For `weft.Metrics`. Written by the loop's thread, except `wakeups` (by any waker).
counters: Counters = .{},

pub const Counters = struct {
    /// Operations started (`submit`).
    submitted: Counter = .{},
    /// Callbacks run: operations ended, whether they succeeded, failed or were canceled.
    completed: Counter = .{},
    /// Cancel requests sent to the kernel for operations still in flight.
    canceled: Counter = .{},
    /// Polls (`poll`), blocking or not.
    polls: Counter = .{},
    /// Wake-ups sent to the loop by other threads (`wake`), each an eventfd write.
    wakeups: Counter.Shared = .{},
};

pub const Kind = enum { io_uring, epoll };

/// `auto` takes io_uring and falls back to epoll where io_uring is unavailable.
pub const Choice = enum { auto, io_uring, epoll };

pub const InitError = IoUringBackend.InitError || EpollBackend.InitError;

/// Initialises the loop in place (it must not move afterwards: the kernel holds pointers into it).
pub fn init(loop: *Loop, choice: Choice) InitError!void {
    loop.* = .{ .backend = undefined };
    switch (choice) {
        .io_uring, .auto => {
            loop.backend = .{ .io_uring = undefined };
            if (IoUringBackend.init(&loop.backend.io_uring)) |_| {
                loop.wake_fd = loop.backend.io_uring.wake_fd;
                return;
            } else |err| switch (err) {
                error.Unsupported => if (choice == .io_uring) return err,
                else => return err,
            }
        },
        .epoll => {},
    }
    loop.backend = .{ .epoll = undefined };
    try EpollBackend.init(&loop.backend.epoll);
    loop.wake_fd = loop.backend.epoll.wake_fd;
}

pub fn deinit(loop: *Loop) void {
    switch (loop.backend) {
        inline else => |*backend| backend.deinit(),
    }
    loop.* = undefined;
}

pub fn kind(loop: *const Loop) Kind {
    return loop.backend;
}

/// Operations submitted whose completion has not been reaped yet.
pub fn inFlight(loop: *const Loop) usize {
    return switch (loop.backend) {
        inline else => |*backend| backend.in_flight,
    };
}

/// Whether this loop runs operations of kind `tag` asynchronously. Readiness operations (I/O
/// on sockets, pipes, terminals) always; file system and process operations only on io_uring,
/// and only those the kernel implements. Callers run the others elsewhere.
pub fn supports(loop: *const Loop, tag: Completion.Op.Tag) bool {
    return switch (loop.backend) {
        inline else => |*backend| backend.supports(tag),
    };
}

/// Starts `completion`. Its callback runs from a later `poll` on this thread.
pub fn submit(loop: *Loop, completion: *Completion) void {
    assert(completion.state == .idle);
    assert(completion.next == null);
    completion.state = .submitted;
    loop.counters.submitted.increment();
    switch (loop.backend) {
        inline else => |*backend| backend.submit(completion),
    }
}

/// Asks the kernel to stop `completion` early. Its callback still runs, exactly once, with
/// `-ECANCELED` or with the result it reached before the cancel took effect.
pub fn cancel(loop: *Loop, completion: *Completion) void {
    if (completion.state != .submitted) return;
    loop.counters.canceled.increment();
    switch (loop.backend) {
        inline else => |*backend| backend.cancel(completion),
    }
}

/// Waits up to `timeout_ns` (null: no limit, 0: do not wait) for completions and runs their
/// callbacks. Returns the number of callbacks run.
pub fn poll(loop: *Loop, timeout_ns: ?u64) usize {
    assert(loop.reaped.isEmpty());
    _ = switch (loop.backend) {
        inline else => |*backend| backend.poll(timeout_ns, &loop.reaped),
    };
    var count: usize = 0;
    while (loop.reaped.pop()) |completion| {
        assert(completion.state == .submitted);
        completion.state = .completed;
        count += 1;
        completion.callback(completion);
    }
    loop.counters.polls.increment();
    loop.counters.completed.add(count);
    return count;
}

/// Thread-safe: makes a blocked (or about to block) `poll` return.
pub fn wake(loop: *Loop) void {
    assert(loop.wake_fd >= 0);
    loop.counters.wakeups.increment();
    @import("../os/linux.zig").eventFdSignal(loop.wake_fd);
}

/// Thread-safe: wakes the loop only if its thread announced it is going to sleep.
pub fn notify(loop: *Loop) void {
    // seq_cst pairs with the store in the loop's own sleep protocol: either the loop sees the
    // waker's work before blocking, or the waker sees `sleeping` and writes the eventfd.
    if (loop.sleeping.load(.seq_cst) and loop.sleeping.swap(false, .seq_cst)) loop.wake();
}

fn testLoop(choice: Choice) !void {
    var loop: Loop = undefined;
    try loop.init(choice);
    defer loop.deinit();
    const kind_expected: Kind = if (choice == .epoll) .epoll else .io_uring;
    try std.testing.expectEqual(kind_expected, loop.kind());

    // A pipe read completes once the other end is written.
    var fds: [2]i32 = undefined;
    try std.testing.expectEqual(@as(usize, 0), std.os.linux.pipe2(&fds, .{ .CLOEXEC = true }));
    defer for (fds) |fd| {
        _ = std.os.linux.close(fd);
    };
    var buffer: [8]u8 = undefined;
    const iovecs = [_]std.posix.iovec{.{ .base = &buffer, .len = buffer.len }};
    const Context = struct {
        fn done(c: *Completion) void {
            c.state = .idle;
        }
    };
    var read: Completion = .{
        .op = .{ .read = .{ .fd = fds[0], .iovecs = &iovecs, .offset = null } },
        .callback = &Context.done,
    };
    loop.submit(&read);
    try std.testing.expectEqual(@as(usize, 0), loop.poll(0));
    try std.testing.expectEqual(@as(usize, 3), std.os.linux.write(fds[1], "abc", 3));
    try std.testing.expectEqual(@as(usize, 1), loop.poll(null));
    try std.testing.expectEqual(@as(i32, 3), read.result);
    try std.testing.expectEqualStrings("abc", buffer[0..3]);

    // A canceled read reports ECANCELED, exactly once.
    read.next = null;
    loop.submit(&read);
    _ = loop.poll(0);
    loop.cancel(&read);
    var polls: usize = 0;
    while (read.state != .idle and polls < 100) : (polls += 1) {
        _ = loop.poll(10 * std.time.ns_per_ms);
    }
    try std.testing.expectEqual(std.os.linux.E.CANCELED, read.err().?);
    try std.testing.expectEqual(@as(usize, 0), loop.inFlight());

    // A timeout with nothing to do returns after about the timeout.
    const start_ns = @import("../os/linux.zig").monotonicNs();
    _ = loop.poll(5 * std.time.ns_per_ms);
    const waited_ns = @import("../os/linux.zig").monotonicNs() - start_ns;
    try std.testing.expect(waited_ns >= 4 * std.time.ns_per_ms);

    // A wake from another thread interrupts an unbounded wait.
    const thread = try std.Thread.spawn(.{}, wake, .{&loop});
    _ = loop.poll(null);
    thread.join();
}

test "Loop: io_uring read, cancel, timeout, wake" {
    try @import("../testing/qemu.zig").skipUnderQemu(.io_uring, @src());
    try testLoop(.io_uring);
}

test "Loop: epoll read, cancel, timeout, wake" {
    try testLoop(.epoll);
}
