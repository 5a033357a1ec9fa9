//! `weft.Metrics`: a snapshot of what a runtime has done, taken by `Runtime.metrics` from any
//! thread without stopping anything.
//!
//! ```
//! const metrics = rt.metrics();
//! try metrics.writeText(stderr);        // one aligned table
//! try metrics.writePrometheus(writer);  // the Prometheus text format, `weft_*` series
//! ```
//!
//! Each executor counts into counters only its own thread writes (os/Counter.zig: a plain
//! store, no locked instruction); a snapshot reads them with relaxed loads, so its numbers are
//! each recent, not one instant: a task counted as spawned may not be counted as resumed yet.
//! Built with `-Dmetrics=false` the counters are compiled out and every count reads zero (the
//! gauges that the runtime keeps anyway, such as `tasks_live`, still read true).
//!
//! The definitions of every figure are in docs/METRICS.md.
const Metrics = @This();

const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;
const config = @import("config.zig");
const os = @import("os/linux.zig");
const Counter = @import("os/Counter.zig");
const Scheduler = @import("sched/Scheduler.zig");

/// Whether the counters are compiled in (`-Dmetrics`, default true).
pub const enabled = Counter.enabled;

/// Since `Runtime.init`.
uptime_ns: u64,
/// Tasks alive now: spawned and not yet awaited or ended (the main task not counted).
tasks_live: u64,
/// The most tasks alive at once since `Runtime.init`.
tasks_live_peak: u64,
/// Tasks started since `Runtime.init`, from executors and from other threads.
tasks_spawned: u64,
/// Tasks found holding an executor past `Runtime.Options.stall_threshold_ns` (each reported
/// once through `std.log`); zero with the stall detector off. Counted with `-Dmetrics=false`
/// too: it is the watchdog's, not on any hot path.
stalls: u64 = 0,
/// Fiber stacks mapped (in use, free for reuse, or never handed out yet), and in use.
stacks_mapped: u64,
stacks_in_use: u64,
/// The address space of one stack (`Runtime.Options.stack_size_bytes`).
stack_size_bytes: u64,
executor_count: u32,
/// The first `executor_count` are the runtime's; see `executorsSlice`.
executors: [config.executors_max]Executor,

/// What one executor has done. Counts are since `Runtime.init`; `queued` is a gauge.
pub const Executor = struct {
    /// Tasks switched to: each start or resumption.
    tasks_resumed: u64 = 0,
    /// Tasks started by code running on this executor.
    tasks_spawned: u64 = 0,
    /// Tasks this executor took from the run queues of others, and others took from its own.
    tasks_stolen: u64 = 0,
    tasks_stolen_by_others: u64 = 0,
    /// Times the next task came from the LIFO slot: the task the one before it woke.
    lifo_hits: u64 = 0,
    /// Times the thread slept in the kernel with nothing to run, and wake-ups other threads
    /// sent it.
    sleeps: u64 = 0,
    wakeups: u64 = 0,
    /// Time running tasks or looking for them, and time asleep in the kernel.
    busy_ns: u64 = 0,
    idle_ns: u64 = 0,
    /// Tasks in its run queue and injection queue now (not the LIFO slot or the queue of
    /// tasks bound to it, which only its own thread may read).
    queued: u64 = 0,
    /// Loop operations started, ended (with any result) and canceled; loop polls.
    io_submitted: u64 = 0,
    io_completed: u64 = 0,
    io_canceled: u64 = 0,
    polls: u64 = 0,
    /// Timers started, and those that went off (the rest were stopped first).
    timers_armed: u64 = 0,
    timers_fired: u64 = 0,
};

/// Takes the snapshot; `tasks_live` and `tasks_live_peak` are the runtime's own gauges.
pub fn collect(scheduler: *const Scheduler, tasks_live: u64, tasks_live_peak: u64) Metrics {
    const now_ns = os.monotonicNs();
    const uptime_ns = now_ns -| scheduler.started_ns;
    var metrics: Metrics = .{
        .uptime_ns = uptime_ns,
        .tasks_live = tasks_live,
        .tasks_live_peak = @max(tasks_live_peak, tasks_live),
        .tasks_spawned = scheduler.spawned_elsewhere.read(),
        .stacks_mapped = 0,
        .stacks_in_use = 0,
        .stack_size_bytes = 0,
        .executor_count = @intCast(scheduler.executors.len),
        .executors = undefined,
    };
    var acquired: u64 = 0;
    var released: u64 = 0;
    for (scheduler.executors, metrics.executors[0..scheduler.executors.len]) |*executor, *out| {
        const counters = &executor.counters;
        const loop = &executor.loop.counters;
        const idle_ns = counters.idle_ns.read();
        out.* = .{
            .tasks_resumed = counters.resumed.read(),
            .tasks_spawned = counters.spawned.read(),
            .tasks_stolen = counters.stolen.read(),
            .tasks_stolen_by_others = counters.stolen_by_others.read(),
            .lifo_hits = counters.lifo_hits.read(),
            .sleeps = counters.sleeps.read(),
            .wakeups = loop.wakeups.read(),
            .busy_ns = if (enabled) uptime_ns -| idle_ns else 0,
            .idle_ns = idle_ns,
            .queued = executor.ring.len() + executor.inject_count.load(.monotonic),
            .io_submitted = loop.submitted.read(),
            .io_completed = loop.completed.read(),
            .io_canceled = loop.canceled.read(),
            .polls = loop.polls.read(),
            .timers_armed = counters.timers_armed.read(),
            .timers_fired = counters.timers_fired.read(),
        };
        metrics.tasks_spawned += out.tasks_spawned;
        metrics.stacks_mapped += executor.stacks.counters.mapped.read();
        acquired += executor.stacks.counters.acquired.read();
        released += executor.stacks.counters.released.read();
        metrics.stack_size_bytes = executor.stacks.stack_size_bytes;
    }
    // Read one pool after another while stacks move between them: a release may be seen
    // without its acquire.
    metrics.stacks_in_use = acquired -| released;
    return metrics;
}

pub fn executorsSlice(metrics: *const Metrics) []const Executor {
    return metrics.executors[0..metrics.executor_count];
}

/// The snapshot as text: the runtime's figures on one line, then one row per executor.
pub fn writeText(metrics: *const Metrics, writer: *Io.Writer) Io.Writer.Error!void {
    try writer.print(
        "weft: up {d:.3} s, tasks {d} live (peak {d}), {d} spawned, {d} stalls, stacks {d} " ++
            "mapped ({d} KiB each), {d} in use{s}\n",
        .{
            @as(f64, @floatFromInt(metrics.uptime_ns)) / std.time.ns_per_s,
            metrics.tasks_live,
            metrics.tasks_live_peak,
            metrics.tasks_spawned,
            metrics.stalls,
            metrics.stacks_mapped,
            metrics.stack_size_bytes / 1024,
            metrics.stacks_in_use,
            if (enabled) "" else " (counters compiled out: -Dmetrics=false)",
        },
    );
    const columns = comptime executorColumns();
    try writer.writeAll("executor");
    inline for (columns) |column| try writer.print(" {s:>[1]}", .{ column.title, column.width });
    try writer.writeAll("\n");
    for (metrics.executorsSlice(), 0..) |executor, index| {
        try writer.print("{d:>8}", .{index});
        inline for (columns) |column| {
            const value = @field(executor, column.field);
            if (column.per_ms) {
                try writer.print(" {d:>[1]}", .{ value / std.time.ns_per_ms, column.width });
            } else {
                try writer.print(" {d:>[1]}", .{ value, column.width });
            }
        }
        try writer.writeAll("\n");
    }
}

const Column = struct { field: []const u8, title: []const u8, width: usize, per_ms: bool };

fn executorColumns() []const Column {
    const fields = @typeInfo(Executor).@"struct".fields;
    var columns: [fields.len]Column = undefined;
    for (fields, &columns) |field, *column| {
        const per_ms = std.mem.endsWith(u8, field.name, "_ns");
        const title = if (per_ms) field.name[0 .. field.name.len - 3] ++ "_ms" else field.name;
        column.* = .{
            .field = field.name,
            .title = title,
            // Room for a count in the billions.
            .width = @max(title.len, 10),
            .per_ms = per_ms,
        };
    }
    const final = columns;
    return &final;
}

/// The snapshot in the Prometheus text exposition format (version 0.0.4): every series named
/// `weft_*` with its unit in the name, counters ending in `_total`, per-executor series
/// labelled `executor="N"`, each with its HELP and TYPE lines.
pub fn writePrometheus(metrics: *const Metrics, writer: *Io.Writer) Io.Writer.Error!void {
    const stack_bytes = metrics.stack_size_bytes;
    const runtime_values = [runtime_series.len]u64{
        metrics.uptime_ns,
        metrics.tasks_live,
        metrics.tasks_live_peak,
        metrics.tasks_spawned,
        metrics.stalls,
        metrics.stacks_mapped * stack_bytes,
        metrics.stacks_in_use * stack_bytes,
        metrics.executor_count,
    };
    for (runtime_series, runtime_values) |series, value| {
        try series.writeHeader(writer);
        try writer.print("{s} ", .{series.name});
        try series.writeValue(writer, value);
    }
    inline for (executor_series) |series| {
        try series.writeHeader(writer);
        for (metrics.executorsSlice(), 0..) |executor, index| {
            try writer.print("{s}{{executor=\"{d}\"}} ", .{ series.name, index });
            try series.writeValue(writer, @field(executor, series.field));
        }
    }
}

const Series = struct {
    /// The `Executor` field it exports (executor series only).
    field: []const u8 = "",
    name: []const u8,
    help: []const u8,
    kind: enum { counter, gauge } = .counter,
    /// Nanoseconds, exported in seconds.
    seconds: bool = false,

    fn writeHeader(series: Series, writer: *Io.Writer) Io.Writer.Error!void {
        try writer.print("# HELP {s} {s}\n# TYPE {s} {t}\n", .{
            series.name, series.help, series.name, series.kind,
        });
    }

    fn writeValue(series: Series, writer: *Io.Writer, value: u64) Io.Writer.Error!void {
        if (series.seconds) {
            const value_s = @as(f64, @floatFromInt(value)) / std.time.ns_per_s;
            try writer.print("{d}\n", .{value_s});
        } else {
            try writer.print("{d}\n", .{value});
        }
    }
};

const runtime_series = [_]Series{
    .{
        .name = "weft_uptime_seconds",
        .help = "Time since the runtime started.",
        .kind = .gauge,
        .seconds = true,
    },
    .{ .name = "weft_tasks_live", .help = "Tasks alive now.", .kind = .gauge },
    .{ .name = "weft_tasks_live_peak", .help = "The most tasks alive at once.", .kind = .gauge },
    .{ .name = "weft_tasks_spawned_total", .help = "Tasks started." },
    .{
        .name = "weft_stalls_total",
        .help = "Tasks found holding an executor past the stall threshold.",
    },
    .{
        .name = "weft_stacks_mapped_bytes",
        .help = "Address space of the fiber stacks mapped.",
        .kind = .gauge,
    },
    .{
        .name = "weft_stacks_in_use_bytes",
        .help = "Address space of the fiber stacks in use.",
        .kind = .gauge,
    },
    .{ .name = "weft_executors", .help = "Executor threads.", .kind = .gauge },
};

const executor_series = [_]Series{
    .{
        .field = "tasks_resumed",
        .name = "weft_executor_tasks_resumed_total",
        .help = "Tasks switched to (each start or resumption).",
    },
    .{
        .field = "tasks_spawned",
        .name = "weft_executor_tasks_spawned_total",
        .help = "Tasks started by code on this executor.",
    },
    .{
        .field = "tasks_stolen",
        .name = "weft_executor_tasks_stolen_total",
        .help = "Tasks this executor took from the run queues of others.",
    },
    .{
        .field = "tasks_stolen_by_others",
        .name = "weft_executor_tasks_stolen_by_others_total",
        .help = "Tasks others took from this executor's run queue.",
    },
    .{
        .field = "lifo_hits",
        .name = "weft_executor_lifo_hits_total",
        .help = "Next tasks taken from the LIFO slot.",
    },
    .{
        .field = "sleeps",
        .name = "weft_executor_sleeps_total",
        .help = "Sleeps in the kernel with nothing to run.",
    },
    .{
        .field = "wakeups",
        .name = "weft_executor_wakeups_total",
        .help = "Wake-ups other threads sent this executor.",
    },
    .{
        .field = "busy_ns",
        .name = "weft_executor_busy_seconds_total",
        .help = "Time not asleep in the kernel.",
        .seconds = true,
    },
    .{
        .field = "idle_ns",
        .name = "weft_executor_idle_seconds_total",
        .help = "Time asleep in the kernel.",
        .seconds = true,
    },
    .{
        .field = "queued",
        .name = "weft_executor_queued_tasks",
        .help = "Tasks in the run and injection queues now.",
        .kind = .gauge,
    },
    .{
        .field = "io_submitted",
        .name = "weft_executor_io_submitted_total",
        .help = "Loop operations started.",
    },
    .{
        .field = "io_completed",
        .name = "weft_executor_io_completed_total",
        .help = "Loop operations ended, with any result.",
    },
    .{
        .field = "io_canceled",
        .name = "weft_executor_io_canceled_total",
        .help = "Cancel requests for loop operations in flight.",
    },
    .{ .field = "polls", .name = "weft_executor_polls_total", .help = "Polls of the loop." },
    .{
        .field = "timers_armed",
        .name = "weft_executor_timers_armed_total",
        .help = "Timers started.",
    },
    .{
        .field = "timers_fired",
        .name = "weft_executor_timers_fired_total",
        .help = "Timers that went off.",
    },
};

comptime {
    // Every executor figure is exported, once, in the order of its field.
    const fields = @typeInfo(Executor).@"struct".fields;
    assert(executor_series.len == fields.len);
    for (fields, executor_series) |field, series| {
        assert(std.mem.eql(u8, field.name, series.field));
    }
}
