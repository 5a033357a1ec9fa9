//! The completion loop of one executor: submit operations, wait for their completions with a
//! timeout, be woken from other threads. The backend is chosen when the loop is created.
//!
//! Completions are reaped into a queue first and their callbacks run afterwards, so a callback
//! never runs inside the reap loop and never recursively inside another callback.
//!
//! ## Rescue
//!
//! A loop belongs to one thread, but that thread may be held by one task for a long time (a
//! computation that should have gone to a lane; see docs/STALLS.md). Meanwhile another thread
//! may reap the completions the kernel has posted (`rescue`) and hand each to a `claim`
//! function, which delivers it from there or leaves it to the loop's thread. `reap_lock`
//! serialises the two: the loop's thread holds it in `submit`, `cancel` and `poll`, a rescuer
//! only tries it. An io_uring ring needs its own thread's help as well, since only that thread
//! may enter the kernel for it: submissions wait in the queue until it does, and with
//! `DEFER_TASKRUN` so do completions. A signal handler on that thread (sched/Watchdog.zig)
//! calls `postDeferred`, which submits what is queued and posts what is held back, unless the
//! interrupted code holds `reap_lock`: it may be halfway through filling the queue.
const Loop = @This();

const std = @import("std");
const assert = std.debug.assert;
const Counter = @import("../os/Counter.zig");
const SpinLock = @import("../os/SpinLock.zig");
pub const Completion = @import("Completion.zig");
pub const IoUringBackend = @import("backend/io_uring.zig");
pub const EpollBackend = @import("backend/epoll.zig");

backend: union(Kind) {
    io_uring: IoUringBackend,
    epoll: EpollBackend,
},
/// `backend`'s tag, kept apart: reading the union through a pointer takes a copy of the whole
/// backend (its reap buffer included) in Debug builds, which races with the loop's thread when
/// another thread reads (a rescuer; `supports` on any executor's loop).
backend_kind: Kind = undefined,
/// True while the owning thread is (about to be) blocked in `poll`; a waker that clears it
/// pays for the eventfd write, every other waker knows the loop will look on its own.
sleeping: std.atomic.Value(bool) = .init(false),
reaped: Completion.Queue = .{},
/// The backend's eventfd, copied here so that other threads can wake the loop without reading
/// `backend` (whose reap buffer the owning thread writes while they do).
wake_fd: std.posix.fd_t = -1,
/// For `weft.Metrics`. Written by the loop's thread, except `wakeups` (by any waker).
counters: Counters = .{},
/// Serialises reaping between the loop's thread and a rescuer (see "Rescue" above).
reap_lock: SpinLock = .{},
/// Guarded by `reap_lock`: completions a rescue reaped but left to the loop's thread (its
/// `claim` declined them), for its next `poll`.
rescued: Completion.Queue = .{},
/// Operations submitted whose completion the loop's thread has not reaped yet (the wake-up read
/// excluded). Written by the loop's thread; atomic because a rescuer reads it.
in_flight: std.atomic.Value(usize) = .init(0),
/// Guarded by `reap_lock`: operations a rescue reaped since the thread's last poll, which that
/// poll takes off `in_flight`. Atomic: `pendingRescue` reads it unlocked.
rescued_count: std.atomic.Value(usize) = .init(0),
/// Guarded by `reap_lock`: a rescue took the wake-up meant for the thread (read its eventfd),
/// so the thread's next poll must not block, and io_uring's re-arms the wake-up read.
rescued_wake: bool = false,

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
pub const Choice = @import("../options.zig").LoopChoice;

pub const InitError = IoUringBackend.InitError || EpollBackend.InitError;

/// Initialises the loop in place (it must not move afterwards: the kernel holds pointers into it).
pub fn init(loop: *Loop, choice: Choice) InitError!void {
    loop.* = .{ .backend = undefined };
    switch (choice) {
        .io_uring, .auto => {
            loop.backend = .{ .io_uring = undefined };
            if (IoUringBackend.init(&loop.backend.io_uring)) |_| {
                loop.backend_kind = .io_uring;
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
    loop.backend_kind = .epoll;
    loop.wake_fd = loop.backend.epoll.wake_fd;
}

pub fn deinit(loop: *Loop) void {
    assert(loop.rescued.isEmpty());
    // An epoll operation still waiting would be left in its descriptor's watch list.
    if (loop.kind() == .epoll) assert(loop.pendingRescue() == 0);
    switch (loop.backend) {
        inline else => |*backend| backend.deinit(),
    }
    loop.* = undefined;
}

pub fn kind(loop: *const Loop) Kind {
    return loop.backend_kind;
}

/// Operations submitted whose completion has not been reaped yet.
pub fn inFlight(loop: *const Loop) usize {
    return loop.in_flight.load(.monotonic);
}

/// Whether this loop runs operations of kind `tag` asynchronously. Readiness operations (I/O
/// on sockets, pipes, terminals) always; file system and process operations only on io_uring,
/// and only those the kernel implements. Callers run the others elsewhere.
pub fn supports(loop: *const Loop, tag: Completion.Op.Tag) bool {
    return switch (loop.kind()) {
        .io_uring => loop.backend.io_uring.supports(tag),
        .epoll => loop.backend.epoll.supports(tag),
    };
}

/// Starts `completion`. Its callback runs from a later `poll` on this thread.
pub fn submit(loop: *Loop, completion: *Completion) void {
    assert(completion.state == .idle);
    assert(completion.next == null);
    completion.state = .submitted;
    loop.counters.submitted.increment();
    loop.in_flight.store(loop.in_flight.load(.monotonic) + 1, .monotonic);
    loop.reap_lock.lock();
    defer loop.reap_lock.unlock();
    switch (loop.backend) {
        inline else => |*backend| backend.submit(completion),
    }
}

/// Asks the kernel to stop `completion` early. Its callback still runs, exactly once, with
/// `-ECANCELED` or with the result it reached before the cancel took effect.
pub fn cancel(loop: *Loop, completion: *Completion) void {
    if (completion.state != .submitted) return;
    loop.counters.canceled.increment();
    loop.reap_lock.lock();
    defer loop.reap_lock.unlock();
    switch (loop.backend) {
        inline else => |*backend| backend.cancel(completion),
    }
}

/// Before `fd` is closed, on the loop's thread: the operations of this loop waiting on it end
/// with `-ECANCELED`, and the epoll backend forgets its registration, so that the number,
/// when reused, starts clean (see "Descriptors closed under a registration" in
/// backend/epoll.zig). Nothing to do on io_uring, whose operations hold their file.
pub fn forget(loop: *Loop, fd: std.posix.fd_t) void {
    if (loop.kind() != .epoll) return;
    loop.reap_lock.lock();
    defer loop.reap_lock.unlock();
    loop.backend.epoll.forget(fd);
}

/// Waits up to `timeout_ns` (null: no limit, 0: do not wait) for completions and runs their
/// callbacks. Returns the number of callbacks run.
pub fn poll(loop: *Loop, timeout_ns: ?u64) usize {
    assert(loop.reaped.isEmpty());
    loop.reap_lock.lock();
    var wait_ns = timeout_ns;
    if (loop.rescued_count.load(.monotonic) > 0 or loop.rescued_wake) {
        @branchHint(.unlikely);
        // What a rescue reaped is ours to finish: its operations leave the in-flight count,
        // those it declined run below, and a wake-up it took ends this wait at once.
        loop.reaped.pushAll(&loop.rescued);
        if (!loop.reaped.isEmpty() or loop.rescued_wake) wait_ns = 0;
        loop.takeOffInFlight(loop.rescued_count.load(.monotonic));
        if (loop.rescued_wake) switch (loop.backend) {
            .io_uring => |*backend| backend.armWake(),
            .epoll => {},
        };
        loop.rescued_count.store(0, .monotonic);
        loop.rescued_wake = false;
    }
    // Held across a blocking wait, against `SpinLock`'s rule: only a rescuer contends, and it
    // only tries the lock (a thread waiting in its poll is not held by a task anyway).
    const found = switch (loop.backend) {
        inline else => |*backend| backend.poll(wait_ns, &loop.reaped),
    };
    loop.takeOffInFlight(found.completions);
    loop.reap_lock.unlock();
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

fn takeOffInFlight(loop: *Loop, count: usize) void {
    const in_flight = loop.in_flight.load(.monotonic);
    assert(in_flight >= count);
    loop.in_flight.store(in_flight - count, .monotonic);
}

/// What `rescue` did.
pub const Rescue = struct {
    /// Completions the claim delivered.
    claimed: usize = 0,
    /// Completions reaped and left to the loop's thread.
    declined: usize = 0,
};

/// From a thread other than the loop's, while the loop's thread is held by one task: reaps
/// the completions the kernel has posted and offers each to `claim`, which either delivers it
/// from here (returns true: it ran what the callback would have, the completion is `idle`
/// again) or declines it (false: the loop's thread runs its callback at its next poll). Null
/// when the loop's thread is using the loop right now. Entering no kernel code of io_uring's
/// (see "Rescue" above), it finds only what was posted: on a `DEFER_TASKRUN` ring, after the
/// ring's thread ran `postDeferred`.
pub fn rescue(loop: *Loop, claim: *const fn (completion: *Completion) bool) ?Rescue {
    if (!loop.reap_lock.tryLock()) return null;
    defer loop.reap_lock.unlock();
    var reaped: Completion.Queue = .{};
    const found = switch (loop.backend) {
        .io_uring => |*backend| backend.reapPosted(&reaped, .rescuer),
        .epoll => |*backend| backend.reapReady(0, &reaped, .rescuer),
    };
    if (found.woken) loop.rescued_wake = true;
    const rescued = loop.rescued_count.load(.monotonic);
    loop.rescued_count.store(rescued + found.completions, .monotonic);
    var result: Rescue = .{};
    while (reaped.pop()) |completion| {
        assert(completion.state == .submitted);
        if (claim(completion)) {
            result.claimed += 1;
        } else {
            loop.rescued.push(completion);
            result.declined += 1;
        }
    }
    return result;
}

/// Whether the loop's thread must be interrupted (`postDeferred`) before a rescue can find
/// everything: it has queued operations it did not submit, or the kernel holds completions
/// back for it (io_uring). Null when the thread is using the loop right now. From another
/// thread.
pub fn needsPost(loop: *Loop) ?bool {
    if (!loop.reap_lock.tryLock()) return null;
    defer loop.reap_lock.unlock();
    return switch (loop.backend) {
        .io_uring => |*backend| backend.needsPost(),
        .epoll => false,
    };
}

/// Operations in flight that a rescue has not reaped yet: what a rescue may still find.
/// Thread-safe; a snapshot.
pub fn pendingRescue(loop: *const Loop) usize {
    return loop.inFlight() -| loop.rescued_count.load(.monotonic);
}

/// On the loop's thread, in a signal handler that interrupted a task holding it: submits the
/// operations queued on an io_uring ring and has the kernel post the completions it holds back
/// for this thread (`IoUringBackend.postDeferred`), for a `rescue` to find. Submits nothing if
/// the interrupted code was using the loop (`reap_lock` held: only this thread takes it while
/// a rescuer waits for this handler). Nothing to do on epoll, whose readiness any thread reads.
pub fn postDeferred(loop: *Loop) void {
    switch (loop.backend) {
        .io_uring => |*backend| backend.postDeferred(!loop.reap_lock.isLocked()),
        .epoll => {},
    }
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

fn testRescue(choice: Choice) !void {
    var loop: Loop = undefined;
    try loop.init(choice);
    defer loop.deinit();
    var fds: [2]i32 = undefined;
    try std.testing.expectEqual(@as(usize, 0), std.os.linux.pipe2(&fds, .{ .CLOEXEC = true }));
    defer for (fds) |fd| {
        _ = std.os.linux.close(fd);
    };
    const Context = struct {
        var callbacks: u32 = 0;
        var claims: u32 = 0;

        fn done(c: *Completion) void {
            c.state = .idle;
            callbacks += 1;
        }
        fn accept(c: *Completion) bool {
            c.state = .idle;
            claims += 1;
            return true;
        }
        fn decline(c: *Completion) bool {
            _ = c;
            return false;
        }
        /// Rescues from another thread, as the watchdog does.
        fn rescueFrom(l: *Loop, claim: *const fn (*Completion) bool, out: *?Rescue) void {
            out.* = l.rescue(claim);
        }
        fn rescueOnThread(l: *Loop, claim: *const fn (*Completion) bool) !?Rescue {
            var out: ?Rescue = null;
            const thread = try std.Thread.spawn(.{}, rescueFrom, .{ l, claim, &out });
            thread.join();
            return out;
        }
    };
    var buffer: [8]u8 = undefined;
    const iovecs = [_]std.posix.iovec{.{ .base = &buffer, .len = buffer.len }};
    const read_op: Completion.Op = .{
        .read = .{ .fd = fds[0], .iovecs = &iovecs, .offset = null },
    };
    for ([_]bool{ true, false }) |claimed| {
        Context.callbacks = 0;
        Context.claims = 0;
        var read: Completion = .{ .op = read_op, .callback = &Context.done };
        loop.submit(&read);
        // io_uring: submitted only when this thread enters the kernel; a rescuer must ask.
        try std.testing.expectEqual(@as(?bool, choice == .io_uring), loop.needsPost());
        try std.testing.expectEqual(@as(usize, 3), std.os.linux.write(fds[1], "abc", 3));
        // What the watchdog's signal has the loop's thread do on io_uring; then another
        // thread reaps: it finds the completion, waiting until the read has run.
        loop.postDeferred();
        const claim = if (claimed) &Context.accept else &Context.decline;
        var rescue_result: Rescue = .{};
        for (0..1000) |_| {
            rescue_result = (try Context.rescueOnThread(&loop, claim)).?;
            if (rescue_result.claimed + rescue_result.declined > 0) break;
            std.Thread.yield() catch {};
            loop.postDeferred();
        }
        try std.testing.expectEqual(@as(usize, @intFromBool(claimed)), rescue_result.claimed);
        try std.testing.expectEqual(@as(usize, @intFromBool(!claimed)), rescue_result.declined);
        try std.testing.expectEqual(@as(usize, 0), loop.pendingRescue());
        // The loop's next poll runs a declined completion's callback, once, and a claimed
        // one's never; either way the operation has left the in-flight count.
        _ = loop.poll(0);
        try std.testing.expectEqual(@as(u32, @intFromBool(!claimed)), Context.callbacks);
        try std.testing.expectEqual(@as(u32, @intFromBool(claimed)), Context.claims);
        try std.testing.expectEqual(@as(usize, 0), loop.inFlight());
        try std.testing.expectEqual(@as(i32, 3), read.result);
        try std.testing.expectEqual(Completion.State.idle, read.state);
        read.next = null;
    }

    // While the loop's thread holds the loop, a rescue gives way.
    loop.reap_lock.lock();
    const given_way = try Context.rescueOnThread(&loop, &Context.decline);
    try std.testing.expectEqual(@as(?Rescue, null), given_way);
    loop.reap_lock.unlock();

    // A wake-up a rescue took is not lost: the next poll does not wait for another.
    loop.wake();
    loop.postDeferred();
    for (0..1000) |_| {
        _ = (try Context.rescueOnThread(&loop, &Context.decline)).?;
        if (loop.rescued_wake) break;
        std.Thread.yield() catch {};
        loop.postDeferred();
    }
    try std.testing.expect(loop.rescued_wake);
    const start_ns = @import("../os/linux.zig").monotonicNs();
    _ = loop.poll(std.time.ns_per_s);
    const waited_ns = @import("../os/linux.zig").monotonicNs() - start_ns;
    try std.testing.expect(waited_ns < std.time.ns_per_s / 2);
    // And the wake-up still works afterwards (io_uring re-armed its read).
    const thread = try std.Thread.spawn(.{}, wake, .{&loop});
    _ = loop.poll(null);
    thread.join();
}

test "Loop: an epoll rescue writes what fits in a blocking pipe and does not block" {
    try @import("../testing/qemu.zig").skipUnderQemu(.nowait, @src());
    var loop: Loop = undefined;
    try loop.init(.epoll);
    defer loop.deinit();
    var fds: [2]i32 = undefined;
    try std.testing.expectEqual(@as(usize, 0), std.os.linux.pipe2(&fds, .{ .CLOEXEC = true }));
    defer for (fds) |fd| {
        _ = std.os.linux.close(fd);
    };
    // A blocking pipe with 8 KiB of room (64 KiB by default) and a 32 KiB write waiting: epoll
    // calls it writable, and a plain `writev` would write 8 KiB and then block its thread.
    const capacity = std.os.linux.fcntl(fds[1], std.os.linux.F.GETPIPE_SZ, 0);
    try std.testing.expectEqual(@as(usize, 64 * 1024), capacity);
    const filler: [56 * 1024]u8 = @splat('f');
    try std.testing.expectEqual(filler.len, std.os.linux.write(fds[1], &filler, filler.len));
    const payload: [32 * 1024]u8 = @splat('p');
    const iovecs = [_]std.posix.iovec_const{.{ .base = &payload, .len = payload.len }};
    const Context = struct {
        fn done(c: *Completion) void {
            c.state = .idle;
        }
        fn decline(c: *Completion) bool {
            _ = c;
            return false;
        }
        fn rescueFrom(l: *Loop, out: *?Rescue) void {
            out.* = l.rescue(&decline);
        }
    };
    var write: Completion = .{
        .op = .{ .write = .{ .fd = fds[1], .iovecs = &iovecs, .offset = null } },
        .callback = &Context.done,
    };
    loop.submit(&write);
    var rescued: ?Rescue = null;
    const thread = try std.Thread.spawn(.{}, Context.rescueFrom, .{ &loop, &rescued });
    thread.join();
    try std.testing.expectEqual(@as(usize, 1), rescued.?.declined);
    _ = loop.poll(0);
    try std.testing.expectEqual(Completion.State.idle, write.state);
    try std.testing.expectEqual(@as(i32, 8 * 1024), write.result);
}

test "Loop: io_uring rescue from another thread, claimed or left to the loop's thread" {
    try @import("../testing/qemu.zig").skipUnderQemu(.io_uring, @src());
    try testRescue(.io_uring);
}

test "Loop: epoll rescue from another thread, claimed or left to the loop's thread" {
    try @import("../testing/qemu.zig").skipUnderQemu(.nowait, @src());
    try testRescue(.epoll);
}
