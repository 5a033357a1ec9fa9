//! An executor's local run queue: a bounded ring of ready tasks that its owner fills and
//! drains in FIFO order and that other executors steal half of when they run dry.
//!
//! Ownership: only the owning executor's thread pushes (at `tail`) and pops (at `head`);
//! thieves on other threads take from `head` too. `tail` is written by the owner alone, so a
//! push is a slot store and a release store of `tail`, no locked instruction. `head` is shared:
//! the owner's pop and a thief's steal both advance it with a CAS, and whoever loses the race
//! retries. A thief copies the slots it wants *before* its CAS: if the CAS fails the copy is
//! discarded, and if it succeeds the owner cannot have overwritten those slots, because the
//! owner only writes slots outside `head..tail` and `head` had not moved.
//!
//! Rejected: a Chase-Lev deque popped LIFO by its owner (no CAS on most pops, but a full fence
//! on each, which costs the same here, and LIFO order starves the oldest task); a locked
//! queue (two locked instructions per operation and a convoy when thieves pile up).
//!
//! `head` carries a version in its upper half, bumped by every `pushFront` (the one operation
//! that moves the head back): without it a thief that read slot h, then saw the owner pop h and
//! push a new task in front at h, would find `head` equal to what it loaded and take the popped
//! task a second time (ABA).
//!
//! Slots are atomics with relaxed ordering: a thief may read a slot that the owner is
//! rewriting after a wrap-around, and then its CAS fails; the atomic access makes that read
//! well defined instead of a data race.
//!
//! The atomics go through the shim (`os/atomic.zig`, std's own type outside tests), so that
//! the interleaving checker (testing/InterleavingChecker.zig) can run owner and thieves step by
//! step: see `RunQueueScenarioOf` at the bottom of this file.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");

pub fn RunQueue(comptime T: type, comptime capacity: u32) type {
    comptime assert(std.math.isPowerOfTwo(capacity));
    comptime assert(capacity >= 4);
    return struct {
        const Self = @This();
        pub const len_max = capacity;

        /// Index of the oldest task; advanced by the owner's pop and by thieves (CAS).
        /// The index (low half) and the `pushFront` version (high half).
        head: atomic.Value(u64) align(std.atomic.cache_line) = .init(0),
        /// One past the newest task; written by the owner only. On its own cache line: thieves
        /// read it, the owner writes it on every push.
        tail: atomic.Value(u32) align(std.atomic.cache_line) = .init(0),
        slots: [capacity]atomic.Value(?*T) = @splat(.init(null)),

        /// Tasks queued, as seen by any thread (a snapshot: both ends move).
        pub fn len(queue: *const Self) u32 {
            const tail = queue.tail.load(.seq_cst);
            const head = index(queue.head.load(.seq_cst));
            return tail -% head;
        }

        fn index(head: u64) u32 {
            return @truncate(head);
        }

        /// `head` advanced by `count`, version kept.
        fn advanced(head: u64, count: u32) u64 {
            return (head & ~@as(u64, std.math.maxInt(u32))) | (index(head) +% count);
        }

        pub fn isEmpty(queue: *const Self) bool {
            return queue.len() == 0;
        }

        /// Owner only. Appends `item`; false when the ring is full (the caller moves half of
        /// it elsewhere with `popHalf`, then pushes again).
        pub fn push(queue: *Self, item: *T) bool {
            const tail = queue.tail.raw; // only we write it
            const head = index(queue.head.load(.acquire));
            assert(tail -% head <= capacity);
            if (tail -% head == capacity) return false;
            queue.slots[tail % capacity].store(item, .monotonic);
            // Release: a thief that sees the new tail sees the slot.
            queue.tail.store(tail +% 1, .release);
            return true;
        }

        /// Owner only. Puts `item` at the head: it is the next one popped (or stolen). False
        /// when the ring is full. Safe against thieves: the slot below `head` is outside every
        /// thief's range until the CAS publishes it, and a thief that read slots from the old
        /// `head` fails its own CAS once `head` moved down.
        pub fn pushFront(queue: *Self, item: *T) bool {
            const tail = queue.tail.raw; // only we write it
            var head = queue.head.load(.acquire);
            while (true) {
                assert(tail -% index(head) <= capacity);
                if (tail -% index(head) == capacity) return false;
                const front = index(head) -% 1;
                queue.slots[front % capacity].store(item, .monotonic);
                const version = (head >> 32) +% 1;
                // Release: a thief that sees the new head sees the slot.
                const head_new = version << 32 | front;
                head = queue.head.cmpxchgWeak(head, head_new, .release, .acquire) orelse
                    return true;
            }
        }

        /// Owner only. Takes the oldest task.
        pub fn pop(queue: *Self) ?*T {
            var head = queue.head.load(.acquire);
            while (true) {
                const tail = queue.tail.raw;
                assert(tail -% index(head) <= capacity);
                if (index(head) == tail) return null;
                const item = queue.slots[index(head) % capacity].load(.monotonic);
                head = queue.head.cmpxchgWeak(head, advanced(head, 1), .acq_rel, .acquire) orelse
                    return item.?;
            }
        }

        /// Owner only: takes the older half of a full ring into `out` (in order), so that
        /// the caller can move it to a shared queue. Returns how many were taken (0 when a
        /// thief emptied the ring meanwhile).
        pub fn popHalf(queue: *Self, out: []*T) u32 {
            return stealInto(queue, out, queue.tail.raw);
        }

        /// Any thread: takes up to half of `victim`'s tasks (at least one when it has any) into
        /// `out`. Returns how many. Lock-free: retries only when another thread moved `head`.
        pub fn steal(victim: *Self, out: []*T) u32 {
            return stealInto(victim, out, null);
        }

        fn stealInto(victim: *Self, out: []*T, owner_tail: ?u32) u32 {
            assert(out.len >= capacity / 2);
            var head = victim.head.load(.acquire);
            retry: while (true) {
                const tail = owner_tail orelse victim.tail.load(.acquire);
                const available = tail -% index(head);
                // A stale head with a fresh tail can look overfull: reload.
                if (available > capacity) {
                    head = victim.head.load(.acquire);
                    continue;
                }
                const count = available - available / 2;
                if (count == 0) return 0;
                for (out[0..count], 0..) |*slot, i| {
                    const offset: u32 = @intCast(i);
                    const position = index(head) +% offset;
                    // A slot rewritten meanwhile may read as anything: the CAS below fails then.
                    slot.* = victim.slots[position % capacity].load(.monotonic) orelse {
                        head = victim.head.load(.acquire);
                        continue :retry;
                    };
                }
                // acq_rel: claims the slots read above; no one else will hand them out.
                const head_new = advanced(head, count);
                head = victim.head.cmpxchgWeak(head, head_new, .acq_rel, .acquire) orelse
                    return count;
            }
        }
    };
}

const testing = std.testing;

const TestItem = struct { value: u32 };

test "RunQueue: FIFO, full, popHalf keeps order" {
    var queue: RunQueue(TestItem, 8) = .{};
    var items: [9]TestItem = undefined;
    for (&items, 0..) |*item, i| item.* = .{ .value = @intCast(i) };
    for (items[0..8]) |*item| try testing.expect(queue.push(item));
    try testing.expect(!queue.push(&items[8]));
    try testing.expectEqual(@as(u32, 8), queue.len());
    var out: [4]*TestItem = undefined;
    try testing.expectEqual(@as(u32, 4), queue.popHalf(&out));
    for (out, 0..) |item, i| try testing.expectEqual(@as(u32, @intCast(i)), item.value);
    try testing.expect(queue.push(&items[8]));
    for (4..9) |i| try testing.expectEqual(@as(u32, @intCast(i)), queue.pop().?.value);
    try testing.expect(queue.pop() == null);
    try testing.expect(queue.isEmpty());
}

test "RunQueue: pushFront is popped next; full rings refuse it" {
    var queue: RunQueue(TestItem, 4) = .{};
    var items: [5]TestItem = undefined;
    for (&items, 0..) |*item, i| item.* = .{ .value = @intCast(i) };
    try testing.expect(queue.push(&items[0]));
    try testing.expect(queue.pushFront(&items[1]));
    try testing.expect(queue.pushFront(&items[2]));
    try testing.expect(queue.push(&items[3]));
    try testing.expect(!queue.pushFront(&items[4]));
    for ([_]u32{ 2, 1, 0, 3 }) |value| try testing.expectEqual(value, queue.pop().?.value);
    try testing.expect(queue.pop() == null);
}

test "RunQueue: steal takes the older half, rounded up" {
    var queue: RunQueue(TestItem, 8) = .{};
    var items: [5]TestItem = undefined;
    for (&items, 0..) |*item, i| item.* = .{ .value = @intCast(i) };
    var out: [4]*TestItem = undefined;
    try testing.expectEqual(@as(u32, 0), queue.steal(&out));
    for (&items) |*item| try testing.expect(queue.push(item));
    try testing.expectEqual(@as(u32, 3), queue.steal(&out));
    for (out[0..3], 0..) |item, i| try testing.expectEqual(@as(u32, @intCast(i)), item.value);
    try testing.expectEqual(@as(u32, 3), queue.pop().?.value);
    try testing.expectEqual(@as(u32, 1), queue.steal(&out));
    try testing.expectEqual(@as(u32, 4), out[0].value);
    try testing.expect(queue.pop() == null);
}

test "RunQueue: owner and thieves race; every item is taken exactly once" {
    const items_total = 200_000;
    const thieves = 3;
    const Queue = RunQueue(TestItem, 64);
    const Shared = struct {
        queue: Queue = .{},
        taken: []std.atomic.Value(u8),
        done: std.atomic.Value(bool) = .init(false),

        fn take(shared: *@This(), item: *TestItem) void {
            const previous = shared.taken[item.value].fetchAdd(1, .monotonic);
            assert(previous == 0);
        }

        fn thief(shared: *@This()) void {
            var out: [32]*TestItem = undefined;
            while (true) {
                const count = shared.queue.steal(&out);
                for (out[0..count]) |item| shared.take(item);
                if (count == 0 and shared.done.load(.acquire)) return;
            }
        }
    };
    const gpa = testing.allocator;
    const items = try gpa.alloc(TestItem, items_total);
    defer gpa.free(items);
    const taken = try gpa.alloc(std.atomic.Value(u8), items_total);
    defer gpa.free(taken);
    for (items, taken, 0..) |*item, *flag, i| {
        item.* = .{ .value = @intCast(i) };
        flag.* = .init(0);
    }
    var shared: Shared = .{ .taken = taken };
    var threads: [thieves]std.Thread = undefined;
    for (&threads) |*thread| thread.* = try std.Thread.spawn(.{}, Shared.thief, .{&shared});
    var overflow: [32]*TestItem = undefined;
    for (items, 0..) |*item, i| {
        // A third of the items go to the front, as displaced LIFO tasks do.
        while (!(if (i % 3 == 1) shared.queue.pushFront(item) else shared.queue.push(item))) {
            const count = shared.queue.popHalf(&overflow);
            for (overflow[0..count]) |moved| shared.take(moved);
        }
        if (i % 3 == 0) if (shared.queue.pop()) |popped| shared.take(popped);
    }
    while (shared.queue.pop()) |popped| shared.take(popped);
    shared.done.store(true, .release);
    for (threads) |thread| thread.join();
    for (taken) |*flag| try testing.expectEqual(@as(u8, 1), flag.load(.monotonic));
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// An executor's run queue (sched/RunQueue.zig) with a capacity of 4, so that twelve items
/// wrap around it three times and fill it: the owner pushes them (moving the older half out
/// with `popHalf` when the ring is full) and pops one now and then; two thieves steal until
/// the owner is done and the ring is empty. Every item must be taken exactly once, and since
/// everyone takes from the head, each taker must see its items in push order. With
/// `with_front`, a third of the pushes go to the front (as a task displaced from the LIFO slot
/// does), racing the thieves' steals from the same end; order then is not checked.
fn RunQueueScenarioOf(comptime with_front: bool) type {
    return struct {
        queue: Queue = .{},
        items: [items_len]Item = undefined,
        prng: std.Random.DefaultPrng,
        owner_done: atomic.Value(bool) = .init(false),
        taken: [items_len]u8 = @splat(0),
        /// Per taker (owner, thief 0, thief 1), the last item it took.
        last: [3]?u32 = @splat(null),
        order_broken: bool = false,

        const Item = struct { value: u32 };
        const Queue = RunQueue(Item, 4);
        const items_len = 12;
        pub const rearming_threads = [_]usize{}; // no blocking operation

        const Scenario = @This();

        pub fn init(seed: u64) Scenario {
            var scenario: Scenario = .{ .prng = .init(seed ^ 0x7a5c) };
            for (&scenario.items, 0..) |*item, i| item.* = .{ .value = @intCast(i) };
            return scenario;
        }

        pub fn bodies(scenario: *Scenario) [3]Checker.Body {
            return .{
                Checker.bodyOf(owner, scenario),
                Checker.bodyOf(thief0, scenario),
                Checker.bodyOf(thief1, scenario),
            };
        }

        fn take(scenario: *Scenario, taker: usize, item: *Item) void {
            scenario.taken[item.value] += 1;
            if (scenario.last[taker]) |previous| if (item.value <= previous) {
                scenario.order_broken = true;
            };
            scenario.last[taker] = item.value;
        }

        fn owner(scenario: *Scenario, io_: Io) void {
            _ = io_;
            var half: [Queue.len_max / 2]*Item = undefined;
            for (&scenario.items) |*item| {
                const front = with_front and scenario.prng.random().uintLessThan(u32, 3) == 0;
                const queue = &scenario.queue;
                while (!(if (front) queue.pushFront(item) else queue.push(item))) {
                    const count = scenario.queue.popHalf(&half);
                    for (half[0..count]) |moved| scenario.take(0, moved);
                }
                if (scenario.prng.random().uintLessThan(u32, 3) == 0) {
                    if (scenario.queue.pop()) |popped| scenario.take(0, popped);
                }
            }
            while (scenario.queue.pop()) |popped| scenario.take(0, popped);
            scenario.owner_done.store(true, .release);
        }

        fn thief(scenario: *Scenario, taker: usize) void {
            var out: [Queue.len_max / 2]*Item = undefined;
            while (true) {
                const count = scenario.queue.steal(&out);
                for (out[0..count]) |item| scenario.take(taker, item);
                if (count == 0 and scenario.owner_done.load(.acquire)) return;
            }
        }

        fn thief0(scenario: *Scenario, io_: Io) void {
            _ = io_;
            scenario.thief(1);
        }

        fn thief1(scenario: *Scenario, io_: Io) void {
            _ = io_;
            scenario.thief(2);
        }

        pub fn check(scenario: *Scenario) !void {
            if (!with_front) try std.testing.expect(!scenario.order_broken);
            for (scenario.taken) |count| try std.testing.expectEqual(@as(u8, 1), count);
            try std.testing.expect(scenario.queue.isEmpty());
        }
    };
}

const RunQueueScenario = RunQueueScenarioOf(false);
const RunQueueFrontScenario = RunQueueScenarioOf(true);

test "interleave: RunQueue owner and two thieves, 1000 seeds: every item taken once, in order" {
    try Checker.checkSeeds(RunQueueScenario);
}

test "interleave: RunQueue pushFront against two thieves, 1000 seeds: every item taken once" {
    try Checker.checkSeeds(RunQueueFrontScenario);
}
