//! weft.Sim: determinism (same seed, same trace; other seeds, other orders), virtual time,
//! cancelation, groups, the deadlock report, the limits, and std.Io and weft.sync code run
//! unchanged under many seeds.
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const Sim = @import("../sim/Sim.zig");
const sync = @import("../sync/root.zig");
const os = @import("../os/host.zig");
const frames = @import("../fiber/frames.zig");
const qemu = @import("qemu.zig");
const wine = @import("wine.zig");
const builtin = @import("builtin");

const ns_per_s = std.time.ns_per_s;

/// The simulator uses neither the runtime's backend nor its executors, and runs on one
/// thread: its tests run once per build (in the io_uring run, and under qemu, where epoll is
/// the only backend) and skip in the runs that change only the backend or the executor count
/// (`WEFT_BACKEND`, `WEFT_EXECUTORS`), and under TSan, which has no threads to watch here.
/// `seeds`, or a fifth of it (at least 10) under qemu-user, where each run is ten times
/// slower: the scenarios still run there, for the other architecture.
pub fn seedCount(seeds: u64) u64 {
    return if (qemu.underQemu()) @max(seeds / 5, 10) else seeds;
}

pub fn skipInExecutorRuns() error{SkipZigTest}!void {
    if (builtin.sanitize_thread) return error.SkipZigTest;
    var buffer: [16]u8 = undefined;
    if (os.getEnv("WEFT_EXECUTORS", &buffer) != null) return error.SkipZigTest;
    const backend = os.getEnv("WEFT_BACKEND", &buffer) orelse return;
    if (std.mem.eql(u8, backend, "epoll") and !qemu.underQemu()) return error.SkipZigTest;
}

/// Four tasks ready at once append their ids to `order` as they run, three turns each.
fn interleave(io: Io, order: *std.ArrayList(u8)) !void {
    const Worker = struct {
        fn work(inner: Io, id: u8, list: *std.ArrayList(u8)) void {
            for (0..3) |_| {
                list.appendAssumeCapacity(id);
                inner.sleep(.fromNanoseconds(0), .awake) catch {};
                var flag: u32 = 0;
                // A futex wait whose value differs returns at once; with preemption it yields.
                inner.futexWait(u32, &flag, 1) catch {};
            }
        }
    };
    var group: Io.Group = .init;
    for (0..4) |id| group.async(io, Worker.work, .{ io, @as(u8, @intCast(id)), order });
    try group.await(io);
}

fn orderOf(seed: u64, preempt_percent: u7) !struct { hash: u64, order: [12]u8 } {
    var storage: [12]u8 = undefined;
    var order: std.ArrayList(u8) = .initBuffer(&storage);
    const options: Sim.Options = .{ .seed = seed, .preempt_percent = preempt_percent };
    var sim = try Sim.init(testing.allocator, options);
    defer sim.deinit();
    try sim.run(interleave, .{&order});
    try testing.expectEqual(@as(usize, 12), order.items.len);
    return .{ .hash = sim.traceHash(), .order = storage };
}

test "sim: the same seed replays the same order and trace; other seeds give other orders" {
    try skipInExecutorRuns();
    const first = try orderOf(7, 50);
    const again = try orderOf(7, 50);
    try testing.expectEqual(first.hash, again.hash);
    try testing.expectEqualSlices(u8, &first.order, &again.order);
    var orders_differ: usize = 0;
    var hashes_differ: usize = 0;
    for (0..20) |seed| {
        const other = try orderOf(seed + 100, 50);
        if (!std.mem.eql(u8, &other.order, &first.order)) orders_differ += 1;
        if (other.hash != first.hash) hashes_differ += 1;
    }
    // Four tasks, three preemptible turns each: thousands of orders, so nearly every seed
    // differs from seed 7's.
    try testing.expect(orders_differ >= 15);
    try testing.expect(hashes_differ >= 15);
}

test "sim: tasks ready at the same instant start in a seeded order" {
    try skipInExecutorRuns();
    var firsts: [4]usize = @splat(0);
    for (0..40) |seed| {
        const result = try orderOf(seed, 0);
        firsts[result.order[0]] += 1;
    }
    // Each of the four tasks runs first under some seed.
    for (firsts) |count| try testing.expect(count > 0);
}

fn sleepers(io: Io, count: usize, wakes: []u64) !void {
    const Sleeper = struct {
        fn sleepFor(inner: Io, seconds: u64, woke: *u64) void {
            const start = Io.Timestamp.now(inner, .awake);
            inner.sleep(.fromSeconds(@intCast(seconds)), .awake) catch return;
            const end = Io.Timestamp.now(inner, .awake);
            woke.* = @intCast(end.nanoseconds - start.nanoseconds);
        }
    };
    var group: Io.Group = .init;
    var random = std.Random.DefaultPrng.init(1);
    for (wakes[0..count]) |*woke| {
        const seconds = random.random().intRangeAtMost(u64, 1, 3600);
        woke.* = seconds; // replaced by the measured sleep
        group.async(io, Sleeper.sleepFor, .{ io, seconds, woke });
    }
    try group.await(io);
}

test "sim: an hour of sleeps takes virtual time, not wall time, and wakes at the deadline" {
    try skipInExecutorRuns();
    var sim = try Sim.init(testing.allocator, .{ .seed = 3 });
    defer sim.deinit();
    const count = 2_000;
    const wakes = try testing.allocator.alloc(u64, count);
    defer testing.allocator.free(wakes);
    var seconds: [count]u64 = undefined;
    {
        var random = std.Random.DefaultPrng.init(1);
        for (&seconds) |*s| s.* = random.random().intRangeAtMost(u64, 1, 3600);
    }
    const wall_start = std.Io.Clock.awake.now(testing.io);
    try sim.run(sleepers, .{ count, wakes });
    const wall_ns = wall_start.durationTo(std.Io.Clock.awake.now(testing.io)).nanoseconds;
    // Each sleeper read the clock once before its sleep and once on waking: the sleep itself,
    // plus the one tick of that first read, plus a tick for each sleeper due at the same
    // second that ran first (a step and a clock read each).
    const tick_ns = (Sim.Options{ .seed = 0 }).tick_ns;
    for (wakes, seconds) |woke, s| {
        try testing.expect(woke >= s * ns_per_s + tick_ns);
        try testing.expect(woke - (s * ns_per_s + tick_ns) < 100 * tick_ns);
    }
    try testing.expect(sim.elapsedNs() >= 3000 * ns_per_s);
    try testing.expect(wall_ns < 10 * ns_per_s);
}

fn sleepAlone(io: Io) !u64 {
    const start = Io.Clock.awake.now(io);
    try io.sleep(.fromSeconds(5), .awake);
    return @intCast(start.durationTo(Io.Clock.awake.now(io)).nanoseconds);
}

test "sim: a lone sleeper wakes exactly at its deadline" {
    try skipInExecutorRuns();
    var sim = try Sim.init(testing.allocator, .{ .seed = 3 });
    defer sim.deinit();
    const tick_ns = sim.state.options.tick_ns;
    try testing.expectEqual(5 * ns_per_s + tick_ns, try sim.run(sleepAlone, .{}));
}

fn neverWoken(io: Io) !void {
    var flag: u32 = 0;
    const Waiter = struct {
        fn wait(inner: Io, address: *u32) void {
            inner.futexWaitUncancelable(u32, address, 0);
        }
    };
    var future = io.async(Waiter.wait, .{ io, &flag });
    defer future.cancel(io);
    try io.futexWait(u32, &flag, 0);
}

test "sim: a deadlock ends the run with an error and a report naming each blocked task" {
    try skipInExecutorRuns();
    var sim = try Sim.init(testing.allocator, .{ .seed = 11 });
    defer sim.deinit();
    try testing.expectError(error.Deadlock, sim.run(neverWoken, .{}));
    var buffer: [16 * 1024]u8 = undefined;
    var writer: Io.Writer = .fixed(&buffer);
    try sim.writeReport(&writer);
    const report = writer.buffered();
    try testing.expect(std.mem.indexOf(u8, report, "seed 11: Deadlock") != null);
    try testing.expect(std.mem.indexOf(u8, report, "task 1 (root) waits on the futex") != null);
    try testing.expect(std.mem.indexOf(u8, report, "task 2 waits on the futex") != null);
    // Each task's stack says where in the program it waits (in Debug: release builds inline
    // the scenario's functions into the fiber's entry; qemu-user reads no stack for the walk).
    if (frames.available and builtin.mode == .Debug and !qemu.underQemu()) {
        try testing.expect(std.mem.indexOf(u8, report, "in neverWoken (") != null);
        try testing.expect(std.mem.indexOf(u8, report, "in wait (") != null);
    }
    // A stranded Sim runs no more.
    try testing.expectError(error.Abandoned, sim.run(neverWoken, .{}));
}

fn spin(io: Io) !void {
    // Bounded by the Sim's limits: a scenario that never ends.
    while (true) try io.checkCancel();
}

fn pollClock(io: Io) !void {
    const start = Io.Clock.awake.now(io);
    // Ends because every read moves the virtual clock.
    while (start.durationTo(Io.Clock.awake.now(io)).nanoseconds < ns_per_s) {}
}

fn yieldForever(io: Io) !void {
    const Yielder = struct {
        fn run(inner: Io) void {
            // Bounded by the Sim's step limit.
            while (true) inner.sleep(.fromNanoseconds(1), .awake) catch return;
        }
    };
    var future = io.async(Yielder.run, .{io});
    defer future.cancel(io);
    try io.sleep(.fromSeconds(3600 * 24 * 365), .awake);
}

test "sim: the step and virtual-time limits stop a run; a loop polling the clock ends" {
    try skipInExecutorRuns();
    {
        const options: Sim.Options = .{ .seed = 1, .preempt_percent = 100, .steps_max = 1000 };
        var sim = try Sim.init(testing.allocator, options);
        defer sim.deinit();
        try testing.expectError(error.StepLimit, sim.run(spin, .{}));
    }
    {
        var sim = try Sim.init(testing.allocator, .{ .seed = 1, .virtual_ns_max = ns_per_s });
        defer sim.deinit();
        try testing.expectError(error.TimeLimit, sim.run(yieldForever, .{}));
    }
    {
        var sim = try Sim.init(testing.allocator, .{ .seed = 1 });
        defer sim.deinit();
        try sim.run(pollClock, .{});
        try testing.expect(sim.elapsedNs() >= ns_per_s);
    }
}

fn cancelSleeper(io: Io) !void {
    const Sleeper = struct {
        fn run(inner: Io) Io.Cancelable!void {
            return inner.sleep(.fromSeconds(3600), .awake);
        }
    };
    var future = io.async(Sleeper.run, .{io});
    try io.sleep(.fromSeconds(1), .awake);
    const start = Io.Clock.awake.now(io);
    try testing.expectError(error.Canceled, future.cancel(io));
    // Canceled at once, not after the hour.
    try testing.expect(start.durationTo(Io.Clock.awake.now(io)).nanoseconds < ns_per_s);

    // A group canceled while its members wait; one is protected until its work is done.
    const Member = struct {
        fn run(inner: Io, done: *u32) Io.Cancelable!void {
            const old = inner.swapCancelProtection(.blocked);
            inner.sleep(.fromSeconds(2), .awake) catch unreachable; // protected
            done.* += 1;
            _ = inner.swapCancelProtection(old);
            try inner.sleep(.fromSeconds(3600), .awake);
            done.* += 100; // never: the cancel is delivered at this sleep
        }
    };
    var done: u32 = 0;
    var group: Io.Group = .init;
    for (0..3) |_| group.async(io, Member.run, .{ io, &done });
    try io.sleep(.fromSeconds(1), .awake);
    group.cancel(io);
    try testing.expectEqual(@as(u32, 3), done);
}

test "sim: cancel wakes a sleeper; a group cancel waits for protected members" {
    try skipInExecutorRuns();
    const checked = try Sim.checkSeeds(testing.allocator, .{ .seeds = 50 }, cancelSleeper, .{});
    try testing.expectEqual(.passed, checked.outcome);
}

/// weft.sync's channel and std.Io.Mutex under a seeded schedule: producers and consumers
/// hand over every value exactly once.
fn channelScenario(io: Io) !void {
    var buffer: [4]u64 = undefined;
    var channel: sync.Channel(u64) = .init(&buffer);
    var mutex: Io.Mutex = .init;
    var sum: u64 = 0;
    const producers = 3;
    const per_producer = 50;
    const Roles = struct {
        fn produce(inner: Io, ch: *sync.Channel(u64), base: u64) Io.Cancelable!void {
            for (0..per_producer) |i| ch.send(inner, base + i) catch |err| switch (err) {
                error.Canceled => |e| return e,
                error.Closed => unreachable, // closed after every producer is done
            };
        }
        fn consume(
            inner: Io,
            ch: *sync.Channel(u64),
            lock: *Io.Mutex,
            total: *u64,
        ) Io.Cancelable!void {
            // Bounded by the channel's close.
            while (ch.recv(inner)) |value| {
                try lock.lock(inner);
                defer lock.unlock(inner);
                total.* += value;
            } else |err| switch (err) {
                error.Closed => {},
                else => |e| return e,
            }
        }
    };
    var senders: Io.Group = .init;
    var receivers: Io.Group = .init;
    for (0..producers) |p| senders.async(io, Roles.produce, .{ io, &channel, p * 1000 });
    for (0..2) |_| receivers.async(io, Roles.consume, .{ io, &channel, &mutex, &sum });
    try senders.await(io);
    channel.close(io);
    try receivers.await(io);
    var expected: u64 = 0;
    for (0..producers) |p| {
        for (0..per_producer) |i| expected += p * 1000 + i;
    }
    if (sum != expected) return error.TestUnexpectedResult;
}

test "sim: weft.sync's channel and std.Io.Mutex hand over every value, under 300 seeds" {
    try skipInExecutorRuns();
    const checked = try Sim.checkSeeds(
        testing.allocator,
        .{ .seeds = seedCount(300), .sim = .{ .seed = 0, .preempt_percent = 20 } },
        channelScenario,
        .{},
    );
    try testing.expectEqual(.passed, checked.outcome);
    try testing.expectEqual(seedCount(300), checked.seeds_run);
}

var lost_update_bug = true;

/// A planted lost update: read, yield (a cancelation point), write back.
fn lostUpdate(io: Io) !void {
    var counter: u32 = 0;
    const Adder = struct {
        fn add(inner: Io, value: *u32) !void {
            const seen = value.*;
            if (lost_update_bug) try inner.checkCancel(); // a preemption point between
            value.* = seen + 1;
        }
    };
    var group: Io.Group = .init;
    for (0..2) |_| group.async(io, Adder.add, .{ io, &counter });
    try group.await(io);
    if (counter != 2) return error.LostUpdate;
}

test "sim: checkSeeds finds a planted race and names a seed that replays it" {
    try skipInExecutorRuns();
    var report_buffer: [512]u8 = undefined;
    var report: Io.Writer = .fixed(&report_buffer);
    const options: Sim.CheckOptions = .{
        .seeds = seedCount(200),
        .sim = .{ .seed = 0, .preempt_percent = 50 },
        .report = &report,
    };
    lost_update_bug = true;
    const found = try Sim.checkSeeds(testing.allocator, options, lostUpdate, .{});
    try testing.expectEqual(.failed, found.outcome);
    try testing.expectEqual(error.LostUpdate, found.err.?);
    try testing.expect(std.mem.indexOf(u8, report.buffered(), "failed: LostUpdate") != null);
    // The seed it named fails again on its own.
    var sim = try Sim.init(testing.allocator, .{ .seed = found.seed, .preempt_percent = 50 });
    defer sim.deinit();
    try testing.expectError(error.LostUpdate, sim.run(lostUpdate, .{}));

    lost_update_bug = false;
    const fixed = try Sim.checkSeeds(testing.allocator, options, lostUpdate, .{});
    try testing.expectEqual(.passed, fixed.outcome);
}

var escaped_state: u64 = 0;

/// Steered by state outside the seed: a different order on the second run.
fn outsideState(io: Io) !void {
    escaped_state += 1;
    for (0..escaped_state % 2 + 1) |_| try io.sleep(.fromNanoseconds(10), .awake);
}

test "sim: checkSeeds reports a scenario that something outside the seed steers" {
    try skipInExecutorRuns();
    const checked = try Sim.checkSeeds(testing.allocator, .{ .seeds = 5 }, outsideState, .{});
    try testing.expectEqual(.diverged, checked.outcome);
    try testing.expectEqual(@as(u64, 0), checked.seed);
}

fn filesAndUnsimulated(io: Io, dir: Io.Dir) !void {
    // Files are real: written and read back through the simulated Io.
    try dir.writeFile(io, .{ .sub_path = "sim.txt", .data = "simulated" });
    var buffer: [32]u8 = undefined;
    const read = try dir.readFile(io, "sim.txt", &buffer);
    try testing.expectEqualStrings("simulated", read);
    // Child processes would run outside the seed: a clear error, no panic.
    const argv: []const []const u8 = &.{"/bin/true"};
    try testing.expectError(error.OperationUnsupported, std.process.spawn(io, .{ .argv = argv }));
    var random: [8]u8 = undefined;
    io.random(&random);
    try io.randomSecure(&random);
}

test "sim: files are real, processes fail cleanly, random bytes come from the seed" {
    try skipInExecutorRuns();
    try wine.skipUnderWine(.delete_file, @src());
    var tmp = testing.tmpDir(.{});
    defer tmp.cleanup();
    var sim = try Sim.init(testing.allocator, .{ .seed = 5 });
    defer sim.deinit();
    try sim.run(filesAndUnsimulated, .{tmp.dir});
}

fn randomBytes(io: Io) u64 {
    var value: u64 = undefined;
    io.random(std.mem.asBytes(&value));
    return value;
}

test "sim: random bytes replay with the seed" {
    try skipInExecutorRuns();
    var values: [3]u64 = undefined;
    for (&values, [_]u64{ 9, 9, 10 }) |*value, seed| {
        var sim = try Sim.init(testing.allocator, .{ .seed = seed });
        defer sim.deinit();
        value.* = try sim.run(randomBytes, .{});
    }
    try testing.expectEqual(values[0], values[1]);
    try testing.expect(values[0] != values[2]);
}

/// Review finding: `cancel` of a child must not swallow a cancel aimed at its caller.
fn cancelDuringCancel(io: Io) !void {
    const Child = struct {
        fn run(inner: Io) Io.Cancelable!void {
            const old = inner.swapCancelProtection(.blocked);
            inner.sleep(.fromSeconds(2), .awake) catch unreachable; // protected
            _ = inner.swapCancelProtection(old);
            try inner.sleep(.fromSeconds(3600), .awake); // acknowledges its cancel
        }
    };
    const Parent = struct {
        fn run(inner: Io, after: *u32) Io.Cancelable!void {
            var child = inner.async(Child.run, .{inner});
            child.cancel(inner) catch {};
            after.* = 1;
            try inner.sleep(.fromSeconds(3600), .awake); // the parent's own cancel lands here
            after.* = 2;
        }
    };
    var after: u32 = 0;
    var parent = io.async(Parent.run, .{ io, &after });
    try io.sleep(.fromSeconds(1), .awake);
    const start = Io.Clock.awake.now(io);
    try testing.expectError(error.Canceled, parent.cancel(io));
    try testing.expectEqual(@as(u32, 1), after);
    try testing.expect(start.durationTo(Io.Clock.awake.now(io)).nanoseconds < 10 * ns_per_s);
}

test "sim: a cancel that arrives while the task cancels a child is kept for it" {
    try skipInExecutorRuns();
    var sim = try Sim.init(testing.allocator, .{ .seed = 1 });
    defer sim.deinit();
    try sim.run(cancelDuringCancel, .{});
}

/// Review finding: a group whose members all finished, left unawaited by a failed run.
fn groupThenDeadlock(io: Io) !void {
    const Quick = struct {
        fn run(_: Io) void {}
    };
    var group: Io.Group = .init;
    group.async(io, Quick.run, .{io});
    try io.sleep(.fromSeconds(1), .awake);
    var word: u32 = 0;
    io.futexWaitUncancelable(u32, &word, 0); // nobody wakes it
    try group.await(io);
}

test "sim: a failed run's groups and tasks are freed by deinit; options are checked" {
    try skipInExecutorRuns();
    var sim = try Sim.init(testing.allocator, .{ .seed = 1 });
    defer sim.deinit(); // the testing allocator fails the test on a leak
    try testing.expectError(error.Deadlock, sim.run(groupThenDeadlock, .{}));

    try testing.expectError(error.InvalidOptions, Sim.init(testing.allocator, .{
        .seed = 0,
        .stack_size_bytes = 4096 + 1,
    }));
    try testing.expectError(error.InvalidOptions, Sim.init(testing.allocator, .{
        .seed = 0,
        .preempt_percent = 101,
    }));
    // No virtual-time bound at all: a sleep to the end of time does not wrap the clock.
    var unbounded = try Sim.init(testing.allocator, .{
        .seed = 0,
        .virtual_ns_max = std.math.maxInt(u64),
    });
    defer unbounded.deinit();
    try unbounded.run(sleepForever, .{});
}

fn sleepForever(io: Io) !void {
    try io.sleep(.{ .nanoseconds = std.math.maxInt(i96) }, .awake);
    const now = Io.Clock.awake.now(io);
    try testing.expect(now.nanoseconds >= std.math.maxInt(u64) - 1);
}

const FaultCase = enum { io_error, no_space, short, sync_error };

fn fileFaults(io: Io, dir: Io.Dir, expect: FaultCase) !void {
    const data = "0123456789" ** 1000;
    switch (expect) {
        .io_error => {
            const read = dir.readFileAlloc(io, "sim-faults.txt", testing.allocator, .unlimited);
            try testing.expectError(error.InputOutput, read);
        },
        .no_space => {
            const file = try dir.createFile(io, "sim-full.txt", .{});
            defer file.close(io);
            try testing.expectError(error.NoSpaceLeft, file.writePositionalAll(io, data, 0));
        },
        .short => {
            // Every read and write is cut short; the readers and writers loop, so the bytes
            // all arrive, in more calls.
            const file = try dir.createFile(io, "sim-short.txt", .{ .read = true });
            defer file.close(io);
            try file.writePositionalAll(io, data, 0);
            var one_read: [data.len]u8 = undefined;
            const first = try file.readPositional(io, &.{&one_read}, 0);
            try testing.expect(first > 0 and first < data.len);
            const back = try dir.readFileAlloc(io, "sim-short.txt", testing.allocator, .unlimited);
            defer testing.allocator.free(back);
            try testing.expectEqualStrings(data, back);
        },
        .sync_error => {
            const file = try dir.createFile(io, "sim-sync.txt", .{});
            defer file.close(io);
            try testing.expectError(error.InputOutput, file.sync(io));
        },
    }
}

test "sim: file faults from the seed: EIO, ENOSPC, short transfers, fsync failure" {
    try skipInExecutorRuns();
    try wine.skipUnderWine(.delete_file, @src());
    var tmp = testing.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.writeFile(testing.io, .{ .sub_path = "sim-faults.txt", .data = "x" });
    const Case = struct { faults: Sim.FileFaults, expect: FaultCase };
    const cases = [_]Case{
        .{ .faults = .{ .io_error_percent = 100 }, .expect = .io_error },
        .{ .faults = .{ .no_space_percent = 100 }, .expect = .no_space },
        .{ .faults = .{ .short_percent = 100 }, .expect = .short },
        .{ .faults = .{ .sync_error_percent = 100 }, .expect = .sync_error },
    };
    for (cases) |case| {
        var sim = try Sim.init(testing.allocator, .{ .seed = 9, .file_faults = case.faults });
        defer sim.deinit();
        try sim.run(fileFaults, .{ tmp.dir, case.expect });
    }
}

/// The trace hash of `interleave` under seed 7 with 50 % preemption. It is the same in every
/// process, build mode and architecture this suite runs on (Debug, ReleaseFast, aarch64), so
/// a run replays from its seed anywhere. A change to how the Sim schedules, or to what it
/// hashes, changes it: update it then, and say so in the commit.
const interleave_seed_7_hash: u64 = 0x72e7b89340aba908;

test "sim: the same seed gives the same trace in every process and build" {
    try skipInExecutorRuns();
    const result = try orderOf(7, 50);
    if (result.hash != interleave_seed_7_hash) {
        const pinned = interleave_seed_7_hash;
        std.debug.print("trace hash 0x{x}, pinned 0x{x}\n", .{ result.hash, pinned });
        return error.TestUnexpectedResult;
    }
}

/// Tasks that read every clock between sleeps and yields: no reading is ever below the one
/// before it, in any task, under any seed.
fn clocksOnlyGrow(io: Io) !void {
    const Reader = struct {
        fn run(inner: Io, last: *i96, backwards: *bool) Io.Cancelable!void {
            var prng = std.Random.DefaultPrng.init(@intCast(@as(u96, @bitCast(last.*)) & 0xff));
            for (0..50) |_| {
                const now = Io.Clock.awake.now(inner).nanoseconds;
                if (now < last.*) backwards.* = true;
                last.* = now;
                const pause = prng.random().uintLessThan(u64, 3);
                if (pause == 0) try inner.checkCancel() else {
                    try inner.sleep(.fromMicroseconds(@intCast(pause * 7)), .awake);
                }
            }
        }
    };
    var last: i96 = 0;
    var backwards = false;
    var group: Io.Group = .init;
    for (0..5) |_| group.async(io, Reader.run, .{ io, &last, &backwards });
    try group.await(io);
    if (backwards) return error.ClockWentBackwards;
}

test "sim: virtual time never goes backwards, under 200 seeds" {
    try skipInExecutorRuns();
    const checked = try Sim.checkSeeds(testing.allocator, .{
        .seeds = seedCount(200),
        .sim = .{ .seed = 0, .preempt_percent = 30 },
    }, clocksOnlyGrow, .{});
    try testing.expectEqual(.passed, checked.outcome);
}

/// Runs `misuse` in a forked child with its stderr on a pipe, and expects the child to panic
/// with `message`: the Sim's misuse checks end a process, so they are tested in one.
pub fn expectChildPanics(comptime misuse: fn () void, message: []const u8) !void {
    // A child process made by fork(2): Linux's here (tests of other OSes skip).
    if (builtin.os.tag != .linux) return os.skipTest(@src(), "a forked child: Linux only");
    const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
    const linux_os = @import("../os/linux.zig");
    var fds: [2]i32 = undefined;
    if (linux.errno(linux.pipe2(&fds, .{ .CLOEXEC = true })) != .SUCCESS) return error.NoPipe;
    const pid_rc = linux_os.fork();
    if (linux.errno(pid_rc) != .SUCCESS) return error.NoFork;
    if (pid_rc == 0) {
        _ = linux.dup2(fds[1], 2);
        misuse();
        linux.exit_group(0); // the misuse went unnoticed
    }
    const pid: linux.pid_t = @intCast(pid_rc);
    _ = linux.close(fds[1]);
    defer _ = linux.close(fds[0]);
    var buffer: [8192]u8 = undefined;
    var len: usize = 0;
    // Bounded by the child's output, which ends when it exits.
    while (len < buffer.len) {
        const rc = linux.read(fds[0], buffer[len..].ptr, buffer.len - len);
        if (linux.errno(rc) == .INTR) continue;
        if (linux.errno(rc) != .SUCCESS or rc == 0) break;
        len += rc;
    }
    var status: u32 = 0;
    while (linux.errno(linux.waitpid(pid, &status, 0)) == .INTR) {}
    const output = buffer[0..len];
    try testing.expect(linux.W.IFSIGNALED(status));
    try testing.expectEqual(linux.SIG.ABRT, linux.W.TERMSIG(status));
    if (std.mem.indexOf(u8, output, message) == null) {
        std.debug.print("the child wrote:\n{s}\n", .{output});
        return error.TestUnexpectedResult;
    }
}

const thread_rule = "a Sim runs every task on the thread that called run";

fn useOutsideRun() void {
    var sim = Sim.init(std.heap.page_allocator, .{ .seed = 1 }) catch return;
    _ = Io.Clock.awake.now(sim.io());
}

fn useFromAnotherThread() void {
    var sim = Sim.init(std.heap.page_allocator, .{ .seed = 1 }) catch return;
    const Scenario = struct {
        fn run(io: Io) !void {
            const thread = try std.Thread.spawn(.{}, readClock, .{io});
            thread.join();
        }
        fn readClock(io: Io) void {
            _ = Io.Clock.awake.now(io);
        }
    };
    sim.run(Scenario.run, .{}) catch return;
}

test "sim: its Io used outside run, or from another thread, panics naming the rule" {
    try skipInExecutorRuns();
    try expectChildPanics(useOutsideRun, thread_rule);
    try expectChildPanics(useFromAnotherThread, thread_rule);
}

test "sim: WEFT_SEED is read as decimal or 0x hexadecimal, and anything else is refused" {
    const State = @import("../sim/State.zig");
    try testing.expectEqual(@as(u64, 42), try State.parseSeed("42"));
    try testing.expectEqual(@as(u64, 42), try State.parseSeed("0x2a"));
    try testing.expectError(error.InvalidEnvironment, State.parseSeed("forty-two"));
    try testing.expectError(error.InvalidEnvironment, State.parseSeed("-1"));
    try testing.expectError(error.InvalidEnvironment, State.parseSeed(""));
}
