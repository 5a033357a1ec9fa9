//! sleep-N: N tasks each `io.sleep(1 s)`, started with `Group.concurrent`, then `Group.await`
//! (the seed scenario, `sleep_seed.run` in bench/support/). Reports the wall time from the first
//! spawn to the end of the await (ideal: 1 s), the spawning part of it, the spawns refused with
//! `error.ConcurrencyUnavailable`, the page tables once all were spawned, and the peak RSS of
//! the process.
//!
//! N = 10,000 and 100,000 with weft's default stacks; 1,000,000 with `stack=dense` (stacks without
//! guard pages, canary-checked) and again with guarded stacks, both 256 KiB (`stack_kib=256`). Each measurement runs in its
//! own child process so that each peak RSS is that N's alone (wait4's ru_maxrss).
//!
//! Usage: bench-sleep [--io threaded|weft|both] (default weft) [--stack-kib A,B,...]. On
//! std.Io.Threaded, 100,000 is bounded at 10 s and 1,000,000 is skipped: it takes more than
//! 60 s there. `--stack-kib` runs each weft case once per stack size given (KiB), one
//! after the other: the cost of a larger `stack_size_bytes` side by side.
const std = @import("std");
const weft = @import("weft");
const harness = @import("harness");

const bench_name = "sleep";

/// `stack_kib`: the `stack_size_bytes` a case runs with, in KiB (null: the default, 1 MiB).
const Case = struct { tasks: u64, stack: []const u8, stack_kib: ?u64 = null };
/// 1M also runs on guarded stacks, as the default mode is: whether it reaches a million (or
/// fails with a clear error) is itself one of weft's goals. Both 1M cases use the
/// setting docs/RUNTIME.md gives for a million tasks, 256 KiB stacks (the default's page tables cost 2 KiB
/// a task; `--stack-kib` measures the sizes against each other).
const cases = [_]Case{
    .{ .tasks = 10_000, .stack = "default" },
    .{ .tasks = 100_000, .stack = "default" },
    .{ .tasks = 1_000_000, .stack = "dense", .stack_kib = 256 },
    .{ .tasks = 1_000_000, .stack = "default", .stack_kib = 256 },
};
/// weft's bar is 1M sleepers in 3 s; 15 s leaves room for a slow run while keeping a hang short.
const weft_timeout_ns: u64 = 15 * std.time.ns_per_s;
/// Keeps the Threaded run of this program under 15 s (10k takes about 4 s there).
const threaded_timeout_ns: u64 = 10 * std.time.ns_per_s;

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    if (harness.isChild(args)) {
        return harness.childMain(weft, init, args, harness.sleep_seed.measure);
    }

    var buffer: [1024]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    var session: harness.Session = .{
        .arena = arena,
        .environ = init.minimal.environ,
        .out = &stdout.interface,
    };

    const stack_sizes = harness.flagValue(args, "--stack-kib");
    for (try harness.ioKinds(args, &.{.weft})) |kind| {
        for (cases) |case| {
            var sizes = std.mem.splitScalar(u8, stack_sizes orelse "", ',');
            while (sizes.next()) |size| {
                const kib = try parseKib(size) orelse case.stack_kib;
                if (kind == .threaded and kib != null) continue; // Threaded has no such option
                try runCase(&session, kind, case, kib);
            }
        }
    }
}

/// One size of `--stack-kib`; null for none given (the runtime's default).
fn parseKib(text: []const u8) error{InvalidArgs}!?u64 {
    if (text.len == 0) return null;
    return std.fmt.parseInt(u64, text, 10) catch {
        std.debug.print("--stack-kib: \"{s}\" is not a size in KiB\n", .{text});
        return error.InvalidArgs;
    };
}

fn runCase(session: *harness.Session, kind: harness.IoKind, case: Case, stack_kib: ?u64) !void {
    const arena = session.arena;
    var config: std.ArrayList([]const u8) = .empty;
    try config.append(arena, try session.word("runtime", kind));
    if (kind == .weft) try config.append(arena, try session.word("stack", case.stack));
    if (stack_kib) |kib| try config.append(arena, try session.word("stack_kib", kib));
    try config.append(arena, try session.word("tasks", case.tasks));
    if (kind == .threaded) {
        // Threaded has no stack modes: run each N once, and not at all past 100k.
        if (!std.mem.eql(u8, case.stack, "default")) return;
        if (case.tasks > 100_000) {
            try session.skip(bench_name, config.items, "needs_over_60_s");
            return;
        }
    }
    const timeout_ns = if (kind == .weft) weft_timeout_ns else threaded_timeout_ns;
    _ = try session.report(bench_name, config.items, timeout_ns);
}
