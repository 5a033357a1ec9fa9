//! The epoll backend's table of the descriptors one loop watches: for each, the completions
//! waiting on it (reads and writes alike) and the generation of its registration in the loop's
//! epoll set. One registration per descriptor and loop, whatever waits on it, so a connection
//! costs no descriptor beyond its socket (see backend/epoll.zig).
//!
//! Indexed by descriptor number, in chunks of 256 entries (one page) mapped when a descriptor
//! in their range is first watched and kept until the loop ends. Linux hands out descriptors
//! lowest first, so a loop's table is as large as the highest descriptor it waited on: 16
//! bytes per descriptor. Rejected: a hash map (a hash and a probe per wait, and a resize under
//! load), and one flat array sized by RLIMIT_NOFILE (its hard limit reaches 2^20 and more,
//! reserved per loop and counted against RLIMIT_AS, and the soft limit may be raised later).
//!
//! Not thread-safe: the loop's reap lock guards it (epoll.zig runs under it).
const Watches = @This();

const std = @import("std");
const assert = std.debug.assert;
const Completion = @import("../Completion.zig");
const nonblocking = @import("../nonblocking.zig");

/// Chunk `i` holds the entries of descriptors `i * chunk_entries ..`; null until one of them
/// is watched. Grows (doubling) when a higher descriptor is watched.
chunks: []?*Chunk = &.{},

pub const Watch = struct {
    /// The completions waiting on the descriptor, linked through `Completion.next`, most
    /// recent first.
    waiters: ?*Completion = null,
    /// The generation of the descriptor's registration in the epoll set (carried in each of
    /// its events), or 0 while the backend knows of none.
    generation: u32 = 0,
    /// The union of the waiters' interests (EPOLL bits); 0 when none waits.
    interest: u32 = 0,

    pub fn push(watch: *Watch, completion: *Completion) void {
        assert(completion.next == null);
        completion.next = watch.waiters;
        watch.waiters = completion;
        watch.interest |= nonblocking.interest(completion.op);
    }

    /// Takes `completion` off the list; false if it was not on it.
    pub fn remove(watch: *Watch, completion: *Completion) bool {
        var link: *?*Completion = &watch.waiters;
        var found = false;
        var interest: u32 = 0;
        while (link.*) |waiter| {
            if (waiter == completion) {
                link.* = waiter.next;
                waiter.next = null;
                found = true;
                continue;
            }
            interest |= nonblocking.interest(waiter.op);
            link = &waiter.next;
        }
        watch.interest = interest;
        assert(found or completion.next == null);
        return found;
    }

    /// Empties the list and returns its first waiter (the rest follow through `next`).
    pub fn takeAll(watch: *Watch) ?*Completion {
        const first = watch.waiters;
        watch.waiters = null;
        watch.interest = 0;
        return first;
    }
};

const chunk_entries = std.heap.page_size_min / @sizeOf(Watch);
const Chunk = [chunk_entries]Watch;

comptime {
    // A chunk is one page: the page allocator maps exactly what it asks for.
    assert(@sizeOf(Watch) == 16);
    assert(@sizeOf(Chunk) == std.heap.page_size_min);
}

/// Frees the table. No completion may still wait: its task would never be resumed.
pub fn deinit(watches: *Watches) void {
    const gpa = std.heap.page_allocator;
    for (watches.chunks) |maybe_chunk| {
        const chunk = maybe_chunk orelse continue;
        for (chunk) |watch| assert(watch.waiters == null);
        gpa.destroy(chunk);
    }
    if (watches.chunks.len > 0) gpa.free(watches.chunks);
    watches.* = undefined;
}

/// The entry of `fd`, or null if no descriptor of its chunk was ever watched (so neither
/// was `fd`).
pub fn find(watches: *const Watches, fd: i32) ?*Watch {
    assert(fd >= 0);
    const index: usize = @intCast(fd);
    const chunk_index = index / chunk_entries;
    if (chunk_index >= watches.chunks.len) return null;
    const chunk = watches.chunks[chunk_index] orelse return null;
    return &chunk[index % chunk_entries];
}

/// The entry of `fd`, made (empty) if it has none yet. Allocates a page the first time a
/// descriptor of its chunk is watched, and grows the chunk index past the highest one.
pub fn obtain(watches: *Watches, fd: i32) error{OutOfMemory}!*Watch {
    if (watches.find(fd)) |watch| return watch;
    const gpa = std.heap.page_allocator;
    const index: usize = @intCast(fd);
    const chunk_index = index / chunk_entries;
    if (chunk_index >= watches.chunks.len) {
        const len = @max(std.math.ceilPowerOfTwoAssert(usize, chunk_index + 1), 64);
        const chunks = try gpa.alloc(?*Chunk, len);
        @memcpy(chunks[0..watches.chunks.len], watches.chunks);
        @memset(chunks[watches.chunks.len..], null);
        if (watches.chunks.len > 0) gpa.free(watches.chunks);
        watches.chunks = chunks;
    }
    assert(watches.chunks[chunk_index] == null);
    const chunk = try gpa.create(Chunk);
    chunk.* = @splat(.{});
    watches.chunks[chunk_index] = chunk;
    return &chunk[index % chunk_entries];
}

fn testNoop(_: *Completion) void {}

test "Watches: entries by descriptor, sparse chunks, waiters and their interest" {
    var watches: Watches = .{};
    defer watches.deinit();
    try std.testing.expect(watches.find(3) == null);
    const low = try watches.obtain(3);
    try std.testing.expectEqual(low, watches.find(3).?);
    try std.testing.expect(watches.find(100_000) == null);
    const high = try watches.obtain(100_000);
    try std.testing.expect(high != low);
    // The chunk index grew; the low entry stayed where it was.
    try std.testing.expectEqual(low, watches.find(3).?);
    try std.testing.expectEqual(high, watches.find(100_000).?);
    try std.testing.expect(watches.find(50_000) == null);

    // Polls for POLLIN and for POLLOUT on one descriptor: a reader and a writer.
    var read: Completion = .{
        .op = .{ .poll = .{ .fd = 3, .events = 1 } },
        .callback = &testNoop,
    };
    var write: Completion = .{
        .op = .{ .poll = .{ .fd = 3, .events = 4 } },
        .callback = &testNoop,
    };
    low.push(&read);
    low.push(&write);
    try std.testing.expectEqual(@as(u32, 5), low.interest);
    // Removing one leaves the other, and the union shrinks to what is left.
    try std.testing.expect(low.remove(&read));
    try std.testing.expect(!low.remove(&read));
    try std.testing.expectEqual(@as(u32, 4), low.interest);
    try std.testing.expectEqual(&write, low.waiters.?);
    try std.testing.expectEqual(&write, low.takeAll().?);
    try std.testing.expectEqual(@as(u32, 0), low.interest);
    write.next = null;
    try std.testing.expect(low.waiters == null);
}
