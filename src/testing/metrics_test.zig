//! `weft.Metrics` against workloads whose counts are known, and its two text formats.
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Metrics = @import("../Metrics.zig");
const Lane = @import("../lanes/Lane.zig");
const CpuLane = @import("../lanes/CpuLane.zig");
const Histogram = @import("../os/Histogram.zig");
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const lane_test = @import("lane_test.zig");
const Gate = lane_test.Gate;

fn sleeper(io: Io, duration_ms: i64) Io.Cancelable!void {
    try io.sleep(.fromMilliseconds(duration_ms), .awake);
}

test "Metrics: 100 sleepers on one executor: spawned, peak, resumed and timers exactly" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    var group: Io.Group = .init;
    for (0..100) |_| try group.concurrent(io, sleeper, .{ io, 100 });
    // Each has its stack from its spawn on, asleep or not yet started.
    const during = rt.metrics();
    if (Metrics.enabled) try testing.expectEqual(@as(u64, 100), during.stacks_in_use);
    try group.await(io);

    const metrics = rt.metrics();
    try testing.expectEqual(@as(u64, 0), metrics.tasks_live);
    try testing.expectEqual(@as(u32, 1), metrics.executor_count);
    if (!Metrics.enabled) return;
    try testing.expectEqual(@as(u64, 100), metrics.tasks_spawned);
    try testing.expectEqual(@as(u64, 100), metrics.tasks_live_peak);
    const executor = metrics.executors[0];
    try testing.expectEqual(@as(u64, 100), executor.tasks_spawned);
    // Each sleeper starts and is resumed once its timer fires; the main task resumes too.
    try testing.expect(executor.tasks_resumed >= 200);
    try testing.expectEqual(@as(u64, 100), executor.timers_armed);
    try testing.expectEqual(@as(u64, 100), executor.timers_fired);
    try testing.expectEqual(@as(u64, 0), executor.tasks_stolen);
    try testing.expect(metrics.stacks_mapped >= 100);
    try testing.expectEqual(@as(u64, 0), metrics.stacks_in_use);
    try testing.expect(executor.busy_ns + executor.idle_ns <= metrics.uptime_ns);
    // With every task asleep the executor sleeps in the kernel: at least once, for some time
    // (how long depends on how long the spawning took: under qemu most of the 100 ms).
    try testing.expect(executor.sleeps >= 1);
    try testing.expect(executor.idle_ns > 0);
}

/// Touches `depth_bytes` of its stack, then parks until `release` is set.
fn touchThenPark(io: Io, started: *std.atomic.Value(u32), release: *Io.Event) void {
    touchStack();
    _ = started.fetchAdd(1, .release);
    release.waitUncancelable(io);
}

const depth_bytes = 64 * 1024;

noinline fn touchStack() void {
    var frame: [depth_bytes]u8 = undefined;
    @memset(&frame, 0xa5);
    std.mem.doNotOptimizeAway(&frame);
}

test "Metrics: stacks committed bytes count the pages tasks touched, and stay when they end" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const tasks = 50;
    const before = rt.stacksCommittedBytes();
    var started: std.atomic.Value(u32) = .init(0);
    var release: Io.Event = .unset;
    var group: Io.Group = .init;
    for (0..tasks) |_| try group.concurrent(io, touchThenPark, .{ io, &started, &release });
    while (started.load(.acquire) < tasks) try io.sleep(.fromMilliseconds(1), .awake);

    var metrics = rt.metrics();
    try testing.expect(metrics.stacks_committed_bytes == null); // a snapshot does not walk
    const during = rt.stacksCommittedBytes();
    try testing.expect(during >= before + tasks * depth_bytes);
    if (Metrics.enabled) {
        try testing.expect(during <= metrics.stacks_mapped * metrics.stack_size_bytes);
    }
    metrics.stacks_committed_bytes = during;
    var buffer: [8192]u8 = undefined;
    var text: Io.Writer = .fixed(&buffer);
    try metrics.writeText(&text);
    const line = std.mem.sliceTo(text.buffered(), '\n');
    var expected_buffer: [64]u8 = undefined;
    const expected = try std.fmt.bufPrint(
        &expected_buffer,
        ", {d} KiB committed",
        .{during / 1024},
    );
    try testing.expect(std.mem.indexOf(u8, line, expected) != null);
    var allocating: Io.Writer.Allocating = .init(testing.allocator);
    defer allocating.deinit();
    try metrics.writePrometheus(&allocating.writer);
    _ = try checkExposition(testing.allocator, allocating.written());
    const sample = try std.fmt.bufPrint(
        &expected_buffer,
        "\nweft_stacks_committed_bytes {d}\n",
        .{during},
    );
    try testing.expect(std.mem.indexOf(u8, allocating.written(), sample) != null);

    release.set(io);
    try group.await(io);
    // Freed stacks keep their pages for the next tasks: the walk still counts them.
    try testing.expect(rt.stacksCommittedBytes() >= before + tasks * depth_bytes);
    // From a task, on the blocking lane; nothing from an Io that is not weft's.
    const of_io = try Runtime.stacksCommittedBytesOf(io);
    try testing.expect(of_io.? >= before + tasks * depth_bytes);
    try testing.expectEqual(@as(?u64, null), try Runtime.stacksCommittedBytesOf(testing.io));
}

test "Metrics: stacks committed bytes walked from a plain thread while executors map slabs" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    var done: std.atomic.Value(bool) = .init(false);
    var walks: std.atomic.Value(u64) = .init(0);
    const walker = try std.Thread.spawn(
        .{},
        callUntilSet,
        .{ Runtime.stacksCommittedBytes, &rt, &done, &walks },
    );
    // 2,000 tasks alive at once need 8 slabs or more, mapped by both executors meanwhile.
    var started: std.atomic.Value(u32) = .init(0);
    var release: Io.Event = .unset;
    var group: Io.Group = .init;
    const tasks = 2000;
    for (0..tasks) |_| try group.concurrent(io, touchThenPark, .{ io, &started, &release });
    // Until the walker has walked once too: on a loaded machine its thread may not have run.
    while (started.load(.acquire) < tasks or walks.load(.monotonic) == 0) {
        try io.sleep(.fromMilliseconds(1), .awake);
    }
    done.store(true, .release);
    walker.join();
    try testing.expect(walks.load(.monotonic) >= 1);
    const committed = rt.stacksCommittedBytes();
    try testing.expect(committed >= tasks * depth_bytes);
    if (Metrics.enabled) {
        const metrics = rt.metrics();
        try testing.expect(metrics.stacks_mapped >= tasks);
        try testing.expect(committed <= metrics.stacks_mapped * metrics.stack_size_bytes);
    }
    release.set(io);
    try group.await(io);
}

/// Sleeps, then computes: the sleepers' timers fire together on the executor they slept on,
/// which queues them all at once, and an idle executor steals half.
fn sleepThenSpin(io: Io, spin_ns: u64) Io.Cancelable!void {
    try io.sleep(.fromMilliseconds(1), .awake);
    const start_ns = os.monotonicNs();
    while (os.monotonicNs() - start_ns < spin_ns) {}
}

test "Metrics: with two executors, what one steals the other counts as stolen from it" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    // Stealing depends on the other thread getting a CPU: a few rounds make it certain.
    var stolen: u64 = 0;
    for (0..20) |_| {
        var group: Io.Group = .init;
        for (0..64) |_| try group.concurrent(io, sleepThenSpin, .{ io, 200 * std.time.ns_per_us });
        try group.await(io);
        const metrics = rt.metrics();
        if (!Metrics.enabled) return;
        stolen = 0;
        var stolen_by_others: u64 = 0;
        for (metrics.executorsSlice()) |executor| {
            stolen += executor.tasks_stolen;
            stolen_by_others += executor.tasks_stolen_by_others;
        }
        try testing.expectEqual(stolen, stolen_by_others);
        if (stolen > 0) break;
    }
    try testing.expect(stolen > 0);
}

test "Metrics: socket operations are counted as loop operations" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const before = rt.metrics().executors[0];
    var address: Io.net.IpAddress = .{ .ip4 = .loopback(0) };
    var server = try address.listen(io, .{ .reuse_address = true });
    defer server.deinit(io);
    var connecting = try io.concurrent(Io.net.IpAddress.connect, .{
        &server.socket.address, io, .{ .mode = .stream },
    });
    const accepted = try server.accept(io);
    defer accepted.close(io);
    const client = try connecting.await(io);
    defer client.close(io);
    const after = rt.metrics().executors[0];
    if (!Metrics.enabled) return;
    // At least the accept and the connect went through the loop.
    try testing.expect(after.io_submitted - before.io_submitted >= 2);
    try testing.expect(after.io_completed - before.io_completed >= 2);
    try testing.expect(after.polls > before.polls);
}

/// Calls `call(rt)` from a plain thread until `done` is set, counting the calls.
fn callUntilSet(
    comptime call: anytype,
    rt: *const Runtime,
    done: *std.atomic.Value(bool),
    calls: *std.atomic.Value(u64),
) void {
    while (!done.load(.acquire)) {
        const result = call(rt.*);
        std.mem.doNotOptimizeAway(&result);
        _ = calls.fetchAdd(1, .monotonic);
    }
}

test "Metrics: snapshots from a plain thread while tasks run on two executors" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    var done: std.atomic.Value(bool) = .init(false);
    var taken: std.atomic.Value(u64) = .init(0);
    const thread =
        try std.Thread.spawn(.{}, callUntilSet, .{ Runtime.metrics, &rt, &done, &taken });
    // 20 rounds, and more until the thread has taken a snapshot while tasks ran: on a loaded
    // machine its thread may not have run during the first 20.
    var rounds: u64 = 0;
    while (rounds < 20 or taken.load(.monotonic) == 0) : (rounds += 1) {
        var group: Io.Group = .init;
        for (0..50) |_| try group.concurrent(io, sleeper, .{ io, 1 });
        try group.await(io);
    }
    done.store(true, .release);
    thread.join();
    try testing.expect(taken.load(.monotonic) > 0);
    const metrics = rt.metrics();
    try testing.expectEqual(@as(u64, 0), metrics.tasks_live);
    if (Metrics.enabled) try testing.expectEqual(rounds * 50, metrics.tasks_spawned);
}

test "Metrics: writeText: the runtime's line, then aligned tables of executors and lanes" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const lane = try Lane.init(testing.allocator, .{ .threads = 1, .name = "text-table" });
    defer lane.deinit(io);
    for (0..3) |index| _ = try lane.run(io, square, .{index});
    const metrics = rt.metrics();
    var buffer: [8192]u8 = undefined;
    var writer: Io.Writer = .fixed(&buffer);
    try metrics.writeText(&writer);
    const text = writer.buffered();
    var sections = std.mem.splitSequence(u8, std.mem.trimEnd(u8, text, "\n"), "\n\n");
    var executors = std.mem.splitScalar(u8, sections.next().?, '\n');
    try testing.expect(std.mem.startsWith(u8, executors.next().?, "weft: up "));
    const header = executors.next().?;
    try testing.expect(std.mem.startsWith(u8, header, "executor"));
    try testing.expect(std.mem.indexOf(u8, header, "tasks_resumed") != null);
    try testing.expect(std.mem.indexOf(u8, header, "busy_ms") != null);
    try testing.expectEqual(@as(usize, 2), try expectAligned(header, &executors));
    var lanes = std.mem.splitScalar(u8, sections.next().?, '\n');
    const lane_header = lanes.next().?;
    try testing.expect(std.mem.startsWith(u8, lane_header, "lane "));
    for ([_][]const u8{ "completed", "rejected_queue_full", "wait_p99", "run_p50" }) |title| {
        try testing.expect(std.mem.indexOf(u8, lane_header, title) != null);
    }
    // The runtime's two lanes, then the named one.
    const rows = lanes.rest();
    try testing.expectEqual(@as(usize, 3), try expectAligned(lane_header, &lanes));
    try testing.expect(std.mem.startsWith(u8, rows, "blocking "));
    try testing.expect(std.mem.indexOf(u8, rows, "\ncpu ") != null);
    try testing.expect(std.mem.indexOf(u8, rows, "\ntext-table ") != null);
    try testing.expect(sections.next() == null); // no server
    // A writer that fails ends the table with its error.
    var tiny: [16]u8 = undefined;
    var short: Io.Writer = .fixed(&tiny);
    try testing.expectError(error.WriteFailed, metrics.writeText(&short));
}

/// Every remaining row of `rows` as wide as `header`; returns how many.
fn expectAligned(header: []const u8, rows: *std.mem.SplitIterator(u8, .scalar)) !usize {
    var count: usize = 0;
    while (rows.next()) |row| : (count += 1) try testing.expectEqual(header.len, row.len);
    return count;
}

test "Metrics: writePrometheus parses: HELP and TYPE first, no duplicate series, units" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    var group: Io.Group = .init;
    for (0..10) |_| try group.concurrent(io, sleeper, .{ io, 1 });
    try group.await(io);
    // A name with the characters a label value escapes.
    const lane = try Lane.init(testing.allocator, .{ .threads = 1, .name = "say \"hi\" \\o/" });
    defer lane.deinit(io);
    _ = try lane.run(io, square, .{3});
    const metrics = rt.metrics();
    var allocating: Io.Writer.Allocating = .init(testing.allocator);
    defer allocating.deinit();
    try metrics.writePrometheus(&allocating.writer);
    const text = allocating.written();
    const summary = try checkExposition(testing.allocator, text);
    // 12 runtime families and the stall-time histogram, 17 per executor, 7 per lane (3 lanes);
    // samples: per lane 4 gauges and counters, 5 refusals and 2 histograms, each of 37 bounds,
    // +Inf, _sum and _count.
    const histogram_samples = Histogram.bounded_buckets + 3;
    const per_lane = 4 + Lane.rejection_errors.len + 2 * histogram_samples;
    try testing.expectEqual(
        @as(usize, 12 + histogram_samples + 17 * 2 + per_lane * 3),
        summary.samples,
    );
    try testing.expectEqual(@as(usize, 12 + 1 + 17 + 7), summary.families);
    const completed = "weft_lane_jobs_completed_total{lane=\"say \\\"hi\\\" \\\\o/\"} 1\n";
    try testing.expect(std.mem.indexOf(u8, text, completed) != null);
    if (Metrics.enabled) {
        const spawned = "weft_tasks_spawned_total 10\n";
        try testing.expect(std.mem.indexOf(u8, text, spawned) != null);
    }
}

const Exposition = struct { samples: usize, families: usize };

/// A strict reader of the Prometheus text format as `writePrometheus` writes it: each family
/// is `# HELP`, `# TYPE` (counter, gauge or histogram), then its samples; names are `weft_*`
/// in snake case, counters end in `_total`; labels are `key="value"` with escaped values;
/// values are numbers; no series appears twice. A histogram's samples are `_bucket` with an
/// `le` label last, bounds rising to `+Inf` and counts never falling, then `_sum` and a
/// `_count` equal to the `+Inf` bucket.
pub fn checkExposition(gpa: std.mem.Allocator, text: []const u8) !Exposition {
    var series: std.StringHashMapUnmanaged(void) = .empty;
    defer series.deinit(gpa);
    var families: std.StringHashMapUnmanaged(void) = .empty;
    defer families.deinit(gpa);
    var reader: ExpositionReader = .{};
    var samples: usize = 0;
    var lines = std.mem.splitScalar(u8, text, '\n');
    while (lines.next()) |line| {
        if (line.len == 0) {
            try testing.expect(lines.next() == null); // only the final newline
            break;
        }
        if (std.mem.startsWith(u8, line, "# HELP ")) {
            const name = try reader.help(line["# HELP ".len..]);
            const entry = try families.getOrPut(gpa, name);
            try testing.expect(!entry.found_existing);
            continue;
        }
        if (std.mem.startsWith(u8, line, "# TYPE ")) {
            try reader.type_(line["# TYPE ".len..]);
            continue;
        }
        const key = try reader.sample(line);
        const entry = try series.getOrPut(gpa, key);
        try testing.expect(!entry.found_existing);
        samples += 1;
    }
    try reader.endHistogram();
    return .{ .samples = samples, .families = families.count() };
}

const ExpositionReader = struct {
    family: ?[]const u8 = null,
    kind: ?Kind = null,
    /// The histogram being read: its labels but `le`, the last bound and cumulative count.
    histogram_labels: []const u8 = "",
    bound: f64 = -1,
    cumulative: f64 = 0,
    /// The `+Inf` bucket read, then the `_sum`, for the labels of `histogram_labels`.
    infinite: ?f64 = null,
    summed: bool = false,

    const Kind = enum { counter, gauge, histogram };

    fn help(reader: *ExpositionReader, rest: []const u8) ![]const u8 {
        try reader.endHistogram();
        var words = std.mem.splitScalar(u8, rest, ' ');
        const name = words.next().?;
        try expectName(name);
        try testing.expect(words.rest().len > 0);
        reader.family = name;
        reader.kind = null;
        return name;
    }

    fn type_(reader: *ExpositionReader, rest: []const u8) !void {
        var words = std.mem.splitScalar(u8, rest, ' ');
        try testing.expectEqualStrings(reader.family.?, words.next().?);
        const kind = std.meta.stringToEnum(Kind, words.next().?) orelse return error.BadType;
        try testing.expect(words.next() == null);
        const is_total = std.mem.endsWith(u8, reader.family.?, "_total");
        try testing.expectEqual(kind == .counter, is_total);
        reader.kind = kind;
    }

    /// Checks one sample line; returns its series (name and labels).
    fn sample(reader: *ExpositionReader, line: []const u8) ![]const u8 {
        const kind = reader.kind orelse return error.SampleBeforeType;
        const space = std.mem.lastIndexOfScalar(u8, line, ' ') orelse return error.NoValue;
        const key = line[0..space];
        const value = try std.fmt.parseFloat(f64, line[space + 1 ..]);
        try testing.expect(value >= 0);
        const name_end = std.mem.indexOfScalar(u8, key, '{') orelse key.len;
        const name = key[0..name_end];
        const labels = try checkLabels(key[name_end..]);
        const family = reader.family.?;
        if (kind != .histogram) {
            try testing.expectEqualStrings(family, name);
            return key;
        }
        try testing.expect(std.mem.startsWith(u8, name, family));
        const suffix = name[family.len..];
        if (std.mem.eql(u8, suffix, "_bucket")) {
            try reader.bucket(labels, value);
        } else if (std.mem.eql(u8, suffix, "_sum")) {
            try testing.expectEqualStrings(reader.histogram_labels, ownLabels(labels));
            try testing.expect(reader.infinite != null and !reader.summed);
            reader.summed = true;
        } else if (std.mem.eql(u8, suffix, "_count")) {
            try testing.expectEqualStrings(reader.histogram_labels, ownLabels(labels));
            try testing.expect(reader.summed);
            try testing.expectEqual(reader.infinite.?, value);
            reader.histogram_labels = "";
            reader.infinite = null;
            // The next histogram starts from its first bound, whatever its labels.
            reader.bound = -1;
            reader.cumulative = 0;
            reader.summed = false;
        } else return error.BadHistogramSample;
        return key;
    }

    /// A `_sum` or `_count` sample's labels as `bucket` keeps them: without the closing brace.
    fn ownLabels(labels: []const u8) []const u8 {
        return if (labels.len == 0) "" else labels[0 .. labels.len - 1];
    }

    fn bucket(reader: *ExpositionReader, labels: []const u8, count: f64) !void {
        const le_at = std.mem.lastIndexOf(u8, labels, "le=\"") orelse return error.NoLe;
        const le = labels[le_at + "le=\"".len .. labels.len - "\"}".len];
        // The labels but `le`, as `_sum` and `_count` have them: `{lane="x"}`, or none for a
        // histogram without labels (`{le="..."}` alone).
        const own = if (le_at == 1) "" else own: {
            try testing.expect(le_at >= 2 and labels[le_at - 1] == ',');
            break :own labels[0 .. le_at - 1];
        };
        if (!std.mem.eql(u8, own, reader.histogram_labels)) {
            try reader.endHistogram(); // a new label set starts from its first bound
            reader.histogram_labels = own;
            reader.bound = -1;
            reader.cumulative = 0;
            reader.summed = false;
        }
        try testing.expect(reader.infinite == null); // nothing after +Inf but _sum, _count
        const bound = if (std.mem.eql(u8, le, "+Inf"))
            std.math.inf(f64)
        else
            try std.fmt.parseFloat(f64, le);
        try testing.expect(bound > reader.bound);
        try testing.expect(count >= reader.cumulative);
        reader.bound = bound;
        reader.cumulative = count;
        if (std.math.isInf(bound)) reader.infinite = count;
    }

    /// A histogram's label set ended: it had its `+Inf`, `_sum` and `_count`.
    fn endHistogram(reader: *ExpositionReader) !void {
        try testing.expect(reader.infinite == null);
        reader.histogram_labels = "";
    }
};

/// `{key="value",...}` (or nothing): snake-case keys, each once, values with only `\\`, `\"`
/// and `\n` escaped. Returns the labels as written, `{` to `}`.
fn checkLabels(labels: []const u8) ![]const u8 {
    if (labels.len == 0) return labels;
    try testing.expect(labels[0] == '{' and labels[labels.len - 1] == '}');
    var keys: [4][]const u8 = undefined;
    var key_count: usize = 0;
    var at: usize = 1;
    while (at < labels.len - 1) {
        const equals = std.mem.indexOfScalarPos(u8, labels, at, '=') orelse return error.NoEquals;
        const key = labels[at..equals];
        for (key) |byte| try testing.expect(std.ascii.isLower(byte) or byte == '_');
        for (keys[0..key_count]) |seen| try testing.expect(!std.mem.eql(u8, seen, key));
        keys[key_count] = key;
        key_count += 1;
        try testing.expect(labels[equals + 1] == '"');
        at = equals + 2;
        while (labels[at] != '"') : (at += 1) {
            if (labels[at] != '\\') continue;
            at += 1;
            try testing.expect(std.mem.indexOfScalar(u8, "\\\"n", labels[at]) != null);
        }
        at += 1; // the closing quote
        if (labels[at] == ',') at += 1;
    }
    return labels;
}

fn expectName(name: []const u8) !void {
    try testing.expect(std.mem.startsWith(u8, name, "weft_"));
    for (name) |byte| try testing.expect(std.ascii.isLower(byte) or byte == '_');
}

/// The value of the sample `series` (name and labels, as written) in `text`.
pub fn sampleValue(text: []const u8, series: []const u8) !f64 {
    var lines = std.mem.splitScalar(u8, text, '\n');
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, series)) continue;
        if (line.len <= series.len or line[series.len] != ' ') continue;
        return std.fmt.parseFloat(f64, line[series.len + 1 ..]);
    }
    return error.SeriesMissing;
}

fn square(x: u64) u64 {
    return x * x;
}

fn laneNamed(metrics: *const Metrics, name: []const u8) ?*const Metrics.Lane {
    for (metrics.lanesSlice()) |*lane| {
        if (std.mem.eql(u8, lane.name.slice(), name)) return lane;
    }
    return null;
}

fn squareThrough(lane: *Lane, io: Io, x: u64) Io.Cancelable!void {
    const result = lane.run(io, square, .{x}) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        else => unreachable, // admission waits, the line is long enough, no shutdown
    };
    std.debug.assert(result == x * x);
}

test "Metrics: a named lane's 100 jobs are counted exactly; an unnamed lane is not listed" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const lane = try Lane.init(testing.allocator, .{
        .threads = 2,
        .queue_limit = 8,
        .admission = .wait,
        .name = "exact",
    });
    defer lane.deinit(io);
    const unnamed = try Lane.init(testing.allocator, .{ .threads = 1 });
    defer unnamed.deinit(io);
    var group: Io.Group = .init;
    for (0..100) |index| try group.concurrent(io, squareThrough, .{ lane, io, index });
    try group.await(io);
    _ = try unnamed.run(io, square, .{2});

    const metrics = rt.metrics();
    // The runtime's two lanes and the named one.
    try testing.expectEqual(@as(u32, 3), metrics.lane_count);
    const figures = laneNamed(&metrics, "exact").?.figures;
    try testing.expectEqual(@as(u64, 100), figures.completed);
    try testing.expectEqual(@as(u64, 0), figures.queued + figures.running + figures.waiters);
    for (figures.rejected) |count| try testing.expectEqual(@as(u64, 0), count);
    if (!Metrics.enabled) {
        try testing.expectEqual(@as(u64, 0), figures.run_time.count);
        return;
    }
    // Each job that ran is timed once, and only those.
    try testing.expectEqual(@as(u64, 100), figures.queue_wait.count);
    try testing.expectEqual(@as(u64, 100), figures.run_time.count);
    try testing.expect(figures.run_time.sum_ns > 0);
}

fn callerCanceledFirst(lane: *Lane, io: Io) Lane.Result(square) {
    // Acknowledged here, then re-armed: the call below sees a request already pending.
    io.sleep(.fromSeconds(60), .awake) catch {};
    io.recancel();
    return lane.run(io, square, .{1});
}

test "Metrics: a full fail-fast lane counts QueueFull per refusal, and a call canceled first" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const lane = try Lane.init(testing.allocator, .{
        .threads = 1,
        .queue_limit = 1,
        .name = "fail-fast",
    });
    defer lane.deinit(io);
    var gate: Gate = .{};
    // Opened on every path: a test failing midway must not leave `deinit` waiting for a job.
    defer gate.release();
    var running = try io.concurrent(lane_test.passThrough, .{ lane, io, &gate, 1 });
    try waitFigures(&rt, "fail-fast", .{ .running = 1 });
    var queued = try io.concurrent(lane_test.passThrough, .{ lane, io, &gate, 2 });
    try waitFigures(&rt, "fail-fast", .{ .running = 1, .queued = 1 });
    for (0..3) |_| try testing.expectError(error.QueueFull, lane.run(io, square, .{2}));
    var canceled = try io.concurrent(callerCanceledFirst, .{ lane, io });
    try testing.expectError(error.Canceled, canceled.cancel(io));
    gate.release();
    try testing.expectEqual(@as(u64, 1), try running.await(io));
    try testing.expectEqual(@as(u64, 2), try queued.await(io));

    const figures = laneNamed(&rt.metrics(), "fail-fast").?.figures;
    try testing.expectEqual(@as(u64, 2), figures.completed);
    try expectRejected(figures, .{ .canceled = 1, .queue_full = 3 });
    try testing.expectEqual(@as(u64, 4), lane.stats().calls_rejected);
}

/// Calls refused by each error of `Lane.rejection_errors` (zeros with the counters out).
const Rejected = struct {
    canceled: u64 = 0,
    queue_full: u64 = 0,
    overloaded: u64 = 0,
    deadline_exceeded: u64 = 0,
    shutdown_in_progress: u64 = 0,
};

fn expectRejected(figures: Lane.Figures, expected: Rejected) !void {
    const counts = [_]u64{
        expected.canceled,          expected.queue_full,           expected.overloaded,
        expected.deadline_exceeded, expected.shutdown_in_progress,
    };
    comptime std.debug.assert(counts.len == Lane.rejection_errors.len);
    try testing.expectEqual(error.Canceled, Lane.rejection_errors[0]);
    try testing.expectEqual(error.ShutdownInProgress, Lane.rejection_errors[4]);
    for (counts, figures.rejected, Lane.rejection_errors) |want, have, err| {
        testing.expectEqual(if (Metrics.enabled) want else 0, have) catch |failure| {
            std.debug.print("refusals by {t}\n", .{err});
            return failure;
        };
    }
}

const Gauges = struct { running: u64 = 0, queued: u64 = 0, waiters: u64 = 0 };

/// Sleeps in short steps until the lane named `name` reports these gauges, as read through
/// `Runtime.metrics` (a state, never a time).
fn waitFigures(rt: *const Runtime, name: []const u8, gauges: Gauges) !void {
    const io = rt.io();
    var polls: u32 = 0;
    while (true) : (polls += 1) {
        const figures = laneNamed(&rt.metrics(), name).?.figures;
        const now: Gauges = .{
            .running = figures.running,
            .queued = figures.queued,
            .waiters = figures.waiters,
        };
        if (std.meta.eql(now, gauges)) return;
        if (polls == 5_000) return error.StateNeverReached; // 5 s or more: a hang, not a race
        try io.sleep(.fromMilliseconds(1), .awake);
    }
}

fn shutdownAfter(lane: *Lane, io: Io) Lane.Report {
    return lane.shutdown(io, .{
        .policy = .cancel,
        .timeout = .{ .duration = .{ .raw = .fromMilliseconds(1), .clock = .awake } },
    });
}

test "Metrics: a waiting lane counts Overloaded, Canceled, DeadlineExceeded, ShutdownInProgress" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const name = "admission-line";
    const lane = try Lane.init(testing.allocator, .{
        .threads = 1,
        .queue_limit = 1,
        .admission = .wait,
        .waiters_max = 1,
        .name = name,
    });
    defer lane.deinit(io);
    var gate: Gate = .{};
    // Opened on every path: a test failing midway must not leave `deinit` waiting for a job.
    defer gate.release();
    var running = try io.concurrent(lane_test.passThrough, .{ lane, io, &gate, 1 });
    try waitFigures(&rt, name, .{ .running = 1 });
    var queued = try io.concurrent(lane_test.passThrough, .{ lane, io, &gate, 2 });
    try waitFigures(&rt, name, .{ .running = 1, .queued = 1 });
    var waiting = try io.concurrent(lane_test.passThrough, .{ lane, io, &gate, 3 });
    try waitFigures(&rt, name, .{ .running = 1, .queued = 1, .waiters = 1 });
    try testing.expectError(error.Overloaded, lane.run(io, square, .{2}));
    try testing.expectError(error.Canceled, waiting.cancel(io));
    try waitFigures(&rt, name, .{ .running = 1, .queued = 1 });
    const timeout: Io.Timeout = .{ .duration = .{ .raw = .fromMilliseconds(2), .clock = .awake } };
    try testing.expectError(error.DeadlineExceeded, lane.runTimeout(io, timeout, square, .{2}));
    var failed = try io.concurrent(lane_test.passThrough, .{ lane, io, &gate, 4 });
    try waitFigures(&rt, name, .{ .running = 1, .queued = 1, .waiters = 1 });
    // Fails the caller in line and the queued job, then gives up on the running one.
    const report = shutdownAfter(lane, io);
    try testing.expectEqual(@as(u64, 1), report.jobs_left);
    try testing.expectError(error.ShutdownInProgress, failed.await(io));
    try testing.expectError(error.ShutdownInProgress, queued.await(io));
    try testing.expectError(error.ShutdownInProgress, lane.run(io, square, .{2}));
    gate.release();
    try testing.expectEqual(@as(u64, 1), try running.await(io));

    const figures = laneNamed(&rt.metrics(), name).?.figures;
    try testing.expectEqual(@as(u64, 1), figures.completed);
    try expectRejected(figures, .{
        .canceled = 1,
        .overloaded = 1,
        .deadline_exceeded = 1,
        .shutdown_in_progress = 3,
    });
}

fn sleepJob(duration_ns: u64) u64 {
    os.sleepThread(duration_ns);
    return duration_ns;
}

fn sleepThrough(lane: *Lane, io: Io, duration_ns: u64) Io.Cancelable!void {
    const slept = lane.run(io, sleepJob, .{duration_ns}) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        else => unreachable, // room in the queue, no shutdown
    };
    std.debug.assert(slept == duration_ns);
}

/// Durations of `snapshot` at or under 2^bucket ns (its cumulative count there).
fn atMost(snapshot: Histogram.Snapshot, bucket: usize) u64 {
    var count: u64 = 0;
    for (snapshot.buckets[0 .. bucket + 1]) |in_bucket| count += in_bucket;
    return count;
}

test "Metrics: lane histograms put known sleeps and waits in their buckets" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const name = "sleepers";
    const lane = try Lane.init(testing.allocator, .{ .threads = 1, .name = name });
    defer lane.deinit(io);
    // One job holds the worker 20 ms or more, three wait behind it, then sleep 10 ms each.
    var gate: Gate = .{};
    // Opened on every path: a test failing midway must not leave `deinit` waiting for a job.
    defer gate.release();
    var first = try io.concurrent(lane_test.passThrough, .{ lane, io, &gate, 1 });
    try waitFigures(&rt, name, .{ .running = 1 });
    var group: Io.Group = .init;
    const sleep_ns = 10 * std.time.ns_per_ms;
    for (0..3) |_| try group.concurrent(io, sleepThrough, .{ lane, io, sleep_ns });
    try waitFigures(&rt, name, .{ .running = 1, .queued = 3 });
    const held_ns = 20 * std.time.ns_per_ms;
    try io.sleep(.fromNanoseconds(held_ns), .awake);
    gate.release();
    _ = try first.await(io);
    try group.await(io);
    // And the CPU lane: two jobs of 5 ms.
    for (0..2) |_| _ = try rt.compute(io, sleepJob, .{5 * std.time.ns_per_ms});

    const metrics = rt.metrics();
    const figures = laneNamed(&metrics, name).?.figures;
    const cpu = laneNamed(&metrics, "cpu").?.figures;
    try testing.expectEqual(@as(u64, 4), figures.completed);
    try testing.expectEqual(@as(u64, 2), cpu.completed);
    if (!Metrics.enabled) return;
    try testing.expectEqual(@as(u64, 4), figures.run_time.count);
    // Sleeps never end early: each run is in the bucket of its sleep or above; a bound above
    // catches a duration counted in the wrong unit, far beyond any scheduling delay.
    const run_min = Histogram.bucketOf(sleep_ns); // (8.4, 16.8] ms
    const run_max = Histogram.bucketOf(sleep_ns * 1000);
    try testing.expectEqual(@as(u64, 0), atMost(figures.run_time, run_min - 1));
    try testing.expectEqual(@as(u64, 4), atMost(figures.run_time, run_max));
    try testing.expect(figures.run_time.sum_ns >= 3 * sleep_ns + held_ns);
    try testing.expect(figures.run_time.percentileNs(50).? >= Histogram.boundNs(run_min));
    // The three behind the gate waited 20 ms at least: at most one wait is shorter.
    try testing.expectEqual(@as(u64, 4), figures.queue_wait.count);
    try testing.expect(atMost(figures.queue_wait, Histogram.bucketOf(held_ns) - 1) <= 1);
    try testing.expect(figures.queue_wait.percentileNs(99).? >= held_ns);
    try testing.expectEqual(@as(u64, 2), cpu.run_time.count);
    const cpu_min = Histogram.bucketOf(5 * std.time.ns_per_ms);
    try testing.expectEqual(@as(u64, 0), atMost(cpu.run_time, cpu_min - 1));
}

test "Metrics: the runtime's blocking lane reports each call it ran" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const before = laneNamed(&rt.metrics(), "blocking").?.figures;
    // `access` has no loop operation on either backend: each runs on the blocking lane.
    for (0..10) |_| try Io.Dir.cwd().access(io, ".", .{});
    const after = laneNamed(&rt.metrics(), "blocking").?.figures;
    try testing.expectEqual(@as(u64, 10), after.completed - before.completed);
    if (!Metrics.enabled) return;
    try testing.expectEqual(@as(u64, 10), after.run_time.count - before.run_time.count);
    try testing.expectEqual(@as(u64, 10), after.queue_wait.count - before.queue_wait.count);
}

test "Metrics: lane names: unique, not the runtime's, at most lanes_named_max, freed by deinit" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const gpa = testing.allocator;
    for ([_][]const u8{ "blocking", "cpu" }) |reserved| {
        const refused = Lane.init(gpa, .{ .threads = 1, .name = reserved });
        try testing.expectError(error.NameInUse, refused);
    }
    try testing.expectError(error.InvalidOptions, Lane.init(gpa, .{ .threads = 1, .name = "" }));
    try testing.expectError(error.InvalidOptions, Lane.Sharded.init(gpa, .{
        .lane = .{ .threads = 1, .name = "a shard's own" },
    }));
    var lanes: [config.lanes_named_max]*Lane = undefined;
    var made: usize = 0;
    defer for (lanes[0..made]) |lane| lane.deinit(io);
    for (&lanes, 0..) |*lane, index| {
        var buffer: [16]u8 = undefined;
        const lane_name = try std.fmt.bufPrint(&buffer, "named-{d}", .{index});
        lane.* = try Lane.init(gpa, .{ .threads = 1, .name = lane_name });
        made += 1;
    }
    try testing.expectError(error.NameInUse, Lane.init(gpa, .{ .threads = 1, .name = "named-3" }));
    const past = Lane.init(gpa, .{ .threads = 1, .name = "one more" });
    try testing.expectError(error.NamesExhausted, past);
    try testing.expectEqual(@as(u32, 2 + config.lanes_named_max), rt.metrics().lane_count);
    // A lane gone frees its name and its place.
    made -= 1;
    lanes[made].deinit(io);
    try testing.expect(laneNamed(&rt.metrics(), "named-15") == null);
    const again = try Lane.init(gpa, .{ .threads = 1, .name = "named-15" });
    lanes[made] = again;
    made += 1;
    try testing.expect(laneNamed(&rt.metrics(), "named-15") != null);
    // A name longer than the limit is cut, not refused.
    made -= 1;
    lanes[made].deinit(io);
    const long = "x" ** (config.lane_name_bytes_max + 10);
    lanes[made] = try Lane.init(gpa, .{ .threads = 1, .name = long });
    made += 1;
    try testing.expect(laneNamed(&rt.metrics(), long[0..config.lane_name_bytes_max]) != null);
}

test "Metrics: a named Lane.Sharded is one lane, its shards' figures summed" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    const sharded = try Lane.Sharded.init(testing.allocator, .{
        .shards = 3,
        .lane = .{ .threads = 1, .queue_limit = 4, .admission = .wait },
        .name = "sharded",
    });
    defer sharded.deinit(io);
    try testing.expectError(error.NameInUse, Lane.init(testing.allocator, .{
        .threads = 1,
        .name = "sharded",
    }));
    for (0..50) |index| _ = try sharded.run(io, square, .{index});
    var group: Io.Group = .init;
    for (0..50) |index| try group.concurrent(io, shardedSquare, .{ sharded, io, index });
    try group.await(io);
    var canceled = try io.concurrent(shardedCanceledFirst, .{ sharded, io });
    try testing.expectError(error.Canceled, canceled.cancel(io));
    const metrics = rt.metrics();
    try testing.expectEqual(@as(u32, 3), metrics.lane_count);
    const figures = laneNamed(&metrics, "sharded").?.figures;
    try testing.expectEqual(@as(u64, 100), figures.completed);
    try testing.expectEqual(sharded.stats().jobs_run, figures.completed);
    try expectRejected(figures, .{ .canceled = 1 });
    if (!Metrics.enabled) return;
    try testing.expectEqual(@as(u64, 100), figures.run_time.count);
    try testing.expectEqual(@as(u64, 100), figures.queue_wait.count);
}

test "Metrics: a named CpuLane is listed from init, its jobs counted, its name freed by deinit" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const gpa = testing.allocator;
    try testing.expectError(error.InvalidOptions, CpuLane.init(gpa, .{ .name = "" }));
    try testing.expectError(error.NameInUse, CpuLane.init(gpa, .{ .name = "cpu" }));
    try testing.expectError(error.InvalidOptions, Runtime.init(gpa, .{ .cpu = .{ .name = "x" } }));
    var cpu: CpuLane = try .init(gpa, .{ .threads = 1, .name = "hash" });
    var live = true;
    defer if (live) cpu.deinit(io);
    // Listed before its threads start, with zeros, as the runtime's own lanes are.
    try testing.expectEqual(@as(u32, 3), rt.metrics().lane_count);
    try testing.expectEqual(@as(u64, 0), laneNamed(&rt.metrics(), "hash").?.figures.completed);
    try testing.expectError(error.NameInUse, Lane.init(gpa, .{ .threads = 1, .name = "hash" }));
    try testing.expectError(error.NameInUse, CpuLane.init(gpa, .{ .name = "hash" }));
    const sleep_ns = 2 * std.time.ns_per_ms;
    for (0..5) |_| try testing.expectEqual(sleep_ns, try cpu.run(io, sleepJob, .{sleep_ns}));

    const metrics = rt.metrics();
    try testing.expectEqual(@as(u32, 3), metrics.lane_count);
    const figures = laneNamed(&metrics, "hash").?.figures;
    try testing.expectEqual(@as(u64, 5), figures.completed);
    // The runtime's own CPU lane ran none of them.
    try testing.expectEqual(@as(u64, 0), laneNamed(&metrics, "cpu").?.figures.completed);
    var allocating: Io.Writer.Allocating = .init(testing.allocator);
    defer allocating.deinit();
    try metrics.writePrometheus(&allocating.writer);
    const text = allocating.written();
    const completed = "weft_lane_jobs_completed_total{lane=\"hash\"}";
    try testing.expectEqual(@as(f64, 5), try sampleValue(text, completed));
    if (Metrics.enabled) {
        try testing.expectEqual(@as(u64, 5), figures.run_time.count);
        try testing.expectEqual(@as(u64, 5), figures.queue_wait.count);
        const run_min = Histogram.bucketOf(sleep_ns);
        try testing.expectEqual(@as(u64, 0), atMost(figures.run_time, run_min - 1));
        const run_count = "weft_lane_run_seconds_count{lane=\"hash\"}";
        try testing.expectEqual(@as(f64, 5), try sampleValue(text, run_count));
    }
    // Gone with `deinit`, and its name free again.
    live = false;
    cpu.deinit(io);
    try testing.expect(laneNamed(&rt.metrics(), "hash") == null);
    var again: CpuLane = try .init(gpa, .{ .name = "hash" });
    again.deinit(io);
}

fn shardedCanceledFirst(sharded: *Lane.Sharded, io: Io) Lane.Result(square) {
    io.sleep(.fromSeconds(60), .awake) catch {};
    io.recancel();
    return sharded.run(io, square, .{1});
}

fn shardedSquare(sharded: *Lane.Sharded, io: Io, x: u64) Io.Cancelable!void {
    const result = sharded.run(io, square, .{x}) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        else => unreachable, // admission waits, the line is long enough, no shutdown
    };
    std.debug.assert(result == x * x);
}

test "Metrics: a server's figures: text lines and Prometheus series, each field its own" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    var metrics = rt.metrics();
    try testing.expect(metrics.server == null);
    // Distinct values, so that a field written under another's name shows.
    var server: Metrics.Server = .{};
    inline for (@typeInfo(Metrics.Server).@"struct".fields, 0..) |field, index| {
        @field(server, field.name) = 1000 + index;
    }
    metrics.server = server;
    var allocating: Io.Writer.Allocating = .init(testing.allocator);
    defer allocating.deinit();
    try metrics.writePrometheus(&allocating.writer);
    const text = allocating.written();
    _ = try checkExposition(testing.allocator, text);
    const expected = [_]struct { series: []const u8, value: u64 }{
        .{ .series = "weft_server_connections_open", .value = server.connections_open },
        .{ .series = "weft_server_connections_max", .value = server.connections_max },
        .{ .series = "weft_server_buffers_held", .value = server.buffers_held },
        .{ .series = "weft_server_buffers_mapped", .value = server.buffers_mapped },
        .{ .series = "weft_server_connections_accepted_total", .value = server.accepted },
        .{
            .series = "weft_server_connections_refused_total{reason=\"connections_max\"}",
            .value = server.rejected_full,
        },
        .{
            .series = "weft_server_connections_refused_total{reason=\"no_task\"}",
            .value = server.rejected_no_task,
        },
        .{ .series = "weft_server_requests_total", .value = server.requests },
        .{ .series = "weft_server_requests_rejected_total", .value = server.requests_rejected },
        .{
            .series = "weft_server_connections_cut_total{timeout=\"idle\"}",
            .value = server.cut_idle_timeout,
        },
        .{
            .series = "weft_server_connections_cut_total{timeout=\"header\"}",
            .value = server.cut_header_timeout,
        },
        .{
            .series = "weft_server_connections_cut_total{timeout=\"body\"}",
            .value = server.cut_body_timeout,
        },
        .{
            .series = "weft_server_connections_cut_total{timeout=\"send\"}",
            .value = server.cut_send_timeout,
        },
        .{
            .series = "weft_server_connections_cut_total{timeout=\"request\"}",
            .value = server.cut_request_timeout,
        },
        .{
            .series = "weft_server_connections_cut_total{timeout=\"drain\"}",
            .value = server.cut_at_drain,
        },
        .{
            .series = "weft_server_connections_closed_for_admission_total",
            .value = server.closed_idle_for_admission,
        },
        .{
            .series = "weft_server_connections_closed_at_drain_total",
            .value = server.closed_idle_at_drain,
        },
        .{ .series = "weft_server_accept_backoffs_total", .value = server.accept_backoffs },
        .{ .series = "weft_server_accept_errors_total", .value = server.accept_errors },
    };
    comptime std.debug.assert(expected.len == @typeInfo(Metrics.Server).@"struct".fields.len);
    for (expected) |entry| {
        const value = try sampleValue(text, entry.series);
        try testing.expectEqual(@as(f64, @floatFromInt(entry.value)), value);
    }
    var buffer: [16 * 1024]u8 = undefined;
    var writer: Io.Writer = .fixed(&buffer);
    try metrics.writeText(&writer);
    const table = writer.buffered();
    const line = "\n\nserver: 1000 of 1001 connections open";
    try testing.expect(std.mem.indexOf(u8, table, line) != null);
}

const parked = @import("parked.zig");

/// `field` of every executor of `metrics`, summed.
fn executorSum(metrics: *const Metrics, comptime field: []const u8) u64 {
    var sum: u64 = 0;
    for (metrics.executorsSlice()) |executor| sum += @field(executor, field);
    return sum;
}

fn readByte(io: Io, stream: Io.net.Stream) !u8 {
    var buffer: [1]u8 = undefined;
    var reader = stream.reader(io, &buffer);
    return reader.interface.takeByte() catch |err| switch (err) {
        error.ReadFailed => return reader.err.?,
        error.EndOfStream => return error.EndOfStream,
    };
}

test "Metrics: io_canceled counts a canceled read once, and a read that completes not at all" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    var address: Io.net.IpAddress = .{ .ip4 = .loopback(0) };
    var server = try address.listen(io, .{ .reuse_address = true });
    defer server.deinit(io);
    const client = try server.socket.address.connect(io, .{ .mode = .stream });
    defer client.close(io);
    const peer = try server.accept(io);
    defer peer.close(io);

    // A read parked in the loop, canceled: one operation canceled, and it ended.
    var canceled = try io.concurrent(readByte, .{ io, client });
    try parked.waitParked(io, &canceled, .cancelable);
    const before_cancel = rt.metrics();
    try testing.expectError(error.Canceled, canceled.cancel(io));
    const after_cancel = rt.metrics();
    // A read parked in the loop that gets its byte: it ended, and nothing was canceled.
    var completed = try io.concurrent(readByte, .{ io, client });
    defer _ = completed.cancel(io) catch {};
    try parked.waitParked(io, &completed, .cancelable);
    const before_byte = rt.metrics();
    var writer = peer.writer(io, &.{});
    try writer.interface.writeAll("z");
    try testing.expectEqual('z', try completed.await(io));
    const after_byte = rt.metrics();
    if (!Metrics.enabled) return;

    const canceled_by_cancel = executorSum(&after_cancel, "io_canceled") -
        executorSum(&before_cancel, "io_canceled");
    try testing.expectEqual(1, canceled_by_cancel);
    const completed_by_cancel = executorSum(&after_cancel, "io_completed") -
        executorSum(&before_cancel, "io_completed");
    try testing.expectEqual(1, completed_by_cancel);
    const canceled_by_byte = executorSum(&after_byte, "io_canceled") -
        executorSum(&before_byte, "io_canceled");
    try testing.expectEqual(0, canceled_by_byte);
    const completed_by_byte = executorSum(&after_byte, "io_completed") -
        executorSum(&before_byte, "io_completed");
    try testing.expect(completed_by_byte >= 1);
}

// One test per documented counter not exercised above (docs/METRICS.md), each against a
// workload whose effect on it is known, so that a counter that stops counting, or counts
// another thing, fails by name.

/// Two tasks that take turns `rounds` times through two events: each wakes the other, which
/// runs next from the LIFO slot.
const TakingTurns = struct {
    events: [2]Io.Event = .{ .unset, .unset },

    fn run(turns: *TakingTurns, io: Io, side: usize, rounds: u32) Io.Cancelable!void {
        for (0..rounds) |_| {
            if (side == 1) {
                try turns.events[1].wait(io);
                turns.events[1].reset();
                turns.events[0].set(io);
            } else {
                turns.events[1].set(io);
                try turns.events[0].wait(io);
                turns.events[0].reset();
            }
        }
    }
};

test "Metrics: lifo_hits counts each task woken by the one before it and run next" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const rounds = 1000;
    var turns: TakingTurns = .{};
    const before = rt.metrics();
    var group: Io.Group = .init;
    defer group.cancel(io);
    try group.concurrent(io, TakingTurns.run, .{ &turns, io, 1, rounds });
    try group.concurrent(io, TakingTurns.run, .{ &turns, io, 0, rounds });
    try group.await(io);
    const after = rt.metrics();
    if (!Metrics.enabled) return;
    // Two wakes a round, each run next; a few more or less at the start and the end.
    const hits = after.executors[0].lifo_hits - before.executors[0].lifo_hits;
    try testing.expect(hits >= 2 * rounds - 4);
    try testing.expect(hits <= 2 * rounds + 4);
}

test "Metrics: sleeps and idle_ns grow while the executor sleeps, busy_ns while a task computes" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1, .stall_threshold_ns = null });
    defer rt.deinit();
    const io = rt.io();
    const ms = std.time.ns_per_ms;
    const asleep = rt.metrics();
    try io.sleep(.fromMilliseconds(60), .awake);
    const awake = rt.metrics();
    spinFor(60 * ms);
    const computed = rt.metrics();
    try testing.expect(awake.uptime_ns - asleep.uptime_ns >= 60 * ms);
    try testing.expect(computed.uptime_ns - awake.uptime_ns >= 60 * ms);
    if (!Metrics.enabled) return;
    const slept = awake.executors[0];
    const before = asleep.executors[0];
    const spun = computed.executors[0];
    try testing.expect(slept.sleeps > before.sleeps);
    try testing.expect(slept.idle_ns - before.idle_ns >= 40 * ms);
    // A computation neither sleeps nor idles: it is busy.
    try testing.expectEqual(slept.sleeps, spun.sleeps);
    try testing.expectEqual(slept.idle_ns, spun.idle_ns);
    try testing.expect(spun.busy_ns - slept.busy_ns >= 60 * ms);
}

/// Spins until the calling thread has used `duration_ns` of CPU time.
noinline fn spinOnCpuFor(duration_ns: u64) void {
    const clock = std.os.linux.CLOCK.THREAD_CPUTIME_ID;
    const start_ns = os.clockNs(clock).?;
    while (os.clockNs(clock).? -| start_ns < duration_ns) std.atomic.spinLoopHint();
}

noinline fn spinFor(duration_ns: u64) void {
    const start_ns = os.monotonicNs();
    while (os.monotonicNs() -| start_ns < duration_ns) std.atomic.spinLoopHint();
}

fn setAfter(event: *Io.Event, io: Io, delay_ns: u64) void {
    os.sleepThread(delay_ns);
    event.set(io);
}

test "Metrics: wakeups counts wake-ups of a sleeping executor from other threads only" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    // Set by a task on the same executor: no wake-up to send.
    var local_event: Io.Event = .unset;
    const before_local = rt.metrics();
    var setter = try io.concurrent(Io.Event.set, .{ &local_event, io });
    try local_event.wait(io);
    setter.await(io);
    const after_local = rt.metrics();
    // A sleep: the executor sleeps, and its timer, not another thread, ends the sleep.
    try io.sleep(.fromMilliseconds(30), .awake);
    const after_sleep = rt.metrics();
    // Set by a plain thread while the executor sleeps: its loop is woken, once.
    var remote_event: Io.Event = .unset;
    const delay_ns = 30 * std.time.ns_per_ms;
    const thread = try std.Thread.spawn(.{}, setAfter, .{ &remote_event, io, delay_ns });
    defer thread.join();
    try remote_event.wait(io);
    const after_remote = rt.metrics();
    if (!Metrics.enabled) return;
    try testing.expectEqual(before_local.executors[0].wakeups, after_local.executors[0].wakeups);
    try testing.expect(after_sleep.executors[0].sleeps > after_local.executors[0].sleeps);
    try testing.expectEqual(after_local.executors[0].wakeups, after_sleep.executors[0].wakeups);
    const remote = after_remote.executors[0].wakeups - after_sleep.executors[0].wakeups;
    try testing.expectEqual(@as(u64, 1), remote);
}

test "Metrics: queued counts the ready tasks in the run queue, not the LIFO slot" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const waiters = 10;
    var gate: Io.Event = .unset;
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (0..waiters) |_| try group.concurrent(io, Io.Event.wait, .{ &gate, io });
    try parked.waitMembersParked(io, &group, waiters, .cancelable);
    try testing.expectEqual(@as(u64, 0), rt.metrics().executors[0].queued);
    // Woken by the running main task: the last one woken sits in the LIFO slot, the others in
    // the ring, until the main task parks.
    gate.set(io);
    const woken = rt.metrics();
    try group.await(io);
    try testing.expectEqual(@as(u64, waiters - 1), woken.executors[0].queued);
    try testing.expectEqual(@as(u64, 0), rt.metrics().executors[0].queued);
}

test "Metrics: polls counts each look at the loop, none while a task computes" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1, .stall_threshold_ns = null });
    defer rt.deinit();
    const io = rt.io();
    const before = rt.metrics();
    try io.sleep(.fromMilliseconds(10), .awake);
    const slept = rt.metrics();
    spinFor(20 * std.time.ns_per_ms);
    const spun = rt.metrics();
    if (!Metrics.enabled) return;
    // At least the blocking poll of the sleep, which counts as a sleep too.
    const polls = slept.executors[0].polls - before.executors[0].polls;
    try testing.expect(polls >= slept.executors[0].sleeps - before.executors[0].sleeps);
    try testing.expect(polls >= 1);
    try testing.expectEqual(slept.executors[0].polls, spun.executors[0].polls);
}

test "Metrics: held_max_ns, stalls and stall_time record a 150 ms hold" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no stall detector");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    const ms = std.time.ns_per_ms;
    const before = rt.metrics();
    try testing.expectEqual(@as(u64, 0), before.stalls);
    // 150 ms of this thread's CPU time: the watchdog does not count time the thread waited for
    // a CPU as held (a loaded machine's suite runs share two).
    spinOnCpuFor(150 * ms);
    // The watchdog sees the end at its next look (a quarter of the 50 ms threshold), once it
    // is done writing the report (the first one in a Debug build loads the debug information,
    // a second or more on a loaded machine).
    var after = rt.metrics();
    for (0..1000) |_| {
        if (after.stall_time.count > 0) break;
        try io.sleep(.fromMilliseconds(5), .awake);
        after = rt.metrics();
    }
    try testing.expectEqual(@as(u64, 1), after.stalls);
    try testing.expectEqual(@as(u64, 1), after.stall_time.count);
    // Short of the hold by up to a look at each end.
    const held_ns = after.executors[0].held_max_ns;
    try testing.expect(held_ns >= 150 * ms - 2 * 13 * ms);
    // Its log2 bucket, or one on either side.
    const p50_ns = after.stall_time.percentileNs(50).?;
    try testing.expect(p50_ns >= 64 * ms);
}

fn parkUntil(io: Io, release: *Io.Event) Io.Cancelable!void {
    try release.wait(io);
}

test "Metrics: tasks_live counts the tasks alive now, tasks_live_peak the most at once" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var release: Io.Event = .unset;
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (0..7) |_| try group.concurrent(io, parkUntil, .{ io, &release });
    const during = rt.metrics();
    release.set(io);
    try group.await(io);
    const after = rt.metrics();
    try testing.expectEqual(@as(u64, 7), during.tasks_live);
    try testing.expectEqual(@as(u64, 0), after.tasks_live);
    if (!Metrics.enabled) return;
    try testing.expectEqual(@as(u64, 7), after.tasks_live_peak);
}
