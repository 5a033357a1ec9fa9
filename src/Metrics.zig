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
//! Lanes and the server are read where they keep their figures: each lane under its own
//! lock (`Lane.figures`; the process's named lanes through `lanes/named.zig`), the server
//! worker through the function it attached to the runtime (`server/Worker.zig`).
//!
//! The definitions of every figure are in docs/METRICS.md.
const Metrics = @This();

const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;
const config = @import("config.zig");
const os = @import("os/host.zig");
const Counter = @import("os/Counter.zig");
const Scheduler = @import("sched/Scheduler.zig");
const Histogram = @import("os/Histogram.zig");
const LaneFigures = @import("lanes/Lane.zig").Figures;
const rejection_errors = @import("lanes/Lane.zig").rejection_errors;
const named = @import("lanes/named.zig");

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
/// How long the stalls that ended lasted (the watchdog's measure; docs/STALLS.md).
stall_time: Histogram.Snapshot = .{},
/// Timers the watchdog fired for an executor held by one task, which would have waited for it
/// (docs/STALLS.md); not in that executor's `timers_fired`. Zero with the stall detector off.
stall_timers_fired: u64 = 0,
/// I/O completions the watchdog delivered for an executor held by one task, whose tasks would
/// have waited for it (docs/STALLS.md); not in that executor's `io_completed`. Zero with the
/// stall detector off.
stall_io_rescued: u64 = 0,
/// Tasks the watchdog moved off an executor held by one task, for another to run them: the
/// task in its LIFO slot, or the main task (docs/RUNTIME.md, "Progress"). Zero with the stall
/// detector off.
stall_handed_over: u64 = 0,
/// Times the watchdog put the spare executor to work, every executor being held with tasks
/// waiting (docs/RUNTIME.md, "Progress"). Zero with the stall detector or the spare off.
spare_activations: u64 = 0,
/// Fiber stacks mapped (in use, free for reuse, or never handed out yet), and in use.
stacks_mapped: u64,
stacks_in_use: u64,
/// The address space of one stack (`Runtime.Options.stack_size_bytes`).
stack_size_bytes: u64,
/// Memory the fiber stacks hold: their resident pages, free stacks' included (a stack keeps
/// the pages it touched when it is reused). Null unless the caller measured it with
/// `Runtime.stacksCommittedBytes`, a page-table walk too costly for every snapshot.
stacks_committed_bytes: ?u64 = null,
executor_count: u32,
/// The first `executor_count` are the runtime's; see `executorsSlice`.
executors: [config.executors_max]Executor,
/// The runtime's blocking lane ("blocking"), its CPU lane ("cpu"), then every named lane of
/// the process (`Lane.Options.name`); see `lanesSlice`.
lane_count: u32,
lanes: [lanes_max]Lane,
/// The `weft.Server` worker this runtime serves, if it serves one.
server: ?Server,

/// Lanes a snapshot holds at most: the runtime's two and the named ones.
pub const lanes_max = named.reserved.len + config.lanes_named_max;

/// One lane: its name (`name.slice()`) and figures. Gauges are now; counts and histograms
/// since the lane started. The histograms count the jobs that ran, each once.
pub const Lane = named.Listed;

/// The errors whose refusals each lane counts (`LaneFigures.rejected`), in that order.
pub const lane_rejection_errors = rejection_errors;

/// What the `weft.Server` worker serving on this runtime has done since it started (one
/// worker per runtime: each of a `.threaded` or `.forked` server has its own): the fields of
/// `ServerGauges`, then those of `ServerCounts`. Built from the two, so that the worker's
/// report (`weft.Server.Report.workers`, a `ServerCounts`) and these figures are one list of
/// counts. (Rejected: a `ServerCounts` field here, which would make users read
/// `server.counts.accepted`; Zig has no embedding that keeps a struct's fields flat.)
pub const Server = Flattened(ServerGauges, ServerCounts);

/// The server worker's gauges, read now (not in its report, which sums workers).
const ServerGauges = struct {
    /// Connections being served now, and at most (`Server.Options.connections_max`).
    connections_open: u64 = 0,
    connections_max: u64 = 0,
    /// Buffers connections hold while a request is under way (`Connection.takeBuffer`: the
    /// HTTP helper's, 16 KiB each), and those mapped, held or kept free for the next requests.
    /// An idle connection holds none.
    buffers_held: u64 = 0,
    buffers_mapped: u64 = 0,
};

/// What one server worker (or, summed with `add`, one server) counted since it started: its
/// report (`weft.Server.Report.workers`) and the counts of its `Metrics.Server`. Counts only
/// grow. Defined here, below server/ in the layers, so that both may name it.
pub const ServerCounts = struct {
    /// Connections accepted, each counted once, refused or not.
    accepted: u64 = 0,
    /// Closed right after accept: `connections_max` were open.
    rejected_full: u64 = 0,
    /// Closed right after accept: no task could be created for them.
    rejected_no_task: u64 = 0,
    /// Idle keep-alive connections closed to admit a new one when `connections_max` were
    /// open (`Server.Options.when_full = .close_idle`).
    closed_idle_for_admission: u64 = 0,
    /// Requests handed to the handler (HTTP: each request whose head was read).
    requests: u64 = 0,
    /// Requests the server answered with an error status itself (malformed framing, oversized
    /// head, a body that broke its framing), then closed.
    requests_rejected: u64 = 0,
    /// Connections cut by each timeout (`Server.Options`): idle, header, body, send, request.
    cut_idle_timeout: u64 = 0,
    cut_header_timeout: u64 = 0,
    cut_body_timeout: u64 = 0,
    cut_send_timeout: u64 = 0,
    cut_request_timeout: u64 = 0,
    /// Idle keep-alive connections whose reading side was shut when the drain's grace period
    /// ended: each ended at once, or after answering a request it had already been sent.
    closed_idle_at_drain: u64 = 0,
    /// Connections still open when the drain deadline passed, cut mid-request.
    cut_at_drain: u64 = 0,
    /// Accepts that failed for lack of fds or memory, and of other causes (logged); each was
    /// retried after a back-off.
    accept_backoffs: u64 = 0,
    accept_errors: u64 = 0,

    pub fn add(counts: *ServerCounts, other: ServerCounts) void {
        inline for (@typeInfo(ServerCounts).@"struct".fields) |field| {
            @field(counts, field.name) += @field(other, field.name);
        }
    }
};

/// A struct of `First`'s fields, then `Second`'s, with their defaults.
fn Flattened(comptime First: type, comptime Second: type) type {
    const fields = @typeInfo(First).@"struct".fields ++ @typeInfo(Second).@"struct".fields;
    var names: [fields.len][]const u8 = undefined;
    var types: [fields.len]type = undefined;
    var attributes: [fields.len]std.builtin.Type.StructField.Attributes = undefined;
    for (fields, &names, &types, &attributes) |field, *name, *T, *attribute| {
        name.* = field.name;
        T.* = field.type;
        attribute.* = .{ .default_value_ptr = field.default_value_ptr };
    }
    return @Struct(.auto, null, &names, &types, &attributes);
}

/// Where `collect` finds what the scheduler does not hold.
pub const Sources = struct {
    /// The runtime's own gauges.
    tasks_live: u64,
    tasks_live_peak: u64,
    /// The runtime's lanes (zeros while not started).
    blocking: LaneFigures,
    cpu: LaneFigures,
    server: ?Server,
};

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
    /// The longest run of one task on this executor that the watchdog saw, an ongoing one
    /// included: from the first of its looks that saw the run to the last (the stall's exact
    /// end for a reported stall). Short by up to a look (a quarter of the stall threshold);
    /// runs shorter than a look count as 0. Zero with the stall detector off.
    held_max_ns: u64 = 0,
};

/// Takes the snapshot: the scheduler's counters, the lanes' figures (the process's named
/// lanes read under their list's lock) and the rest from `sources`.
pub fn collect(scheduler: *const Scheduler, sources: Sources) Metrics {
    const now_ns = os.monotonicNs();
    const uptime_ns = now_ns -| scheduler.started_ns;
    var metrics: Metrics = .{
        .uptime_ns = uptime_ns,
        .tasks_live = sources.tasks_live,
        .tasks_live_peak = @max(sources.tasks_live_peak, sources.tasks_live),
        .tasks_spawned = scheduler.spawned_elsewhere.read(),
        .stacks_mapped = 0,
        .stacks_in_use = 0,
        .stack_size_bytes = 0,
        .executor_count = @intCast(scheduler.executors.len),
        .executors = undefined,
        .lane_count = 0,
        .lanes = undefined,
        .server = sources.server,
    };
    metrics.collectExecutors(scheduler, uptime_ns);
    metrics.collectLanes(sources.blocking, sources.cpu);
    return metrics;
}

/// The snapshot of a runtime without executors (`weft.Runtime` over `std.Io.Threaded`): its
/// uptime, its CPU lane and the process's named lanes; tasks, executors and stacks are
/// zero, as that runtime keeps no count of them.
pub fn collectLanesOnly(started_ns: u64, cpu: LaneFigures) Metrics {
    var metrics: Metrics = .{
        .uptime_ns = os.monotonicNs() -| started_ns,
        .tasks_live = 0,
        .tasks_live_peak = 0,
        .tasks_spawned = 0,
        .stacks_mapped = 0,
        .stacks_in_use = 0,
        .stack_size_bytes = 0,
        .executor_count = 0,
        .executors = undefined,
        .lane_count = 0,
        .lanes = undefined,
        .server = null,
    };
    metrics.collectLanes(.{}, cpu);
    return metrics;
}

fn collectLanes(metrics: *Metrics, blocking: LaneFigures, cpu: LaneFigures) void {
    metrics.lanes[0] = .{ .name = .init(named.blocking_name), .figures = blocking };
    metrics.lanes[1] = .{ .name = .init(named.cpu_name), .figures = cpu };
    const listed = named.collect(metrics.lanes[named.reserved.len..]);
    metrics.lane_count = @intCast(named.reserved.len + listed);
    assert(metrics.lane_count <= lanes_max);
}

fn collectExecutors(metrics: *Metrics, scheduler: *const Scheduler, uptime_ns: u64) void {
    var idle: u64 = 0;
    for (scheduler.executors, metrics.executors[0..scheduler.executors.len]) |*executor, *out| {
        const counters = &executor.counters;
        const loop = &executor.loop.counters;
        const idle_ns = counters.idle_ns.read();
        out.* = .{
            .tasks_resumed = executor.runs(),
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
        idle += executor.stacks.idleStacks();
        metrics.stack_size_bytes = executor.stacks.stack_size_bytes;
    }
    // Read one pool after another while stacks move between them: a stack may be counted
    // idle twice, or not at all, for a moment.
    idle += scheduler.stacks_shared.count.load(.monotonic);
    idle += scheduler.stacks_shared.trimmed_count.load(.monotonic);
    metrics.stacks_in_use = if (enabled) metrics.stacks_mapped -| idle else 0;
}

pub fn executorsSlice(metrics: *const Metrics) []const Executor {
    return metrics.executors[0..metrics.executor_count];
}

pub fn lanesSlice(metrics: *const Metrics) []const Lane {
    return metrics.lanes[0..metrics.lane_count];
}

/// The snapshot as text: the runtime's figures on one line, a table with a row per executor,
/// a table with a row per lane, and the server's figures on one line if it serves one.
pub fn writeText(metrics: *const Metrics, writer: *Io.Writer) Io.Writer.Error!void {
    try metrics.writeExecutorsText(writer);
    try writer.writeAll("\n");
    try metrics.writeLanesText(writer);
    if (metrics.server) |server| {
        try writer.writeAll("\n");
        try writeServerText(server, writer);
    }
}

fn writeExecutorsText(metrics: *const Metrics, writer: *Io.Writer) Io.Writer.Error!void {
    try writer.print(
        "weft: up {d:.3} s, tasks {d} live (peak {d}), {d} spawned, {d} stalls, stacks {d} " ++
            "mapped ({d} KiB each), {d} in use",
        .{
            @as(f64, @floatFromInt(metrics.uptime_ns)) / std.time.ns_per_s,
            metrics.tasks_live,
            metrics.tasks_live_peak,
            metrics.tasks_spawned,
            metrics.stalls,
            metrics.stacks_mapped,
            metrics.stack_size_bytes / 1024,
            metrics.stacks_in_use,
        },
    );
    if (metrics.stacks_committed_bytes) |committed| {
        try writer.print(", {d} KiB committed", .{committed / 1024});
    }
    try writer.writeAll(if (enabled) "\n" else " (counters compiled out: -Dmetrics=false)\n");
    if (metrics.stall_time.count > 0) {
        try writer.writeAll("stalls ended: p50");
        try writeDuration(writer, metrics.stall_time.percentileNs(50));
        try writer.writeAll(", p99");
        try writeDuration(writer, metrics.stall_time.percentileNs(99));
        try writer.print(", {d} in all\n", .{metrics.stall_time.count});
    }
    if (metrics.stall_timers_fired > 0) {
        try writer.print("timers fired by the watchdog for held executors: {d}\n", .{
            metrics.stall_timers_fired,
        });
    }
    if (metrics.stall_io_rescued > 0) {
        try writer.print("I/O completions delivered by the watchdog for held executors: {d}\n", .{
            metrics.stall_io_rescued,
        });
    }
    if (metrics.stall_handed_over > 0 or metrics.spare_activations > 0) {
        try writer.print("tasks moved off held executors: {d}; spare executor put to work: " ++
            "{d} times\n", .{ metrics.stall_handed_over, metrics.spare_activations });
    }
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

/// The lane table: name, gauges, completions, a column per rejection error, then the p50 and
/// p99 of the queue wait and the run time (the upper bounds of their buckets).
fn writeLanesText(metrics: *const Metrics, writer: *Io.Writer) Io.Writer.Error!void {
    var name_width: usize = "lane".len;
    for (metrics.lanesSlice()) |lane| name_width = @max(name_width, lane.name.len);
    try writer.print("{s:<[1]}", .{ "lane", name_width });
    const counts = [_][]const u8{ "queued", "running", "waiters", "completed" };
    inline for (counts) |title| try writer.print(" {s:>10}", .{title});
    inline for (rejection_titles) |title| try writer.print(" {s:>[1]}", .{ title, title.len });
    inline for (percentile_titles) |title| try writer.print(" {s:>8}", .{title});
    try writer.writeAll("\n");
    for (metrics.lanesSlice()) |*lane| {
        const figures = &lane.figures;
        try writer.print("{s:<[1]}", .{ lane.name.slice(), name_width });
        const values = [counts.len]u64{
            figures.queued, figures.running, figures.waiters, figures.completed,
        };
        for (values) |value| try writer.print(" {d:>10}", .{value});
        inline for (rejection_titles, figures.rejected) |title, value| {
            try writer.print(" {d:>[1]}", .{ value, title.len });
        }
        for ([_]*const Histogram.Snapshot{ &figures.queue_wait, &figures.run_time }) |h| {
            try writeDuration(writer, h.percentileNs(50));
            try writeDuration(writer, h.percentileNs(99));
        }
        try writer.writeAll("\n");
    }
}

const percentile_titles = [_][]const u8{ "wait_p50", "wait_p99", "run_p50", "run_p99" };

/// The rejection errors in snake case, "rejected_" first: `QueueFull` is `rejected_queue_full`.
const rejection_titles = titles: {
    var titles: [rejection_errors.len][]const u8 = undefined;
    for (rejection_errors, &titles) |err, *title| {
        title.* = "rejected_" ++ snakeCase(@errorName(err));
    }
    const final = titles;
    break :titles final;
};

fn snakeCase(comptime name: []const u8) []const u8 {
    comptime var result: []const u8 = "";
    inline for (name, 0..) |byte, index| {
        if (std.ascii.isUpper(byte)) {
            if (index > 0) result = result ++ "_";
            result = result ++ .{std.ascii.toLower(byte)};
        } else {
            result = result ++ .{byte};
        }
    }
    return result;
}

/// A percentile in a cell of 8 columns, in the unit that keeps it short; `-` when the lane
/// ran nothing, `>` the largest bound when it fell past it.
fn writeDuration(writer: *Io.Writer, duration_ns: ?u64) Io.Writer.Error!void {
    const ns = duration_ns orelse return writer.print(" {s:>8}", .{"-"});
    if (ns == std.math.maxInt(u64)) return writer.print(" {s:>8}", .{">68.7s"});
    const value: f64 = @floatFromInt(ns);
    if (ns < std.time.ns_per_us) return writer.print(" {d:>6}ns", .{ns});
    if (ns < std.time.ns_per_ms) return writer.print(" {d:>6.1}us", .{value / std.time.ns_per_us});
    if (ns < std.time.ns_per_s) return writer.print(" {d:>6.1}ms", .{value / std.time.ns_per_ms});
    return writer.print(" {d:>7.2}s", .{value / std.time.ns_per_s});
}

fn writeServerText(server: Server, writer: *Io.Writer) Io.Writer.Error!void {
    try writer.print(
        "server: {d} of {d} connections open, {d} accepted, refused {d} at " ++
            "connections_max and {d} for want of a task; {d} idle closed to admit; " ++
            "{d} requests, {d} rejected; buffers {d} held of {d} mapped\n",
        .{
            server.connections_open, server.connections_max,   server.accepted,
            server.rejected_full,    server.rejected_no_task,  server.closed_idle_for_admission,
            server.requests,         server.requests_rejected, server.buffers_held,
            server.buffers_mapped,
        },
    );
    try writer.print(
        "server: cut by timeout: idle {d}, header {d}, body {d}, send {d}, request {d}, " ++
            "drain {d}; closed idle at drain {d}; accept back-offs {d}, accept errors {d}\n",
        .{
            server.cut_idle_timeout,     server.cut_header_timeout,  server.cut_body_timeout,
            server.cut_send_timeout,     server.cut_request_timeout, server.cut_at_drain,
            server.closed_idle_at_drain, server.accept_backoffs,     server.accept_errors,
        },
    );
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

/// `writePrometheus` into memory from `gpa`, which the caller frees: what
/// `Runtime.prometheusTextOf` answers with, on either runtime.
pub fn prometheusTextAlloc(
    metrics: *const Metrics,
    gpa: std.mem.Allocator,
) error{OutOfMemory}![]u8 {
    var text: Io.Writer.Allocating = .init(gpa);
    defer text.deinit();
    metrics.writePrometheus(&text.writer) catch return error.OutOfMemory;
    return text.toOwnedSlice();
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
        metrics.stall_timers_fired,
        metrics.stall_io_rescued,
        metrics.stall_handed_over,
        metrics.spare_activations,
        metrics.stacks_mapped * stack_bytes,
        metrics.stacks_in_use * stack_bytes,
        metrics.executor_count,
    };
    for (runtime_series, runtime_values) |series, value| {
        try series.writeHeader(writer);
        try writer.print("{s} ", .{series.name});
        try series.writeValue(writer, value);
    }
    if (metrics.stacks_committed_bytes) |committed| {
        try stacks_committed_series.writeHeader(writer);
        try writer.print("{s} ", .{stacks_committed_series.name});
        try stacks_committed_series.writeValue(writer, committed);
    }
    try stall_time_series.writeHeader(writer);
    try writeHistogram(writer, stall_time_series.name, null, &metrics.stall_time);
    inline for (executor_series) |series| {
        try series.writeHeader(writer);
        for (metrics.executorsSlice(), 0..) |executor, index| {
            try writer.print("{s}{{executor=\"{d}\"}} ", .{ series.name, index });
            try series.writeValue(writer, @field(executor, series.field));
        }
    }
    try metrics.writeLanesPrometheus(writer);
    if (metrics.server) |server| try writeServerPrometheus(server, writer);
}

/// Per lane, labelled `lane="name"`: the gauges and completions, the refusals labelled by
/// `error` too, and the two histograms (a `_bucket` per bound, `_sum` and `_count`).
fn writeLanesPrometheus(metrics: *const Metrics, writer: *Io.Writer) Io.Writer.Error!void {
    const lanes = metrics.lanesSlice();
    inline for (lane_series) |series| {
        try series.writeHeader(writer);
        for (lanes) |*lane| {
            try writeLaneLabel(writer, series.name, "", lane);
            try writer.writeAll("} ");
            try series.writeValue(writer, @field(lane.figures, series.field));
        }
    }
    try lane_rejected_series.writeHeader(writer);
    for (lanes) |*lane| {
        for (rejection_errors, lane.figures.rejected) |err, value| {
            try writeLaneLabel(writer, lane_rejected_series.name, "", lane);
            try writer.print(",error=\"{s}\"}} {d}\n", .{ @errorName(err), value });
        }
    }
    inline for (lane_histograms) |histogram| {
        try histogram.series.writeHeader(writer);
        for (lanes) |*lane| {
            const snapshot = &@field(lane.figures, histogram.field);
            try writeHistogram(writer, histogram.series.name, lane, snapshot);
        }
    }
}

/// A Prometheus histogram of durations in seconds: its buckets cumulative, each `le` the
/// inclusive bound of a `Histogram` bucket, then `+Inf`, `_sum` and `_count`.
fn writeHistogram(
    writer: *Io.Writer,
    name: []const u8,
    lane: ?*const Lane,
    snapshot: *const Histogram.Snapshot,
) Io.Writer.Error!void {
    var cumulative: u64 = 0;
    for (snapshot.buckets[0..Histogram.bounded_buckets], 0..) |count, bucket| {
        cumulative += count;
        const bound_s = @as(f64, @floatFromInt(Histogram.boundNs(bucket))) / std.time.ns_per_s;
        try writeHistogramLabels(writer, name, "_bucket", lane);
        try writer.print("le=\"{d}\"}} {d}\n", .{ bound_s, cumulative });
    }
    cumulative += snapshot.buckets[Histogram.overflow_bucket];
    assert(cumulative == snapshot.count);
    try writeHistogramLabels(writer, name, "_bucket", lane);
    try writer.print("le=\"+Inf\"}} {d}\n", .{cumulative});
    const sum_s = @as(f64, @floatFromInt(snapshot.sum_ns)) / std.time.ns_per_s;
    if (lane) |labelled| {
        try writeLaneLabel(writer, name, "_sum", labelled);
        try writer.print("}} {d}\n", .{sum_s});
        try writeLaneLabel(writer, name, "_count", labelled);
        try writer.print("}} {d}\n", .{snapshot.count});
    } else {
        try writer.print("{s}_sum {d}\n{s}_count {d}\n", .{ name, sum_s, name, snapshot.count });
    }
}

/// `name` and `suffix`, `{`, and the lane's label and a comma if there is a lane: what comes
/// before a bucket's `le` label.
fn writeHistogramLabels(
    writer: *Io.Writer,
    name: []const u8,
    suffix: []const u8,
    lane: ?*const Lane,
) Io.Writer.Error!void {
    if (lane) |labelled| {
        try writeLaneLabel(writer, name, suffix, labelled);
        try writer.writeByte(',');
    } else {
        try writer.print("{s}{s}{{", .{ name, suffix });
    }
}

/// `name` and `suffix`, then `{lane="..."` with the lane's name escaped as the format wants
/// (a backslash, a double quote, a line feed), the brace left open for more labels.
fn writeLaneLabel(
    writer: *Io.Writer,
    name: []const u8,
    suffix: []const u8,
    lane: *const Lane,
) Io.Writer.Error!void {
    try writer.print("{s}{s}{{lane=\"", .{ name, suffix });
    for (lane.name.slice()) |byte| switch (byte) {
        '\\' => try writer.writeAll("\\\\"),
        '"' => try writer.writeAll("\\\""),
        '\n' => try writer.writeAll("\\n"),
        else => try writer.writeByte(byte),
    };
    try writer.writeAll("\"");
}

/// The server's series, a family's HELP and TYPE before its first sample (the refusals and
/// the cuts are families of several samples, told apart by a label).
fn writeServerPrometheus(server: Server, writer: *Io.Writer) Io.Writer.Error!void {
    var family: []const u8 = "";
    inline for (server_series) |series| {
        if (!std.mem.eql(u8, family, series.name)) try series.writeHeader(writer);
        family = series.name;
        if (series.label.len == 0) {
            try writer.print("{s} ", .{series.name});
        } else {
            try writer.print("{s}{{{s}}} ", .{ series.name, series.label });
        }
        try series.writeValue(writer, @field(server, series.field));
    }
}

const Series = struct {
    /// The field it exports (of `Executor`, `LaneFigures` or `Server`).
    field: []const u8 = "",
    name: []const u8,
    help: []const u8,
    kind: enum { counter, gauge, histogram } = .counter,
    /// A fixed label of the sample (`Server`'s families of several samples).
    label: []const u8 = "",
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
        .name = "weft_stall_timers_fired_total",
        .help = "Timers fired by the watchdog for an executor held by one task.",
    },
    .{
        .name = "weft_stall_io_rescued_total",
        .help = "I/O completions delivered by the watchdog for an executor held by one task.",
    },
    .{
        .name = "weft_stall_handed_over_total",
        .help = "Tasks moved off an executor held by one task for another to run them.",
    },
    .{
        .name = "weft_spare_executor_activations_total",
        .help = "Times the spare executor was put to work, every executor being held.",
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

/// Written only when measured (`Runtime.stacksCommittedBytes`).
const stacks_committed_series: Series = .{
    .name = "weft_stacks_committed_bytes",
    .help = "Memory the fiber stacks hold: their resident pages, free stacks' included.",
    .kind = .gauge,
};

const stall_time_series: Series = .{
    .name = "weft_stall_seconds",
    .help = "How long the stalls that ended lasted.",
    .kind = .histogram,
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
    .{
        .field = "held_max_ns",
        .name = "weft_executor_held_max_seconds",
        .help = "The longest run of one task on this executor the watchdog saw.",
        .kind = .gauge,
        .seconds = true,
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

const lane_series = [_]Series{
    .{
        .field = "queued",
        .name = "weft_lane_queued_jobs",
        .help = "Jobs accepted and waiting for a worker.",
        .kind = .gauge,
    },
    .{
        .field = "running",
        .name = "weft_lane_running_jobs",
        .help = "Jobs running on a worker.",
        .kind = .gauge,
    },
    .{
        .field = "waiters",
        .name = "weft_lane_waiting_callers",
        .help = "Callers in the admission line, not yet accepted.",
        .kind = .gauge,
    },
    .{
        .field = "completed",
        .name = "weft_lane_jobs_completed_total",
        .help = "Jobs that ran to completion.",
    },
};

const lane_rejected_series: Series = .{
    .field = "rejected",
    .name = "weft_lane_calls_rejected_total",
    .help = "Calls that failed with a lane error, by error: their jobs never ran.",
};

const lane_histograms = [_]struct { field: []const u8, series: Series }{
    .{ .field = "queue_wait", .series = .{
        .name = "weft_lane_queue_wait_seconds",
        .help = "Time from a call to its job's start, the admission line included.",
        .kind = .histogram,
    } },
    .{ .field = "run_time", .series = .{
        .name = "weft_lane_run_seconds",
        .help = "Time a job ran on a worker.",
        .kind = .histogram,
    } },
};

const server_series = [_]Series{
    .{
        .field = "connections_open",
        .name = "weft_server_connections_open",
        .help = "Connections being served now.",
        .kind = .gauge,
    },
    .{
        .field = "connections_max",
        .name = "weft_server_connections_max",
        .help = "Connections served at once at most (connections_max).",
        .kind = .gauge,
    },
    .{
        .field = "buffers_held",
        .name = "weft_server_buffers_held",
        .help = "Connection buffers held by requests under way.",
        .kind = .gauge,
    },
    .{
        .field = "buffers_mapped",
        .name = "weft_server_buffers_mapped",
        .help = "Connection buffers mapped: held, or free for the next requests.",
        .kind = .gauge,
    },
    .{
        .field = "accepted",
        .name = "weft_server_connections_accepted_total",
        .help = "Connections accepted, refused ones included.",
    },
    .{
        .field = "rejected_full",
        .name = "weft_server_connections_refused_total",
        .help = "Connections closed right after accept, by reason.",
        .label = "reason=\"connections_max\"",
    },
    .{
        .field = "rejected_no_task",
        .name = "weft_server_connections_refused_total",
        .help = "",
        .label = "reason=\"no_task\"",
    },
    .{
        .field = "closed_idle_for_admission",
        .name = "weft_server_connections_closed_for_admission_total",
        .help = "Idle connections closed to admit a new one at connections_max.",
    },
    .{
        .field = "cut_idle_timeout",
        .name = "weft_server_connections_cut_total",
        .help = "Connections cut by a timeout, by timeout.",
        .label = "timeout=\"idle\"",
    },
    .{
        .field = "cut_header_timeout",
        .name = "weft_server_connections_cut_total",
        .help = "",
        .label = "timeout=\"header\"",
    },
    .{
        .field = "cut_body_timeout",
        .name = "weft_server_connections_cut_total",
        .help = "",
        .label = "timeout=\"body\"",
    },
    .{
        .field = "cut_send_timeout",
        .name = "weft_server_connections_cut_total",
        .help = "",
        .label = "timeout=\"send\"",
    },
    .{
        .field = "cut_request_timeout",
        .name = "weft_server_connections_cut_total",
        .help = "",
        .label = "timeout=\"request\"",
    },
    .{
        .field = "cut_at_drain",
        .name = "weft_server_connections_cut_total",
        .help = "",
        .label = "timeout=\"drain\"",
    },
    .{
        .field = "closed_idle_at_drain",
        .name = "weft_server_connections_closed_at_drain_total",
        .help = "Idle connections closed when the drain's grace period ended.",
    },
    .{
        .field = "requests",
        .name = "weft_server_requests_total",
        .help = "Requests handed to the handler.",
    },
    .{
        .field = "requests_rejected",
        .name = "weft_server_requests_rejected_total",
        .help = "Requests the server answered with an error status itself.",
    },
    .{
        .field = "accept_backoffs",
        .name = "weft_server_accept_backoffs_total",
        .help = "Accepts that failed for lack of fds or memory, retried after a back-off.",
    },
    .{
        .field = "accept_errors",
        .name = "weft_server_accept_errors_total",
        .help = "Accepts that failed otherwise, retried after a back-off.",
    },
};

comptime {
    // Every lane figure is exported, once.
    const fields = @typeInfo(LaneFigures).@"struct".fields;
    assert(lane_series.len + 1 + lane_histograms.len == fields.len);
    for (lane_series) |series| assert(@hasField(LaneFigures, series.field));
    assert(@hasField(LaneFigures, lane_rejected_series.field));
    for (lane_histograms) |histogram| assert(@hasField(LaneFigures, histogram.field));
    // Every server figure is exported, once; a family's samples are together, and only its
    // first carries the HELP text.
    const server_fields = @typeInfo(Server).@"struct".fields;
    assert(server_series.len == server_fields.len);
    @setEvalBranchQuota(server_fields.len * server_series.len * 64);
    for (server_fields) |field| {
        var exports = 0;
        for (server_series) |series| {
            if (std.mem.eql(u8, field.name, series.field)) exports += 1;
        }
        assert(exports == 1);
    }
    for (server_series[1..], server_series[0 .. server_series.len - 1]) |series, previous| {
        const same = std.mem.eql(u8, series.name, previous.name);
        assert(same == (series.help.len == 0));
    }
}
