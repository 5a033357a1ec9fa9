//! The seed scenario, std.Io.Threaded and weft side by side in one run: N tasks each call
//! `io.sleep(1 s)`, all started with `Group.concurrent` and awaited with `Group.await`, for
//! N = 10,000 and 100,000 (and 1,000,000 on weft's dense stacks with `--million`).
//!
//! The scenario itself is `sleep_seed.run(io, tasks)` in bench/support/sleep_seed.zig: a plain
//! function of a `std.Io`, unaware of which runtime is behind it. The only weft-specific line a
//! program needs is the construction of the runtime (see `harness.Backend`):
//!
//!     var rt = try weft.Runtime.init(gpa, .{});
//!     defer rt.deinit();
//!     const io = rt.io();
//!
//! Every row runs in its own child process (this program re-executed with `--child ...`), so
//! that the peak RSS shown is that row's alone (`wait4`'s `ru_maxrss`). Wall time is measured in
//! the child, from the first spawn to the return of `Group.await`; the ideal is 1 s.
//!
//! Usage: ./zigw build demo [-- --io threaded|weft|both] [--stack-mode guarded|dense] [--million]
const std = @import("std");
const weft = @import("weft");
const harness = @import("harness");

/// Threaded needs about 12 s and 3.9 GiB for 100k sleepers on a 2-core machine; any row still
/// running after this is killed and reported, which keeps the whole demo well under a minute.
const row_timeout_ns = 15 * std.time.ns_per_s;

const Row = struct {
    tasks: u64,
    runtime: harness.IoKind,
    /// weft's stack mode for this row; null keeps `weft.Runtime.Options`' default.
    stack: ?[]const u8,
};

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    if (harness.isChild(args)) {
        return harness.childMain(weft, init, args, harness.sleep_seed.measure);
    }

    const kinds = try harness.ioKinds(args, &.{ .threaded, .weft });
    const stack_flag = harness.flagValue(args, "--stack-mode");

    var rows: std.ArrayList(Row) = .empty;
    for ([_]u64{ 10_000, 100_000 }) |tasks| {
        for (kinds) |kind| try rows.append(arena, .{
            .tasks = tasks,
            .runtime = kind,
            .stack = if (kind == .weft) stack_flag else null,
        });
    }
    // A million guarded stacks would need a million mappings (vm.max_map_count is 65,530);
    // the dense mode carves stacks from shared slabs instead.
    if (harness.hasFlag(args, "--million")) {
        try rows.append(arena, .{ .tasks = 1_000_000, .runtime = .weft, .stack = "dense" });
    }

    var buffer: [4096]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    const out = &stdout.interface;
    var session: harness.Session = .{ .arena = arena, .environ = init.minimal.environ, .out = out };

    try out.print(
        \\N tasks x io.sleep(1 s) via Group.concurrent, then Group.await (ideal wall: 1 s).
        \\Each row runs in its own child process; peak RSS is that child's ru_maxrss.
        \\
        \\{s:>9}  {s:<8}  {s:<7}  {s:>9}  {s:>9}  {s:>10}  {s}
        \\
    , .{ "tasks", "runtime", "stack", "wall", "spawn", "peak RSS", "note" });
    try out.flush();
    for (rows.items) |row| try runRow(&session, row);
}

fn runRow(session: *harness.Session, row: Row) !void {
    const arena = session.arena;
    var config: std.ArrayList([]const u8) = .empty;
    try config.append(arena, try session.word("runtime", row.runtime));
    if (row.stack) |stack| try config.append(arena, try session.word("stack", stack));
    try config.append(arena, try session.word("tasks", row.tasks));

    const outcome = try session.measure(config.items, row_timeout_ns);
    const out = session.out;
    const stack_label = if (row.runtime == .threaded) "-" else row.stack orelse "default";
    try out.print("{f}  {s:<8}  {s:<7}  ", .{ Count{ .value = row.tasks }, @tagName(row.runtime), stack_label });

    const finished = outcome.end == .exited and outcome.end.exited == 0;
    if (finished) {
        try out.print("{f}  {f}  ", .{
            Seconds{ .ns = outcome.fieldInt("wall_ns") },
            Seconds{ .ns = outcome.fieldInt("spawn_ns") },
        });
    } else {
        try out.print("{s:>9}  {s:>9}  ", .{ "-", "-" });
    }
    try out.print("{f}", .{Size{ .kib = outcome.rss_kib }});
    var note_buffer: [160]u8 = undefined;
    var note: std.Io.Writer = .fixed(&note_buffer);
    writeNote(&note, outcome) catch {}; // a note longer than the buffer is cut, not fatal
    if (note.end > 0) try out.print("  {s}", .{note.buffered()});
    try out.writeByte('\n');
    try out.flush();
}

fn writeNote(out: *std.Io.Writer, outcome: harness.subprocess.Outcome) !void {
    switch (outcome.end) {
        .timed_out => try out.print("did not finish in {d} s (killed; RSS is its peak so far)", .{
            row_timeout_ns / std.time.ns_per_s,
        }),
        .signaled => |signal| try out.print("crashed with signal {t}", .{signal}),
        .exited => |code| if (code != 0) {
            const name = outcome.field("error") orelse "unknown, see stderr above";
            try out.print("failed (exit {d}): error.{s}", .{ code, name });
        } else {
            const unavailable = outcome.fieldInt("unavailable") orelse 0;
            if (unavailable > 0) {
                try out.print("{f} spawns refused with error.ConcurrencyUnavailable", .{
                    Count{ .value = unavailable },
                });
            }
        },
    }
}

/// Formats a count with thousands separators, right-aligned in 9 columns: "  100,000".
const Count = struct {
    value: u64,

    pub fn format(count: Count, w: *std.Io.Writer) std.Io.Writer.Error!void {
        var digits: [32]u8 = undefined;
        var grouped: [40]u8 = undefined;
        const plain = std.fmt.bufPrint(&digits, "{d}", .{count.value}) catch unreachable;
        var len: usize = 0;
        for (plain, 0..) |digit, index| {
            if (index > 0 and (plain.len - index) % 3 == 0) {
                grouped[len] = ',';
                len += 1;
            }
            grouped[len] = digit;
            len += 1;
        }
        try w.alignBufferOptions(grouped[0..len], .{ .width = 9, .alignment = .right });
    }
};

/// Nanoseconds as seconds with two decimals, right-aligned in 9 columns: "   1.02 s".
const Seconds = struct {
    ns: ?u64,

    pub fn format(seconds: Seconds, w: *std.Io.Writer) std.Io.Writer.Error!void {
        var text: [32]u8 = undefined;
        const shown = if (seconds.ns) |ns| std.fmt.bufPrint(&text, "{d:.2} s", .{
            @as(f64, @floatFromInt(ns)) / std.time.ns_per_s,
        }) catch unreachable else "?";
        try w.alignBufferOptions(shown, .{ .width = 9, .alignment = .right });
    }
};

/// KiB as MiB or GiB with one decimal, right-aligned in 10 columns: "  46.1 MiB".
const Size = struct {
    kib: u64,

    pub fn format(size: Size, w: *std.Io.Writer) std.Io.Writer.Error!void {
        var text: [32]u8 = undefined;
        const kib: f64 = @floatFromInt(size.kib);
        const shown = if (size.kib >= 1024 * 1024)
            std.fmt.bufPrint(&text, "{d:.2} GiB", .{kib / (1024 * 1024)}) catch unreachable
        else
            std.fmt.bufPrint(&text, "{d:.1} MiB", .{kib / 1024}) catch unreachable;
        try w.alignBufferOptions(shown, .{ .width = 10, .alignment = .right });
    }
};
