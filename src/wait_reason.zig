//! What a parked task waits for, in one word: the task writes it before it parks (the reason
//! is an argument of `Task.prepareWait`) and a task dump reads it from any thread
//! (src/task_dump.zig). A kind and a 56-bit payload: an address, a deadline, or an I/O
//! operation and its descriptor.
//!
//! It sits at the bottom of the layers, importing nothing of weft's, because the code that
//! knows best what a wait is for cannot always reach the task: a `weft.Lane` (lanes/ sits
//! beside sched/, not above it) and weft.sync's primitives park through `io.futexWait`, as any
//! std.Io code does. They *label* the wait on the calling thread just before (`label`), and
//! weft's futex wait records the label in place of the bare futex address (`takeLabel`).
//!
//! A label lives in a thread-local from `label` to the futex wait that takes it, with no
//! switch in between (the wait takes it before it parks), so no other task can find it there;
//! the labeller clears it after the wait (`unlabel`) for the paths that never take it: a
//! value that already changed, a thread weft does not run, another `Io`.
const std = @import("std");
const assert = std.debug.assert;

/// The word itself: `kind` in the top byte.
pub const WaitReason = packed struct(u64) {
    payload: u56,
    kind: Kind,

    /// Not recorded (never written, or a wait that names nothing).
    pub const none: WaitReason = .{ .payload = 0, .kind = .none };

    /// A sleep until `deadline_ns` (CLOCK_MONOTONIC), kept in microseconds: 56 bits of them
    /// last two thousand years of uptime.
    pub fn sleep(deadline_ns: u64) WaitReason {
        const deadline_us = deadline_ns / std.time.ns_per_us;
        return .{ .payload = @intCast(@min(deadline_us, std.math.maxInt(u56))), .kind = .sleep };
    }

    /// A wait on the object at `address`, of a kind that has one (not `sleep` or `io`).
    pub fn at(kind: Kind, object: usize) WaitReason {
        assert(kind != .sleep and kind != .io and kind != .none);
        // User-space addresses fit in 56 bits on every 64-bit Linux (57-bit paging included).
        return .{ .payload = @truncate(object), .kind = kind };
    }

    /// An I/O operation (`op`, the tag of loop/Completion.zig's `Op`) on `fd`.
    pub fn io(op: u8, fd: i32) WaitReason {
        const fd_bits: u32 = @bitCast(fd);
        return .{ .payload = (@as(u56, op) << 32) | fd_bits, .kind = .io };
    }

    pub fn deadlineNs(reason: WaitReason) u64 {
        assert(reason.kind == .sleep);
        return @as(u64, reason.payload) *| std.time.ns_per_us;
    }

    pub fn address(reason: WaitReason) usize {
        return reason.payload;
    }

    pub fn ioOp(reason: WaitReason) u8 {
        assert(reason.kind == .io);
        return @truncate(reason.payload >> 32);
    }

    pub fn ioFd(reason: WaitReason) i32 {
        assert(reason.kind == .io);
        return @bitCast(@as(u32, @truncate(reason.payload)));
    }
};

/// What a task waits for. The names are the task dump's `state` values (docs/TASK_DUMP.md).
pub const Kind = enum(u8) {
    none,
    /// `io.sleep`: the payload is the deadline.
    sleep,
    /// A futex word nobody labelled (std's Mutex, Condition, ... and weft.sync's Barrier,
    /// WaitGroup, OnceCell and Oneshot): its address.
    futex,
    /// An I/O operation on the executor's loop: the operation and its descriptor.
    io,
    /// `Future.await` or `cancel`: the awaited task.
    await,
    /// `Group.await` or `cancel`: the group's state.
    group,
    /// A job on a `weft.Lane` (and the runtime's own: files, `compute`): the lane.
    lane,
    /// `weft.sync.Channel`: sending on a full one, receiving from an empty one (the address
    /// of the side's wait queue, inside the channel).
    channel_send,
    channel_recv,
    /// `weft.sync.Semaphore`, `Notify`, `RwLock`, and the other waits on a weft.sync wait
    /// queue (`Registry`, `Broadcast`, `Watch`): the queue.
    semaphore,
    notify,
    rwlock,
    sync,
    /// `weft.sync.select`: its selector word.
    select,
};

threadlocal var label_word: u64 = 0;

/// Names the futex wait the calling thread makes next (see the top of the file). Clear it
/// with `unlabel` after that wait.
pub fn label(kind: Kind, object: usize) void {
    label_word = @bitCast(WaitReason.at(kind, object));
}

/// Clears a label that no futex wait took.
pub fn unlabel() void {
    label_word = 0;
}

/// The calling thread's label, which it then no longer has; null when there is none.
pub fn takeLabel() ?WaitReason {
    const word = label_word;
    if (word == 0) return null;
    label_word = 0;
    return @bitCast(word);
}

test "WaitReason: payloads round-trip; a label is taken once" {
    const reason: WaitReason = .io(7, -1);
    try std.testing.expectEqual(@as(u8, 7), reason.ioOp());
    try std.testing.expectEqual(@as(i32, -1), reason.ioFd());
    const deadline_ns = 1_234_567_000;
    try std.testing.expectEqual(@as(u64, deadline_ns), WaitReason.sleep(deadline_ns).deadlineNs());
    const object: usize = 0x7fff_1234_5678;
    try std.testing.expectEqual(object, WaitReason.at(.futex, object).address());
    try std.testing.expectEqual(@as(?WaitReason, null), takeLabel());
    label(.lane, 0x1000);
    const taken = takeLabel().?;
    try std.testing.expectEqual(Kind.lane, taken.kind);
    try std.testing.expectEqual(@as(usize, 0x1000), taken.address());
    try std.testing.expectEqual(@as(?WaitReason, null), takeLabel());
}
