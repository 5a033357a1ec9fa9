//! Behaviour of `weft.Registry(T)` on weft: stale and unknown ids, the waiter limit, FIFO order,
//! cancelation and deadlines in line, nested transactions (Deadlock), destroy with waiters,
//! teardown on destroy and on shutdown (held or not), and exclusive access under contention from
//! fibers and plain threads. No timed assertions: tests wait for registry states (a resource held,
//! n callers in line), never for time. Holding transactions block on an `Io.Event` the test sets.
//! A wait for a caller the registry should have resumed (handed the resource, or failed by a
//! destroy or the shutdown), and each shutdown and teardown, runs under `deadline`: a caller
//! left in line fails its test in seconds, with the task dump on stderr.
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("runtime.zig").Runtime;
const Registry = @import("../sync/Registry.zig").Registry;
const deadline = @import("deadline.zig");

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    try body(rt.io());
}

/// What the tests observe: teardowns (and of which resource), and the order transactions ran.
const Log = struct {
    torn_down: std.atomic.Value(u32) = .init(0),
    torn_mask: std.atomic.Value(u64) = .init(0),
    /// Teardowns of each resource, by name: a mask hides a second teardown of one, a total
    /// one of a resource that was never torn down.
    torn_each: [64]std.atomic.Value(u32) = @splat(.init(0)),
    order: [16]u32 = @splat(0),
    order_len: u32 = 0,

    fn append(log: *Log, tag: u32) void {
        log.order[log.order_len] = tag;
        log.order_len += 1;
    }
};

const Conn = struct {
    name: u32,
    log: *Log,
    /// Set while a transaction holds the resource: a second holder would find it set.
    in_use: std.atomic.Value(u32) = .init(0),
    uses: u64 = 0,

    fn teardown(io: Io, conn: *Conn) void {
        _ = io;
        std.debug.assert(conn.in_use.load(.monotonic) == 0);
        _ = conn.log.torn_mask.fetchOr(@as(u64, 1) << @intCast(conn.name), .monotonic);
        _ = conn.log.torn_down.fetchAdd(1, .monotonic);
        _ = conn.log.torn_each[conn.name].fetchAdd(1, .monotonic);
    }

    fn getName(conn: *Conn) u32 {
        return conn.name;
    }

    fn failIfOdd(conn: *Conn, x: u32) error{Odd}!u32 {
        if (x % 2 == 1) return error.Odd;
        return conn.name + x;
    }

    /// Holds the resource until the test sets `gate`.
    fn hold(conn: *Conn, io: Io, gate: *Io.Event) u32 {
        gate.waitUncancelable(io);
        return conn.name;
    }

    fn record(conn: *Conn, tag: u32) u32 {
        conn.log.append(tag);
        return tag;
    }

    /// Checks exclusivity: nobody else is inside, across a park half of the time.
    fn use(conn: *Conn, io: Io, park: bool) Io.Cancelable!void {
        if (conn.in_use.swap(1, .acquire) != 0) @panic("two transactions hold one resource");
        defer conn.in_use.store(0, .release);
        const before = conn.uses;
        if (park) try io.sleep(.fromMicroseconds(1), .awake);
        conn.uses = before + 1; // a lost update if another holder ran meanwhile
    }
};

const Conns = Registry(Conn);

fn open(resources_max: u32, waiters_max: u32) !*Conns {
    return Conns.init(testing.allocator, .{
        .resources_max = resources_max,
        .waiters_max = waiters_max,
        .teardown = Conn.teardown,
    });
}

fn holdThrough(registry: *Conns, io: Io, id: Conns.Id, gate: *Io.Event) Conns.Result(Conn.hold) {
    return registry.transaction(io, id, Conn.hold, .{ io, gate });
}

fn nameOf(registry: *Conns, io: Io, id: Conns.Id) Conns.Result(Conn.getName) {
    return registry.transaction(io, id, Conn.getName, .{});
}

fn recordThrough(registry: *Conns, io: Io, id: Conns.Id, tag: u32) Conns.Result(Conn.record) {
    return registry.transaction(io, id, Conn.record, .{tag});
}

/// Sleeps in short steps until `condition` holds (a state, never a time).
fn waitFor(io: Io, context: anytype, comptime condition: fn (@TypeOf(context)) bool) !void {
    var polls: u32 = 0;
    while (!condition(context)) : (polls += 1) {
        if (polls == 100_000) return error.StateNeverReached; // ~ seconds: a hang, not a race
        try io.sleep(.fromMicroseconds(20), .awake);
    }
}

const Line = struct { registry: *Conns, id: Conns.Id, len: u32 };

fn lineIs(line: Line) bool {
    return line.registry.waiting(line.id) == line.len;
}

fn waitLine(io: Io, registry: *Conns, id: Conns.Id, len: u32) !void {
    try waitFor(io, Line{ .registry = registry, .id = id, .len = len }, lineIs);
}

fn heldIs(line: Line) bool {
    return line.registry.checked_out.load(.monotonic) == line.len;
}

/// Waits until exactly `count` resources are checked out.
fn waitHeld(io: Io, registry: *Conns, count: u32) !void {
    try waitFor(io, Line{ .registry = registry, .id = undefined, .len = count }, heldIs);
}

/// A resource held by a transaction that waits for `finish`.
const Busy = struct {
    gate: Io.Event = .unset,
    holder: Io.Future(Conns.Result(Conn.hold)) = undefined,

    /// Starts the holding transaction on `id` and waits until it holds the resource (the
    /// only one checked out). `busy` must not move until `finish`.
    fn start(busy: *Busy, io: Io, registry: *Conns, id: Conns.Id) !void {
        busy.holder = try io.concurrent(holdThrough, .{ registry, io, id, &busy.gate });
        try waitHeld(io, registry, 1);
    }

    /// For an `errdefer` right after `start`: a test failing midway lets the holder return,
    /// else the registry's teardown would wait for it for ever, hiding the failure behind the
    /// runner's time limit.
    fn abandon(busy: *Busy, io: Io) void {
        busy.gate.set(io);
        _ = busy.holder.await(io) catch {};
    }

    /// Lets the holder return; its result (the resource's name).
    fn finish(busy: *Busy, io: Io) deadline.Result(@TypeOf(busy.holder).await) {
        busy.gate.set(io);
        return deadline.await(io, &busy.holder);
    }
};

/// Starts a caller that records `tag` on `id`, and waits until it is in line at `place`.
fn enqueue(
    io: Io,
    registry: *Conns,
    id: Conns.Id,
    tag: u32,
    place: u32,
) !Io.Future(Conns.Result(Conn.record)) {
    const future = try io.concurrent(recordThrough, .{ registry, io, id, tag });
    try waitLine(io, registry, id, place);
    return future;
}

/// Runs `body` with a registry of 4 slots holding one resource (named 0) under `id`.
fn withOne(
    comptime waiters_max: u32,
    comptime body: fn (io: Io, registry: *Conns, id: Conns.Id, log: *Log) anyerror!void,
) !void {
    try withRuntime(struct {
        fn run(io: Io) !void {
            var log: Log = .{};
            const registry = try open(4, waiters_max);
            defer registry.deinit(io);
            const id = try registry.register(.{ .name = 0, .log = &log });
            try body(io, registry, id, &log);
        }
    }.run);
}

test "Registry: transactions return the function's result; its error set is preserved" {
    comptime std.debug.assert(
        Conns.Result(Conn.failIfOdd) == (error{Odd} || Conns.TransactionError)!u32,
    );
    try withOne(4, struct {
        fn body(io: Io, registry: *Conns, id: Conns.Id, log: *Log) !void {
            try testing.expectEqual(@as(u32, 0), try nameOf(registry, io, id));
            const sum = try registry.transaction(io, id, Conn.failIfOdd, .{4});
            try testing.expectEqual(@as(u32, 4), sum);
            try testing.expectError(error.Odd, registry.transaction(io, id, Conn.failIfOdd, .{5}));
            try testing.expectEqual(@as(u64, 3), registry.stats().transactions);
            try testing.expectEqual(@as(u32, 0), log.torn_down.load(.monotonic));
        }
    }.body);
}

test "Registry: stale and unknown ids are errors; a reused slot never answers an old id" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var log: Log = .{};
            const registry = try open(1, 4);
            defer registry.deinit(io);
            const first = try registry.register(.{ .name = 1, .log = &log });
            const extra: Conn = .{ .name = 9, .log = &log };
            try testing.expectError(error.RegistryFull, registry.register(extra));
            try testing.expectEqual(Conns.Destroyed.torn_down, try registry.destroy(io, first));
            try testing.expectEqual(@as(u64, 1 << 1), log.torn_mask.load(.monotonic));
            try testing.expectError(error.Stale, nameOf(registry, io, first));
            try testing.expectError(error.Stale, registry.destroy(io, first));
            // The slot is reused under a new generation; the old id still misses.
            const second = try registry.register(.{ .name = 2, .log = &log });
            try testing.expectEqual(first.index(), second.index());
            try testing.expect(second.generation() > first.generation());
            try testing.expectError(error.Stale, nameOf(registry, io, first));
            try testing.expectEqual(@as(u32, 2), try nameOf(registry, io, second));
            // Ids this registry never issued.
            const beyond: Conns.Id = .make(1, 1);
            const future: Conns.Id = .make(0, second.generation() + 1);
            const zero: Conns.Id = .make(0, 0);
            for ([_]Conns.Id{ beyond, future, zero }) |id| {
                try testing.expectError(error.NotFound, nameOf(registry, io, id));
                try testing.expectError(error.NotFound, registry.destroy(io, id));
            }
            try testing.expectEqual(@as(u64, 2 + 3 * 1), registry.stats().rejected);
        }
    }.body);
}

test "Registry: waiters are served in FIFO order; WaitersFull past waiters_max" {
    try withOne(3, struct {
        fn body(io: Io, registry: *Conns, id: Conns.Id, log: *Log) !void {
            var busy: Busy = .{};
            try busy.start(io, registry, id);
            errdefer busy.abandon(io);
            var waiters: [3]Io.Future(Conns.Result(Conn.record)) = undefined;
            for (&waiters, 0..) |*waiter, index| {
                const tag: u32 = @intCast(index + 1);
                waiter.* = try enqueue(io, registry, id, tag, tag);
            }
            try testing.expectError(
                error.WaitersFull,
                registry.transaction(io, id, Conn.record, .{99}),
            );
            try testing.expectEqual(@as(u32, 0), try busy.finish(io));
            for (&waiters, 0..) |*waiter, index| {
                const tag: u32 = @intCast(index + 1);
                try testing.expectEqual(tag, try deadline.await(io, waiter));
            }
            try testing.expectEqualSlices(u32, &.{ 1, 2, 3 }, log.order[0..log.order_len]);
            const stats = registry.stats();
            try testing.expectEqual(@as(u64, 3), stats.waited);
            try testing.expectEqual(@as(u64, 1), stats.rejected);
            try testing.expectEqual(@as(u64, 4), stats.transactions);
        }
    }.body);
}

test "Registry: a waiter canceled in line leaves it and never gets the resource" {
    try withOne(8, struct {
        fn body(io: Io, registry: *Conns, id: Conns.Id, log: *Log) !void {
            var busy: Busy = .{};
            try busy.start(io, registry, id);
            errdefer busy.abandon(io);
            var a = try enqueue(io, registry, id, 1, 1);
            var b = try enqueue(io, registry, id, 2, 2);
            var c = try enqueue(io, registry, id, 3, 3);
            try testing.expectError(error.Canceled, b.cancel(io));
            try testing.expectEqual(@as(u32, 2), registry.waiting(id));
            _ = try busy.finish(io);
            try testing.expectEqual(@as(u32, 1), try deadline.await(io, &a));
            try testing.expectEqual(@as(u32, 3), try deadline.await(io, &c));
            try testing.expectEqualSlices(u32, &.{ 1, 3 }, log.order[0..log.order_len]);
            try testing.expectEqual(@as(u64, 1), registry.stats().waiters_withdrawn);
            // Nothing lost: the resource is free again.
            try testing.expectEqual(@as(u32, 0), registry.checked_out.load(.monotonic));
            try testing.expectEqual(@as(u32, 0), try nameOf(registry, io, id));
        }
    }.body);
}

test "Registry: a deadline in line withdraws the caller with DeadlineExceeded" {
    try withOne(8, struct {
        fn body(io: Io, registry: *Conns, id: Conns.Id, log: *Log) !void {
            var busy: Busy = .{};
            try busy.start(io, registry, id);
            errdefer busy.abandon(io);
            const timeout: Io.Timeout = .{ .duration = .{
                .raw = .fromMilliseconds(2),
                .clock = .awake,
            } };
            try testing.expectError(
                error.DeadlineExceeded,
                registry.transactionTimeout(io, id, timeout, Conn.record, .{1}),
            );
            try testing.expectEqual(@as(u32, 0), registry.waiting(id));
            _ = try busy.finish(io);
            try testing.expectEqual(@as(u32, 0), log.order_len);
            try testing.expectEqual(@as(u64, 1), registry.stats().waiters_withdrawn);
        }
    }.body);
}

test "Registry: destroy fails the waiters with Stale; a held resource is torn down on return" {
    try withOne(8, struct {
        fn body(io: Io, registry: *Conns, id: Conns.Id, log: *Log) !void {
            const other = try registry.register(.{ .name = 1, .log = log });
            var busy: Busy = .{};
            try busy.start(io, registry, id);
            errdefer busy.abandon(io);
            var a = try enqueue(io, registry, id, 1, 1);
            var b = try enqueue(io, registry, id, 2, 2);
            try testing.expectEqual(Conns.Destroyed.deferred, try registry.destroy(io, id));
            try testing.expectError(error.Stale, deadline.await(io, &a));
            try testing.expectError(error.Stale, deadline.await(io, &b));
            try testing.expectError(error.Stale, nameOf(registry, io, id));
            try testing.expectEqual(@as(u32, 0), log.torn_down.load(.monotonic));
            // The holder finishes its transaction, then tears the resource down, once.
            try testing.expectEqual(@as(u32, 0), try busy.finish(io));
            try testing.expectEqual(@as(u32, 1), log.torn_each[0].load(.monotonic));
            try testing.expectEqual(@as(u32, 0), log.torn_each[1].load(.monotonic));
            try testing.expectEqual(@as(u32, 0), log.order_len);
            try testing.expectEqual(@as(u64, 2), registry.stats().waiters_failed);
            // The slot is free again (and the other resource untouched).
            _ = try registry.register(.{ .name = 2, .log = log });
            try testing.expectEqual(@as(u32, 1), try nameOf(registry, io, other));
            try testing.expectEqual(@as(u32, 1), log.torn_down.load(.monotonic));
        }
    }.body);
}

test "Registry: shutdown tears down every resource, held or not, and fails the waiters" {
    try withOne(8, struct {
        fn body(io: Io, registry: *Conns, held: Conns.Id, log: *Log) !void {
            _ = try registry.register(.{ .name = 1, .log = log });
            _ = try registry.register(.{ .name = 2, .log = log });
            var busy: Busy = .{};
            try busy.start(io, registry, held);
            errdefer busy.abandon(io);
            var waiter = try enqueue(io, registry, held, 1, 1);
            const report = try deadline.run(io, Conns.shutdown, .{ registry, io, .{
                .timeout = .{ .duration = .{ .raw = .fromMilliseconds(2), .clock = .awake } },
            } });
            try testing.expectEqual(@as(u64, 2), report.torn_down);
            try testing.expectEqual(@as(u64, 1), report.waiters_failed);
            try testing.expectEqual(@as(u32, 1), report.held_left);
            try testing.expectEqual(@as(u64, 0b110), log.torn_mask.load(.monotonic));
            try testing.expectError(error.ShutdownInProgress, deadline.await(io, &waiter));
            try testing.expectError(
                error.ShutdownInProgress,
                registry.register(.{ .name = 3, .log = log }),
            );
            try testing.expectError(error.ShutdownInProgress, registry.destroy(io, held));
            try testing.expectError(
                error.ShutdownInProgress,
                nameOf(registry, io, held),
            );
            try testing.expectEqual(@as(u32, 0), try busy.finish(io));
            try testing.expectEqual(@as(u64, 0b111), log.torn_mask.load(.monotonic));
            try testing.expectEqual(@as(u32, 3), log.torn_down.load(.monotonic));
        }
    }.body);
}

test "Registry: deinit without shutdown tears down every resource once" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var log: Log = .{};
            const registry = try open(8, 8);
            for (0..5) |name| _ = try registry.register(.{ .name = @intCast(name), .log = &log });
            const gone = try registry.register(.{ .name = 5, .log = &log });
            _ = try registry.destroy(io, gone);
            try deadline.run(io, Conns.deinit, .{ registry, io });
            try testing.expectEqual(@as(u32, 6), log.torn_down.load(.monotonic));
            try testing.expectEqual(@as(u64, 0b111111), log.torn_mask.load(.monotonic));
        }
    }.body);
}

const contention_resources = 3;
const contention_fibers = 24;
const contention_threads = 3;
const contention_rounds = 150;

fn contend(registry: *Conns, io: Io, ids: *const [contention_resources]Conns.Id, seed: u64) void {
    var prng: std.Random.DefaultPrng = .init(seed);
    const random = prng.random();
    for (0..contention_rounds) |round| {
        const id = ids[random.uintLessThan(usize, contention_resources)];
        registry.transaction(io, id, Conn.use, .{ io, round % 2 == 0 }) catch |err| {
            std.debug.panic("contending caller {d}: {t}", .{ seed, err });
        };
    }
}

fn contendFiber(
    registry: *Conns,
    io: Io,
    ids: *const [contention_resources]Conns.Id,
    seed: u64,
) Io.Cancelable!void {
    contend(registry, io, ids, seed);
}

/// Generous: the nested call must fail at once; the bound only keeps a regression (a nested
/// call that waits for itself) from hanging the suite.
const nested_timeout: Io.Timeout = .{ .duration = .{
    .raw = .fromSeconds(5),
    .clock = .awake,
} };

/// Inside a transaction on `own`: a nested one on `own` fails with Deadlock (bounded, then
/// unbounded), one on `other` runs. Returns the other resource's name.
fn nest(conn: *Conn, registry: *Conns, io: Io, own: Conns.Id, other: Conns.Id) anyerror!u32 {
    _ = conn;
    try testing.expectError(
        error.Deadlock,
        registry.transactionTimeout(io, own, nested_timeout, Conn.getName, .{}),
    );
    try testing.expectError(error.Deadlock, nameOf(registry, io, own));
    return nameOf(registry, io, other);
}

fn nestThrough(registry: *Conns, io: Io, own: Conns.Id, other: Conns.Id) Conns.Result(nest) {
    return registry.transaction(io, own, nest, .{ registry, io, own, other });
}

test "Registry: a transaction nested on its caller's own id fails with Deadlock; on another runs" {
    try withOne(8, struct {
        fn body(io: Io, registry: *Conns, id: Conns.Id, log: *Log) !void {
            const other = try registry.register(.{ .name = 1, .log = log });
            try testing.expectEqual(@as(u32, 1), try nestThrough(registry, io, id, other));
            // Handed over in line, the resource is its new holder's: the caller that gets it
            // nests into Deadlock too, and the next in line still gets it after.
            var busy: Busy = .{};
            try busy.start(io, registry, id);
            errdefer busy.abandon(io);
            var nested = try io.concurrent(nestThrough, .{ registry, io, id, other });
            try waitLine(io, registry, id, 1);
            var again = try enqueue(io, registry, id, 7, 2);
            try testing.expectEqual(@as(u32, 0), try busy.finish(io));
            try testing.expectEqual(@as(u32, 1), try deadline.await(io, &nested));
            try testing.expectEqual(@as(u32, 7), try deadline.await(io, &again));
            const stats = registry.stats();
            try testing.expectEqual(@as(u64, 4), stats.rejected);
            try testing.expectEqual(@as(u64, 6), stats.transactions);
            try testing.expectEqual(@as(u32, 0), registry.checked_out.load(.monotonic));
            try testing.expectEqual(@as(u32, 0), try nameOf(registry, io, id));
        }
    }.body);
}

test "Registry: many fibers and plain threads contend; access stays exclusive, nothing lost" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var log: Log = .{};
            const registry = try open(contention_resources, 64);
            defer registry.deinit(io);
            var ids: [contention_resources]Conns.Id = undefined;
            for (&ids, 0..) |*id, name| id.* = try registry.register(.{
                .name = @intCast(name),
                .log = &log,
            });
            var threads: [contention_threads]std.Thread = undefined;
            for (&threads, 0..) |*thread, index| {
                const seed = 1000 + index;
                thread.* = try std.Thread.spawn(.{}, contend, .{ registry, io, &ids, seed });
            }
            var group: Io.Group = .init;
            defer group.cancel(io);
            for (0..contention_fibers) |seed| {
                try group.concurrent(io, contendFiber, .{ registry, io, &ids, seed });
            }
            try group.await(io);
            for (threads) |thread| thread.join();
            var uses: u64 = 0;
            for (registry.slots) |*slot| uses += slot.resource.uses;
            const total = (contention_fibers + contention_threads) * contention_rounds;
            try testing.expectEqual(@as(u64, total), uses);
            const stats = registry.stats();
            try testing.expectEqual(@as(u64, total), stats.transactions);
            try testing.expect(stats.waited > 0);
            try testing.expectEqual(@as(u64, 0), stats.rejected);
        }
    }.body);
}

test "Registry: works on std.Io.Threaded too" {
    const io = testing.io;
    var log: Log = .{};
    const registry = try open(2, 4);
    const id = try registry.register(.{ .name = 4, .log = &log });
    try testing.expectEqual(@as(u32, 6), try registry.transaction(io, id, Conn.failIfOdd, .{2}));
    try testing.expectError(error.Odd, registry.transaction(io, id, Conn.failIfOdd, .{1}));
    // Its callers are threads: a nested transaction on the same id is found too.
    const other = try registry.register(.{ .name = 5, .log = &log });
    try testing.expectEqual(@as(u32, 5), try nestThrough(registry, io, id, other));
    registry.deinit(io);
    try testing.expectEqual(@as(u32, 2), log.torn_down.load(.monotonic));
}
