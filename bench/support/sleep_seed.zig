//! The sleep scenario: N tasks, each `io.sleep(1 s)`, all started with
//! `Group.concurrent` and then awaited together. Shared by `examples/demo.zig` and
//! `bench/sleep.zig` so that both measure exactly the same thing.
//!
//! `Group.concurrent` rather than `Group.async`: the point is that all N sleeps overlap. With
//! `async` an implementation may legally run a task inline, and on std.Io.Threaded most would
//! (its `async_limit` is CPU count - 1, i.e. 1 here), turning the scenario into N serial seconds.
const std = @import("std");
const Io = std.Io;
const harness = @import("harness.zig");

pub const Result = struct {
    /// From the first spawn to the return of `Group.await`.
    wall_ns: u64,
    /// The spawning part of `wall_ns`: how long the N `Group.concurrent` calls took.
    spawn_ns: u64,
    /// Tasks that were not started because the Io returned `error.ConcurrencyUnavailable`.
    unavailable: u64,
    /// The process's page tables (VmPTE) once every task was spawned, in KiB: memory the
    /// peak RSS does not count, which grows with how far apart the touched stack pages lie
    /// (one 4 KiB table per 2 MiB of address space in use). 0 where it cannot be read.
    page_tables_kib: u64,
};

pub const sleep_duration: Io.Duration = .fromSeconds(1);

fn sleepOnce(io: Io) Io.Cancelable!void {
    try io.sleep(sleep_duration, .awake);
}

/// Starts `tasks` sleepers, then waits for all of them. A refused spawn is counted, not fatal:
/// how many tasks a runtime refuses is part of what the scenario shows.
pub fn run(io: Io, tasks: u64) Io.Cancelable!Result {
    var group: Io.Group = .init;
    // Only reached on the error path (await failed): `cancel` is a no-op on an empty group.
    defer group.cancel(io);

    var unavailable: u64 = 0;
    const start_ns = harness.monotonicNs();
    for (0..tasks) |_| {
        group.concurrent(io, sleepOnce, .{io}) catch |err| switch (err) {
            error.ConcurrencyUnavailable => unavailable += 1,
        };
    }
    const spawned_ns = harness.monotonicNs();
    const page_tables_kib = pageTablesKib(io);
    try group.await(io);
    const end_ns = harness.monotonicNs();
    return .{
        .wall_ns = end_ns - start_ns,
        .spawn_ns = spawned_ns - start_ns,
        .unavailable = unavailable,
        .page_tables_kib = page_tables_kib,
    };
}

/// VmPTE from /proc/self/status; 0 if it cannot be read.
fn pageTablesKib(io: Io) u64 {
    var buffer: [4096]u8 = undefined;
    const status = Io.Dir.cwd().readFile(io, "/proc/self/status", &buffer) catch return 0;
    const key = "VmPTE:";
    const start = (std.mem.indexOf(u8, status, key) orelse return 0) + key.len;
    const end = std.mem.indexOfScalarPos(u8, status, start, '\n') orelse return 0;
    const value = std.mem.trim(u8, status[start..end], " \tkB");
    return std.fmt.parseInt(u64, value, 10) catch 0;
}

/// `harness.childMain` entry: reads `tasks=` from the config.
pub fn measure(io: Io, config: harness.Config) !Result {
    return run(io, try config.int(u64, "tasks"));
}
