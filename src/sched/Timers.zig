//! Deadlines of sleeping tasks on one executor (CLOCK_MONOTONIC ns). Not thread-safe: the
//! executor guards it with its `timers_lock`.
//!
//! Two structures, because most deadlines arrive in order. A task that sleeps for a duration
//! gets a deadline of "now + d"; when every sleeper uses the same d (a server's timeouts, the
//! seed scenario's million one-second sleeps), each new deadline is at or after the last one.
//! Such a deadline is appended to `ordered`, an intrusive list whose deadlines never decrease:
//! insert, cancel and expiry are O(1), touch only the task itself and never allocate. A
//! deadline earlier than the list's tail goes to `heap`, a binary min-heap whose entries carry
//! their deadline inline, so that sifting compares without loading the tasks. The earliest
//! deadline is the smaller of the two heads.
//!
//! Rejected: a heap alone (measured: with a million sleepers, sifting on expiry misses the
//! cache on every level, about a tenth of the seed scenario's time); a timer wheel (its slots
//! round deadlines, and its cascades cost the same misses for long timeouts).
const Timers = @This();

const std = @import("std");
const assert = std.debug.assert;
const Task = @import("Task.zig");

gpa: std.mem.Allocator,
/// Deadlines in non-decreasing order, oldest first; linked through `Task.timer_prev/next`.
ordered_head: ?*Task = null,
ordered_tail: ?*Task = null,
ordered_len: usize = 0,
heap: std.ArrayList(Entry) = .empty,

/// Where a task's deadline is kept (`Task.timer_place`).
pub const Place = union(enum) {
    none,
    ordered,
    heap: u32,
};

const Entry = struct {
    deadline_ns: u64,
    task: *Task,
};

pub fn deinit(timers: *Timers) void {
    assert(timers.isEmpty());
    timers.heap.deinit(timers.gpa);
    timers.* = undefined;
}

pub fn isEmpty(timers: *const Timers) bool {
    return timers.ordered_len == 0 and timers.heap.items.len == 0;
}

/// The earliest deadline, or null when no timer is set.
pub fn peekDeadline(timers: *const Timers) ?u64 {
    const ordered: ?u64 = if (timers.ordered_head) |task| task.timer_deadline_ns else null;
    const heaped: ?u64 = if (timers.heap.items.len > 0) timers.heap.items[0].deadline_ns else null;
    if (ordered) |a| return if (heaped) |b| @min(a, b) else a;
    return heaped;
}

/// Sets the task's timer. Allocates only for a deadline earlier than the latest one set.
pub fn insert(timers: *Timers, task: *Task, deadline_ns: u64) std.mem.Allocator.Error!void {
    assert(task.timer_place == .none);
    task.timer_deadline_ns = deadline_ns;
    if (timers.ordered_tail) |tail| {
        if (deadline_ns >= tail.timer_deadline_ns) return timers.append(task);
        try timers.heap.append(timers.gpa, .{ .deadline_ns = deadline_ns, .task = task });
        const index: u32 = @intCast(timers.heap.items.len - 1);
        task.timer_place = .{ .heap = index };
        timers.siftUp(index);
    } else {
        timers.append(task);
    }
}

fn append(timers: *Timers, task: *Task) void {
    assert(task.timer_prev == null);
    assert(task.timer_next == null);
    task.timer_place = .ordered;
    task.timer_prev = timers.ordered_tail;
    if (timers.ordered_tail) |tail| tail.timer_next = task else timers.ordered_head = task;
    timers.ordered_tail = task;
    timers.ordered_len += 1;
}

/// Clears the task's timer (a sleep that was canceled or woken early).
pub fn remove(timers: *Timers, task: *Task) void {
    switch (task.timer_place) {
        .none => unreachable, // no timer set
        .ordered => {
            assert(timers.ordered_len > 0);
            if (task.timer_prev) |prev| prev.timer_next = task.timer_next else {
                assert(timers.ordered_head == task);
                timers.ordered_head = task.timer_next;
            }
            if (task.timer_next) |next| next.timer_prev = task.timer_prev else {
                assert(timers.ordered_tail == task);
                timers.ordered_tail = task.timer_prev;
            }
            task.timer_prev = null;
            task.timer_next = null;
            timers.ordered_len -= 1;
        },
        .heap => |index| {
            const items = timers.heap.items;
            assert(items[index].task == task);
            const last = timers.heap.pop().?;
            if (last.task != task) {
                items[index] = last;
                last.task.timer_place = .{ .heap = index };
                timers.siftUp(index);
                timers.siftDown(last.task.timer_place.heap);
            }
        },
    }
    task.timer_place = .none;
}

/// Fires every timer whose deadline is at or before `now_ns`, earliest first: marks its task
/// and wakes it. Returns how many fired.
pub fn expire(timers: *Timers, now_ns: u64) u32 {
    return timers.expireUntil(now_ns, .all, null);
}

/// `expire`, from a thread that is not the timers' executor's, while one task holds that
/// executor: stops at the first due timer whose task is running, which only its own executor
/// may fire. That task is the holder, between arming its timer and parking; some waits arm
/// before they prepare to wait (sched/io_wait.zig), and a wake that finds a task running is
/// dropped (`Task.wake`), so the timer would be lost. Adds one to `fired` for each timer
/// before its task is woken: the task, running at once on another executor, may read the
/// count (a test does).
pub fn expireParked(timers: *Timers, now_ns: u64, fired: *std.atomic.Value(u64)) void {
    _ = timers.expireUntil(now_ns, .parked, fired);
}

fn expireUntil(
    timers: *Timers,
    now_ns: u64,
    comptime tasks: enum { all, parked },
    fired_shared: ?*std.atomic.Value(u64),
) u32 {
    var fired: u32 = 0;
    while (timers.earliest()) |task| {
        if (task.timer_deadline_ns > now_ns) break;
        if (tasks == .parked and task.wait_state.load(.acquire) == .running) break;
        timers.remove(task);
        task.timer_fired.store(true, .monotonic);
        if (fired_shared) |counter| _ = counter.fetchAdd(1, .monotonic);
        task.wake();
        fired += 1;
    }
    return fired;
}

fn earliest(timers: *const Timers) ?*Task {
    const ordered = timers.ordered_head;
    if (timers.heap.items.len == 0) return ordered;
    const heaped = timers.heap.items[0];
    if (ordered) |task| {
        if (task.timer_deadline_ns <= heaped.deadline_ns) return task;
    }
    return heaped.task;
}

fn less(items: []const Entry, a: u32, b: u32) bool {
    return items[a].deadline_ns < items[b].deadline_ns;
}

fn swap(items: []Entry, a: u32, b: u32) void {
    std.mem.swap(Entry, &items[a], &items[b]);
    items[a].task.timer_place = .{ .heap = a };
    items[b].task.timer_place = .{ .heap = b };
}

fn siftUp(timers: *Timers, start: u32) void {
    const items = timers.heap.items;
    var index = start;
    while (index > 0) {
        const parent = (index - 1) / 2;
        if (!less(items, index, parent)) return;
        swap(items, index, parent);
        index = parent;
    }
}

fn siftDown(timers: *Timers, start: u32) void {
    const items = timers.heap.items;
    const count: u32 = @intCast(items.len);
    var index = start;
    while (true) {
        const left = 2 * index + 1;
        if (left >= count) return;
        var child = left;
        if (left + 1 < count and less(items, left + 1, left)) child = left + 1;
        if (!less(items, child, index)) return;
        swap(items, index, child);
        index = child;
    }
}

fn checkInvariants(timers: *const Timers) !void {
    const expect = std.testing.expect;
    var count: usize = 0;
    var previous: u64 = 0;
    var cursor = timers.ordered_head;
    while (cursor) |task| : (cursor = task.timer_next) {
        try expect(task.timer_place == .ordered);
        try expect(task.timer_deadline_ns >= previous);
        previous = task.timer_deadline_ns;
        count += 1;
    }
    try std.testing.expectEqual(timers.ordered_len, count);
    for (timers.heap.items, 0..) |entry, index| {
        try std.testing.expectEqual(Place{ .heap = @intCast(index) }, entry.task.timer_place);
        try std.testing.expectEqual(entry.deadline_ns, entry.task.timer_deadline_ns);
        if (index > 0) {
            try expect(timers.heap.items[(index - 1) / 2].deadline_ns <= entry.deadline_ns);
        }
    }
}

test "Timers: model check of insert, remove and expiry order against a list" {
    var prng: std.Random.DefaultPrng = .init(0x5eed);
    const random = prng.random();
    for (0..20) |round| {
        var timers: Timers = .{ .gpa = std.testing.allocator };
        defer timers.deinit();
        var tasks: [64]Task = undefined;
        for (&tasks) |*task| task.* = .{ .executor = undefined, .kind = .future };
        var clock_ns: u64 = 0;
        for (0..3000) |_| {
            const task = &tasks[random.uintLessThan(usize, tasks.len)];
            const action = random.uintLessThan(u8, 10);
            if (action == 0) {
                // Expire up to a random time; what fires must be exactly the due ones, in order.
                clock_ns += random.uintLessThan(u64, 200);
                var due: usize = 0;
                for (&tasks) |*t| {
                    due += @intFromBool(t.timer_place != .none and t.timer_deadline_ns <= clock_ns);
                }
                for (&tasks) |*t| t.timer_fired.store(false, .monotonic);
                var last_fired: u64 = 0;
                while (timers.earliest()) |next| {
                    if (next.timer_deadline_ns > clock_ns) break;
                    try std.testing.expect(next.timer_deadline_ns >= last_fired);
                    last_fired = next.timer_deadline_ns;
                    timers.remove(next);
                    due -= 1;
                }
                try std.testing.expectEqual(@as(usize, 0), due);
            } else if (task.timer_place == .none) {
                // Mostly in order (same-duration sleeps), sometimes earlier (shorter ones).
                const delta = if (round % 2 == 0 or action < 7)
                    100 + action
                else
                    random.uintLessThan(u64, 100);
                try timers.insert(task, clock_ns + delta);
            } else {
                timers.remove(task);
            }
            try checkInvariants(&timers);
            var minimum: ?u64 = null;
            for (&tasks) |*t| if (t.timer_place != .none) {
                minimum = @min(minimum orelse t.timer_deadline_ns, t.timer_deadline_ns);
            };
            try std.testing.expectEqual(minimum, timers.peekDeadline());
        }
        for (&tasks) |*task| if (task.timer_place != .none) timers.remove(task);
        try std.testing.expect(timers.isEmpty());
    }
}
