//! Deadlines of sleeping tasks: a binary min-heap of tasks keyed by `Task.timer_deadline_ns`.
//! Owned by one executor; not thread-safe. Each task is in it at most once and knows its
//! index, so removal (a canceled sleep) is O(log n).
const TimerHeap = @This();

const std = @import("std");
const assert = std.debug.assert;
const Task = @import("Task.zig");

gpa: std.mem.Allocator,
tasks: std.ArrayList(*Task) = .empty,

pub fn deinit(heap: *TimerHeap) void {
    assert(heap.tasks.items.len == 0);
    heap.tasks.deinit(heap.gpa);
}

pub fn isEmpty(heap: *const TimerHeap) bool {
    return heap.tasks.items.len == 0;
}

pub fn peekDeadline(heap: *const TimerHeap) ?u64 {
    if (heap.tasks.items.len == 0) return null;
    return heap.tasks.items[0].timer_deadline_ns;
}

pub fn insert(heap: *TimerHeap, task: *Task, deadline_ns: u64) std.mem.Allocator.Error!void {
    assert(task.timer_index == null);
    try heap.tasks.append(heap.gpa, task);
    task.timer_deadline_ns = deadline_ns;
    const index: u32 = @intCast(heap.tasks.items.len - 1);
    task.timer_index = index;
    heap.siftUp(index);
}

pub fn remove(heap: *TimerHeap, task: *Task) void {
    const index = task.timer_index.?;
    assert(heap.tasks.items[index] == task);
    const last = heap.tasks.pop().?;
    task.timer_index = null;
    if (last == task) return;
    heap.tasks.items[index] = last;
    last.timer_index = index;
    heap.siftUp(index);
    heap.siftDown(last.timer_index.?);
}

/// Fires every timer whose deadline is at or before `now_ns`: marks and wakes its task.
pub fn expire(heap: *TimerHeap, now_ns: u64) void {
    while (heap.tasks.items.len > 0) {
        const task = heap.tasks.items[0];
        if (task.timer_deadline_ns > now_ns) return;
        heap.remove(task);
        task.timer_fired = true;
        task.wake();
    }
}

fn less(heap: *const TimerHeap, a: u32, b: u32) bool {
    return heap.tasks.items[a].timer_deadline_ns < heap.tasks.items[b].timer_deadline_ns;
}

fn swap(heap: *TimerHeap, a: u32, b: u32) void {
    const items = heap.tasks.items;
    std.mem.swap(*Task, &items[a], &items[b]);
    items[a].timer_index = a;
    items[b].timer_index = b;
}

fn siftUp(heap: *TimerHeap, start: u32) void {
    var index = start;
    while (index > 0) {
        const parent = (index - 1) / 2;
        if (!heap.less(index, parent)) return;
        heap.swap(index, parent);
        index = parent;
    }
}

fn siftDown(heap: *TimerHeap, start: u32) void {
    var index = start;
    const len: u32 = @intCast(heap.tasks.items.len);
    while (true) {
        const left = 2 * index + 1;
        if (left >= len) return;
        var child = left;
        if (left + 1 < len and heap.less(left + 1, left)) child = left + 1;
        if (!heap.less(child, index)) return;
        heap.swap(index, child);
        index = child;
    }
}

test "TimerHeap: model check against a sorted list" {
    var prng: std.Random.DefaultPrng = .init(0x5eed);
    const random = prng.random();
    var heap: TimerHeap = .{ .gpa = std.testing.allocator };
    defer heap.deinit();
    var tasks: [64]Task = undefined;
    for (&tasks) |*task| task.* = .{ .executor = undefined, .kind = .future };
    for (0..2000) |_| {
        const task = &tasks[random.uintLessThan(usize, tasks.len)];
        if (task.timer_index == null) {
            try heap.insert(task, random.uintLessThan(u64, 1000));
        } else {
            heap.remove(task);
        }
        // Invariant: the root is the minimum of all members, and every index is right.
        var minimum: u64 = std.math.maxInt(u64);
        for (heap.tasks.items, 0..) |member, i| {
            try std.testing.expectEqual(@as(?u32, @intCast(i)), member.timer_index);
            minimum = @min(minimum, member.timer_deadline_ns);
        }
        if (heap.peekDeadline()) |root| try std.testing.expectEqual(minimum, root);
    }
    while (heap.tasks.items.len > 0) heap.remove(heap.tasks.items[heap.tasks.items.len - 1]);
}
