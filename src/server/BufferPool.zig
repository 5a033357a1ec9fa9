//! The buffers a worker's connections hold only while a request is under way, so that a
//! connection waiting for its next request holds none (`Worker.Connection.takeBuffer`).
//!
//! Each buffer is a mapping of its own, `config.server_buffer_bytes`, and only the pages a
//! request touched are resident. Free buffers are kept, most recently given back first,
//! because a keep-alive server takes one per request: reusing one costs a lock and two
//! stores, mapping one a system call and page faults. The pool gives back what a burst left:
//! `trim` unmaps the free buffers that no `take` needed since the previous `trim` (the least
//! the free list held over that time), keeping `config.server_buffers_hot`. The worker's
//! reaper trims at each sweep, so a burst's buffers are unmapped within two sweeps of its end.
//!
//! Rejected: buffers from the worker's allocator. A general-purpose allocator keeps freed
//! memory for reuse (std's SmpAllocator never unmaps a size class this small), so the memory
//! of 10,000 connections that each sent one request at the same moment would stay resident.
//! Rejected: `MADV_DONTNEED` on free buffers kept mapped, which keeps the address space and
//! one mapping per buffer for good; unmapping costs the same system call and keeps neither.
const BufferPool = @This();

const std = @import("std");
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/host.zig");
const SpinLock = @import("../os/SpinLock.zig");

/// Guards every field: taken by connection tasks on any executor and by the reaper, for a
/// few stores each (the mapping and unmapping happen outside it).
lock: SpinLock = .{},
/// Free buffers, the most recently given back first, linked through their first bytes.
free: ?*Free = null,
free_count: u32 = 0,
/// The least `free_count` has been since the last `trim`: that many free buffers were not
/// needed the whole time.
free_low: u32 = 0,
/// Buffers mapped: held by connections or free.
mapped_count: u32 = 0,

pub const buffer_bytes = config.server_buffer_bytes;
pub const Buffer = *align(std.heap.page_size_min) [buffer_bytes]u8;

const Free = struct {
    next: ?*Free,
};

comptime {
    assert(buffer_bytes % std.heap.page_size_min == 0);
    assert(@sizeOf(Free) <= buffer_bytes);
}

pub const TakeError = error{
    /// No free buffer, and the kernel refused a new mapping.
    SystemResources,
};

/// A buffer, free or new; its contents are undefined. Give it back with `give`.
pub fn take(pool: *BufferPool) TakeError!Buffer {
    pool.lock.lock();
    if (pool.free) |free| {
        pool.free = free.next;
        pool.free_count -= 1;
        pool.free_low = @min(pool.free_low, pool.free_count);
        pool.lock.unlock();
        return @ptrCast(@alignCast(free));
    }
    pool.mapped_count += 1;
    pool.lock.unlock();
    const memory = os.mapAnonymous(buffer_bytes) catch |err| {
        pool.lock.lock();
        pool.mapped_count -= 1;
        pool.lock.unlock();
        return switch (err) {
            error.SystemResources => error.SystemResources,
            error.Unexpected => error.SystemResources,
        };
    };
    return memory[0..buffer_bytes];
}

/// Returns a buffer `take` handed out. Its pages stay resident until a `trim` unmaps it.
pub fn give(pool: *BufferPool, buffer: Buffer) void {
    const free: *Free = @ptrCast(buffer);
    pool.lock.lock();
    defer pool.lock.unlock();
    assert(pool.free_count < pool.mapped_count);
    free.next = pool.free;
    pool.free = free;
    pool.free_count += 1;
}

/// Unmaps the free buffers beyond `hot_count` that no `take` needed since the previous call;
/// returns how many.
pub fn trim(pool: *BufferPool, hot_count: u32) u32 {
    var released: ?*Free = null;
    var released_count: u32 = 0;
    {
        pool.lock.lock();
        defer pool.lock.unlock();
        assert(pool.free_low <= pool.free_count);
        const excess = pool.free_low -| hot_count;
        while (released_count < excess) : (released_count += 1) {
            const free = pool.free.?;
            pool.free = free.next;
            free.next = released;
            released = free;
        }
        pool.free_count -= released_count;
        pool.mapped_count -= released_count;
        pool.free_low = pool.free_count;
    }
    while (released) |free| {
        released = free.next;
        unmap(@ptrCast(@alignCast(free)));
    }
    return released_count;
}

/// Buffers held by connections now.
pub fn heldCount(pool: *BufferPool) u32 {
    pool.lock.lock();
    defer pool.lock.unlock();
    return pool.mapped_count - pool.free_count;
}

/// Buffers mapped now: held or free.
pub fn mappedCount(pool: *BufferPool) u32 {
    pool.lock.lock();
    defer pool.lock.unlock();
    return pool.mapped_count;
}

/// Unmaps every free buffer; returns how many were never given back (a caller's bug: they
/// stay mapped, as the caller may still be writing to them).
pub fn deinit(pool: *BufferPool) u32 {
    const kept = pool.mapped_count - pool.free_count;
    while (pool.free) |free| {
        pool.free = free.next;
        unmap(@ptrCast(@alignCast(free)));
    }
    pool.* = undefined;
    return kept;
}

fn unmap(buffer: Buffer) void {
    os.unmap(buffer);
}

test "BufferPool: a buffer given back is the next one taken" {
    var pool: BufferPool = .{};
    defer _ = pool.deinit();
    const first = try pool.take();
    first[buffer_bytes - 1] = 1; // mapped, writable to its end
    pool.give(first);
    const again = try pool.take();
    try std.testing.expectEqual(first, again);
    try std.testing.expectEqual(@as(u32, 1), pool.heldCount());
    pool.give(again);
    try std.testing.expectEqual(@as(u32, 0), pool.heldCount());
    try std.testing.expectEqual(@as(u32, 1), pool.mappedCount());
}

test "BufferPool: trim unmaps what a burst left once unused a whole period, down to the hot" {
    var pool: BufferPool = .{};
    defer _ = pool.deinit();
    var burst: [10]Buffer = undefined;
    for (&burst) |*buffer| buffer.* = try pool.take();
    for (burst) |buffer| pool.give(buffer);
    // Every buffer was taken since the last trim (the free list was empty): none goes yet.
    try std.testing.expectEqual(@as(u32, 0), pool.trim(3));
    try std.testing.expectEqual(@as(u32, 10), pool.mappedCount());
    // A period in which two were taken at once at most: those two stay beside the hot ones.
    const a = try pool.take();
    const b = try pool.take();
    pool.give(a);
    pool.give(b);
    try std.testing.expectEqual(@as(u32, 5), pool.trim(3));
    try std.testing.expectEqual(@as(u32, 5), pool.mappedCount());
    // A whole period untouched: down to the hot ones.
    try std.testing.expectEqual(@as(u32, 2), pool.trim(3));
    try std.testing.expectEqual(@as(u32, 3), pool.mappedCount());
    try std.testing.expectEqual(@as(u32, 0), pool.trim(3));
    try std.testing.expectEqual(@as(u32, 0), pool.heldCount());
}

test "BufferPool: held buffers are never trimmed" {
    var pool: BufferPool = .{};
    defer _ = pool.deinit();
    const held = try pool.take();
    held[0] = 7;
    try std.testing.expectEqual(@as(u32, 0), pool.trim(0));
    try std.testing.expectEqual(@as(u32, 0), pool.trim(0));
    try std.testing.expectEqual(@as(u8, 7), held[0]);
    pool.give(held);
    try std.testing.expectEqual(@as(u32, 0), pool.trim(0)); // free only since this period
    try std.testing.expectEqual(@as(u32, 1), pool.trim(0));
    try std.testing.expectEqual(@as(u32, 0), pool.mappedCount());
}

test "BufferPool: deinit counts the buffers never given back and leaves them mapped" {
    var pool: BufferPool = .{};
    const kept = try pool.take();
    pool.give(try pool.take()); // a second mapping, free at deinit
    try std.testing.expectEqual(@as(u32, 1), pool.deinit());
    kept[0] = 1; // still mapped
    unmap(kept);
}
