//! chain: chained wake-ups. `tasks` tasks (default 100) stand in a ring, each waiting on its own
//! `weft.sync.Notify` (a stored permit, as Tokio's `Notify`); a token goes round the ring `laps`
//! times (default 10,000): the task holding it checks and advances the hop count, then wakes
//! the next task and waits for its own next turn. One task runs at a time, so every hop is one
//! wake-up whose latency is all the time there is: with 2 executors, a woken task may run on the
//! waker's executor (the LIFO slot) or be stolen by the other, and the chain shows what either
//! costs. The peers (bench/peers, scenario `chain`) run the same ring with tokio::sync::Notify
//! and with Go channels of capacity 1.
//!
//! The hop count is handed from task to task with the token (ordered by the Notify), and each
//! task checks it reads exactly `lap * tasks + index`: a lost wake-up stops the chain (the child
//! is killed at the time bound, `status=timeout`), a duplicated one breaks the count
//! (`error=WrongOrder`). The clock starts after the tasks are spawned, at the first wake, and
//! stops when every task has ended. Reports `ns_per_wake` = wall / (tasks x laps).
//!
//! weft runs with 1 and with 2 executors. Each measurement runs in a child process.
//!
//! Usage: bench-chain [--io threaded|weft|both] [--tasks K] [--laps L] (default weft).
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const bench_name = "chain";
const tasks_default = 100;
const laps_default = 10_000;
/// Bounds the allocation of one measurement (one Notify per task).
const tasks_max = 100_000;
const timeout_ns = 15 * std.time.ns_per_s;

const Result = struct {
    wall_ns: u64,
    ns_per_wake: f64,
    hops: u64,
};

const Ring = struct {
    wakes: []weft.sync.Notify,
    laps: u64,
    /// Advanced only by the task holding the token.
    hops: u64 = 0,
    /// Hops that found the count other than expected.
    wrong: u64 = 0,

    fn hopsTotal(ring: *const Ring) u64 {
        return ring.wakes.len * ring.laps;
    }
};

fn link(io: Io, ring: *Ring, index: usize) Io.Cancelable!void {
    const tasks = ring.wakes.len;
    const next = &ring.wakes[(index + 1) % tasks];
    for (0..ring.laps) |lap| {
        try ring.wakes[index].wait(io);
        if (ring.hops != lap * tasks + index) ring.wrong += 1;
        ring.hops += 1;
        // The last hop of the last lap wakes nobody: every task is then on its way out.
        if (ring.hops < ring.hopsTotal()) next.notifyOne(io);
    }
}

const RunError = Io.Cancelable || Io.ConcurrentError || std.mem.Allocator.Error ||
    error{ WrongOrder, ConfigInvalid };

fn run(io: Io, tasks: u64, laps: u64) RunError!Result {
    if (tasks == 0 or tasks > tasks_max or laps == 0) return error.ConfigInvalid;
    const wakes = try std.heap.smp_allocator.alloc(weft.sync.Notify, tasks);
    defer std.heap.smp_allocator.free(wakes);
    @memset(wakes, .init);
    var ring: Ring = .{ .wakes = wakes, .laps = laps };

    var group: Io.Group = .init;
    // Error path: a refused spawn leaves the tasks already started waiting forever unless they
    // are canceled.
    defer group.cancel(io);
    for (0..tasks) |index| try group.concurrent(io, link, .{ io, &ring, index });

    const start_ns = harness.monotonicNs();
    wakes[0].notifyOne(io);
    try group.await(io);
    const wall_ns = harness.monotonicNs() - start_ns;

    if (ring.wrong != 0 or ring.hops != ring.hopsTotal()) return error.WrongOrder;
    return .{
        .wall_ns = wall_ns,
        .ns_per_wake = @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(ring.hops)),
        .hops = ring.hops,
    };
}

fn measure(io: Io, config: harness.Config) !Result {
    return run(io, try config.int(u64, "tasks"), try config.int(u64, "laps"));
}

pub fn main(init: std.process.Init) !void {
    return harness.main(weft, init, measure, plan);
}

fn plan(session: *harness.Session, args: []const []const u8) !void {
    const words = [_][]const u8{
        try session.word("tasks", try harness.flagInt(args, "--tasks", tasks_default)),
        try session.word("laps", try harness.flagInt(args, "--laps", laps_default)),
    };
    const kinds = try harness.ioKinds(args, &.{.weft});
    try session.reportEach(bench_name, kinds, &.{ 1, 2 }, &words, timeout_ns);
}
