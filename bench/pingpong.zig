//! pingpong: two tasks pass a u64 back and forth over two capacity-1 `std.Io.Queue(u64)`s.
//! The pinger puts `i` into `ping` and waits for `i + 1` on `pong`; the ponger takes from `ping`
//! and puts the value plus one into `pong`. Reports `ns_per_round` = wall / rounds, one round
//! being one full round trip (two puts, two gets, and on a fiber runtime two task switches).
//! Every reply is checked, so a lost or reordered message fails the run (`error=LostMessage`).
//!
//! Both tasks are started with `Group.concurrent`: they block on each other, so they must run
//! concurrently. weft runs with 1 and with 2 executors (MISSION.md's 1 / 2 thread columns).
//! Each measurement runs in a child process.
//!
//! Usage: bench-pingpong [--io threaded|weft|both] [--rounds N] (default weft; 1,000,000
//! rounds on weft, 100,000 on Threaded, where a round costs two cross-thread futex wakes).
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const bench_name = "pingpong";
const weft_rounds_default = 1_000_000;
const threaded_rounds_default = 100_000;
const timeout_ns = 15 * std.time.ns_per_s;

const Channel = Io.Queue(u64);

const Result = struct {
    wall_ns: u64,
    ns_per_round: f64,
};

/// What a task reports back, since a group task's own return value is discarded.
const Tally = struct {
    rounds_ok: u64 = 0,
    lost: bool = false,
};

fn pinger(io: Io, ping: *Channel, pong: *Channel, rounds: u64, tally: *Tally) Io.Cancelable!void {
    for (0..rounds) |i| {
        try put(io, ping, i);
        const reply = try get(io, pong);
        if (reply != i + 1) {
            tally.lost = true;
            return;
        }
        tally.rounds_ok += 1;
    }
}

fn ponger(io: Io, ping: *Channel, pong: *Channel, rounds: u64) Io.Cancelable!void {
    for (0..rounds) |_| try put(io, pong, try get(io, ping) + 1);
}

fn put(io: Io, channel: *Channel, value: u64) Io.Cancelable!void {
    channel.putOne(io, value) catch |err| switch (err) {
        error.Closed => unreachable, // the queues are never closed
        error.Canceled => |e| return e,
    };
}

fn get(io: Io, channel: *Channel) Io.Cancelable!u64 {
    return channel.getOne(io) catch |err| switch (err) {
        error.Closed => unreachable, // the queues are never closed
        error.Canceled => |e| return e,
    };
}

fn run(io: Io, rounds: u64) (Io.Cancelable || Io.ConcurrentError || error{LostMessage})!Result {
    var ping_buffer: [1]u64 = undefined;
    var pong_buffer: [1]u64 = undefined;
    var ping: Channel = .init(&ping_buffer);
    var pong: Channel = .init(&pong_buffer);
    var tally: Tally = .{};

    var group: Io.Group = .init;
    // Error path: a refused second spawn leaves the first task blocked on a queue forever
    // unless it is canceled.
    defer group.cancel(io);

    const start_ns = harness.monotonicNs();
    try group.concurrent(io, ponger, .{ io, &ping, &pong, rounds });
    try group.concurrent(io, pinger, .{ io, &ping, &pong, rounds, &tally });
    try group.await(io);
    const wall_ns = harness.monotonicNs() - start_ns;

    if (tally.lost or tally.rounds_ok != rounds) return error.LostMessage;
    return .{
        .wall_ns = wall_ns,
        .ns_per_round = @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(rounds)),
    };
}

fn measure(io: Io, config: harness.Config) !Result {
    return run(io, try config.int(u64, "rounds"));
}

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    if (harness.isChild(args)) return harness.childMain(weft, init, args, measure);

    var buffer: [1024]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    var session: harness.Session = .{
        .arena = arena,
        .environ = init.minimal.environ,
        .out = &stdout.interface,
    };

    for (try harness.ioKinds(args, &.{.weft})) |kind| {
        const rounds_default: u64 = switch (kind) {
            .weft => weft_rounds_default,
            .threaded => threaded_rounds_default,
        };
        const rounds = try harness.flagInt(args, "--rounds", rounds_default);
        const executor_counts: []const u64 = if (kind == .weft) &.{ 1, 2 } else &.{0};
        for (executor_counts) |executors| {
            var config: std.ArrayList([]const u8) = .empty;
            try config.append(arena, try session.word("runtime", kind));
            if (kind == .weft) try config.append(arena, try session.word("executors", executors));
            try config.append(arena, try session.word("rounds", rounds));
            _ = try session.report(bench_name, config.items, timeout_ns);
        }
    }
}
