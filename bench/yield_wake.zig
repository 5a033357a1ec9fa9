//! yield_wake: wake-to-resume latency of a blocked task, through `std.Io.Event` (futexWait /
//! futexWake underneath).
//!
//! Two tasks, A and B, and two events, `a_turn` and `b_turn`. A waits for `a_turn`, resets it,
//! then sets `b_turn`; B sets `a_turn`, waits for `b_turn`, resets it, and loops. Each round is
//! therefore two wakes, each of a task that is (usually) already blocked in `Event.wait`, and
//! each followed by the waker blocking in turn. Reports `ns_per_wake` = wall / (2 * rounds):
//! the time from one task's `set` to the other task running and handing the turn back, halved.
//!
//! Resetting is safe: a task resets its own event only after its wait returned, and the other
//! task sets that event again only after seeing the reset task's own `set`, which comes later.
//!
//! weft runs with 1 and with 2 executors. Each measurement runs in a child process.
//!
//! Usage: bench-yield_wake [--io threaded|weft|both] [--rounds N] (default weft; 1,000,000
//! rounds on weft, 100,000 on Threaded, where each wake is a cross-thread futex wake).
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const bench_name = "yield_wake";
const weft_rounds_default = 1_000_000;
const threaded_rounds_default = 100_000;
const timeout_ns = 15 * std.time.ns_per_s;

const Result = struct {
    wall_ns: u64,
    ns_per_wake: f64,
};

const Turns = struct {
    a_turn: Io.Event = .unset,
    b_turn: Io.Event = .unset,
    /// Rounds task A completed; checked after the await so that a lost wake cannot pass as fast.
    a_rounds: u64 = 0,
};

fn taskA(io: Io, turns: *Turns, rounds: u64) Io.Cancelable!void {
    for (0..rounds) |_| {
        try turns.a_turn.wait(io);
        turns.a_turn.reset();
        turns.a_rounds += 1;
        turns.b_turn.set(io);
    }
}

fn taskB(io: Io, turns: *Turns, rounds: u64) Io.Cancelable!void {
    for (0..rounds) |_| {
        turns.a_turn.set(io);
        try turns.b_turn.wait(io);
        turns.b_turn.reset();
    }
}

fn run(io: Io, rounds: u64) (Io.Cancelable || Io.ConcurrentError || error{LostWake})!Result {
    var turns: Turns = .{};
    var group: Io.Group = .init;
    // Error path: a refused second spawn leaves the first task waiting forever unless canceled.
    defer group.cancel(io);

    const start_ns = harness.monotonicNs();
    try group.concurrent(io, taskA, .{ io, &turns, rounds });
    try group.concurrent(io, taskB, .{ io, &turns, rounds });
    try group.await(io);
    const wall_ns = harness.monotonicNs() - start_ns;

    if (turns.a_rounds != rounds) return error.LostWake;
    const wakes: f64 = @floatFromInt(2 * rounds);
    return .{ .wall_ns = wall_ns, .ns_per_wake = @as(f64, @floatFromInt(wall_ns)) / wakes };
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
