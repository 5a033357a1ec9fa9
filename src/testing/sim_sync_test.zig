//! weft.sync's stress scenarios under weft.Sim, 2,000 seeds each in release builds (250 in
//! Debug, where each run is slower), with preemption at every cancelation point and futex
//! wait: the interleavings the runtime's tests meet by chance, explored by seed and replayable
//! by seed. The scenarios are sync_test.zig's, smaller; each checks its own invariants (every
//! message once and in order per producer, no generation mixed at a barrier, never more
//! holders than permits, no torn read under the RwLock).
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const Sim = @import("../sim/Sim.zig");
const sync = @import("../sync/root.zig");
const sync_test = @import("sync_test.zig");
const skipInExecutorRuns = @import("sim_test.zig").skipInExecutorRuns;
const seedCount = @import("sim_test.zig").seedCount;

const seeds: u64 = if (@import("builtin").mode == .Debug) 250 else 2000;

fn expectPassesAllSeeds(comptime scenario: anytype) !void {
    try skipInExecutorRuns();
    var report_buffer: [16 * 1024]u8 = undefined;
    var report: Io.Writer = .fixed(&report_buffer);
    const checked = try Sim.checkSeeds(testing.allocator, .{
        .seeds = seedCount(seeds),
        .sim = .{ .seed = 0, .preempt_percent = 25 },
        .report = &report,
    }, scenario, .{});
    if (checked.outcome != .passed) {
        std.debug.print("{s}seed {d}: {t} ({?})\n", .{
            report.buffered(), checked.seed, checked.outcome, checked.err,
        });
        return error.TestUnexpectedResult;
    }
}

fn channelScenario(io: Io) !void {
    try sync_test.stress(io, 2, 3, 2, 20);
}

test "sim sync: Channel, 3 producers x 2 consumers, every message once and in order" {
    try expectPassesAllSeeds(channelScenario);
}

fn broadcastScenario(io: Io) !void {
    try sync_test.fanOut(io, 4, 3, 30, false);
}

test "sim sync: Broadcast, 1 sender x 3 receivers, every value in order" {
    try expectPassesAllSeeds(broadcastScenario);
}

fn watchScenario(io: Io) !void {
    try sync_test.watchFanOut(io, 3, 30, false);
}

test "sim sync: Watch, followers see only growing versions and the last value" {
    try expectPassesAllSeeds(watchScenario);
}

fn barrierScenario(io: Io) !void {
    const parties = 4;
    const generations = 10;
    var barrier: sync.Barrier = .init(parties);
    var phase: std.atomic.Value(u32) = .init(0);
    var leaders: std.atomic.Value(u32) = .init(0);
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (0..parties) |_| {
        try group.concurrent(io, barrierParty, .{ io, &barrier, &phase, &leaders, generations });
    }
    try group.await(io);
    if (leaders.load(.monotonic) != generations) return error.WrongLeaders;
}

fn barrierParty(
    io: Io,
    barrier: *sync.Barrier,
    phase: *std.atomic.Value(u32),
    leaders: *std.atomic.Value(u32),
    generations: u32,
) Io.Cancelable!void {
    // A failed check cancels nothing here: it shows as a wrong leader count above.
    sync_test.barrierParty(io, barrier, phase, leaders, generations) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        else => leaders.store(std.math.maxInt(u32), .monotonic),
    };
}

test "sim sync: Barrier, one leader per generation, nobody passes early" {
    try expectPassesAllSeeds(barrierScenario);
}

fn semaphoreScenario(io: Io) !void {
    var semaphore: sync.Semaphore = .init(2);
    var inside: std.atomic.Value(u32) = .init(0);
    var futures: [5]Io.Future(anyerror!void) = undefined;
    for (&futures) |*future| {
        future.* = try io.concurrent(semaphoreUser, .{ io, &semaphore, &inside });
    }
    for (&futures) |*future| try future.await(io);
    if (semaphore.available() != 2) return error.PermitsLost;
}

fn semaphoreUser(io: Io, semaphore: *sync.Semaphore, inside: *std.atomic.Value(u32)) anyerror!void {
    return sync_test.semaphoreUser(io, semaphore, inside, 2, 20);
}

test "sim sync: Semaphore, never more holders than permits, every permit back" {
    try expectPassesAllSeeds(semaphoreScenario);
}

fn rwLockScenario(io: Io) !void {
    const ops = 20;
    var shared: sync_test.RwShared = .{};
    var futures: [5]Io.Future(anyerror!void) = undefined;
    for (&futures, 0..) |*future, index| {
        future.* = try io.concurrent(rwUser, .{ io, &shared, index < 2, ops });
    }
    for (&futures) |*future| try future.await(io);
    if (shared.value != 2 * ops) return error.LostWrite;
    if (shared.reads.load(.monotonic) != 3 * ops) return error.LostRead;
}

fn rwUser(io: Io, shared: *sync_test.RwShared, writer: bool, ops: usize) anyerror!void {
    return sync_test.rwTask(io, shared, writer, ops);
}

test "sim sync: RwLock, one writer or many readers, never a torn read" {
    try expectPassesAllSeeds(rwLockScenario);
}
