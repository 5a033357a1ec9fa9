//! `weft.Metrics` against workloads whose counts are known, and its two text formats.
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Metrics = @import("../Metrics.zig");
const os = @import("../os/linux.zig");

fn sleeper(io: Io, duration_ms: i64) Io.Cancelable!void {
    try io.sleep(.fromMilliseconds(duration_ms), .awake);
}

test "Metrics: 100 sleepers on one executor: spawned, peak, resumed and timers exactly" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    var group: Io.Group = .init;
    for (0..100) |_| try group.concurrent(io, sleeper, .{ io, 100 });
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

fn snapshotLoop(rt: *const Runtime, done: *std.atomic.Value(bool), taken: *u64) void {
    while (!done.load(.acquire)) {
        const metrics = rt.metrics();
        std.mem.doNotOptimizeAway(&metrics);
        taken.* += 1;
    }
}

test "Metrics: snapshots from a plain thread while tasks run on two executors" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    var done: std.atomic.Value(bool) = .init(false);
    var taken: u64 = 0;
    const thread = try std.Thread.spawn(.{}, snapshotLoop, .{ &rt, &done, &taken });
    for (0..20) |_| {
        var group: Io.Group = .init;
        for (0..50) |_| try group.concurrent(io, sleeper, .{ io, 1 });
        try group.await(io);
    }
    done.store(true, .release);
    thread.join();
    try testing.expect(taken > 0);
    const metrics = rt.metrics();
    try testing.expectEqual(@as(u64, 0), metrics.tasks_live);
    if (Metrics.enabled) try testing.expectEqual(@as(u64, 1000), metrics.tasks_spawned);
}

test "Metrics: writeText is one line for the runtime and one row per executor" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const metrics = rt.metrics();
    var buffer: [4096]u8 = undefined;
    var writer: Io.Writer = .fixed(&buffer);
    try metrics.writeText(&writer);
    const text = writer.buffered();
    var lines = std.mem.splitScalar(u8, std.mem.trimEnd(u8, text, "\n"), '\n');
    try testing.expect(std.mem.startsWith(u8, lines.next().?, "weft: up "));
    const header = lines.next().?;
    try testing.expect(std.mem.startsWith(u8, header, "executor"));
    try testing.expect(std.mem.indexOf(u8, header, "tasks_resumed") != null);
    try testing.expect(std.mem.indexOf(u8, header, "busy_ms") != null);
    var rows: usize = 0;
    while (lines.next()) |row| : (rows += 1) {
        // Aligned: every row as wide as the header.
        try testing.expectEqual(header.len, row.len);
    }
    try testing.expectEqual(@as(usize, 2), rows);
    // A writer that fails ends the table with its error.
    var tiny: [16]u8 = undefined;
    var short: Io.Writer = .fixed(&tiny);
    try testing.expectError(error.WriteFailed, metrics.writeText(&short));
}

test "Metrics: writePrometheus parses: HELP and TYPE first, no duplicate series, units" {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2 });
    defer rt.deinit();
    const io = rt.io();
    var group: Io.Group = .init;
    for (0..10) |_| try group.concurrent(io, sleeper, .{ io, 1 });
    try group.await(io);
    const metrics = rt.metrics();
    var allocating: Io.Writer.Allocating = .init(testing.allocator);
    defer allocating.deinit();
    try metrics.writePrometheus(&allocating.writer);
    const summary = try checkExposition(testing.allocator, allocating.written());
    // 8 runtime series, and 16 per executor.
    try testing.expectEqual(@as(usize, 8 + 16 * 2), summary.samples);
    try testing.expectEqual(@as(usize, 8 + 16), summary.families);
    if (Metrics.enabled) {
        const spawned = "weft_tasks_spawned_total 10\n";
        try testing.expect(std.mem.indexOf(u8, allocating.written(), spawned) != null);
    }
}

const Exposition = struct { samples: usize, families: usize };

/// A strict reader of the Prometheus text format as `writePrometheus` writes it: each family
/// is `# HELP`, `# TYPE` (counter or gauge), then its samples; names are `weft_*` in
/// snake case, counters end in `_total`; values are numbers; no series appears twice.
fn checkExposition(gpa: std.mem.Allocator, text: []const u8) !Exposition {
    var series: std.StringHashMapUnmanaged(void) = .empty;
    defer series.deinit(gpa);
    var families: std.StringHashMapUnmanaged(void) = .empty;
    defer families.deinit(gpa);
    var family: ?[]const u8 = null;
    var kind: ?[]const u8 = null;
    var samples: usize = 0;
    var lines = std.mem.splitScalar(u8, text, '\n');
    while (lines.next()) |line| {
        if (line.len == 0) {
            try testing.expect(lines.next() == null); // only the final newline
            break;
        }
        if (std.mem.startsWith(u8, line, "# HELP ")) {
            var words = std.mem.splitScalar(u8, line["# HELP ".len..], ' ');
            const name = words.next().?;
            try expectName(name);
            try testing.expect(words.rest().len > 0);
            const entry = try families.getOrPut(gpa, name);
            try testing.expect(!entry.found_existing);
            family = name;
            kind = null;
            continue;
        }
        if (std.mem.startsWith(u8, line, "# TYPE ")) {
            var words = std.mem.splitScalar(u8, line["# TYPE ".len..], ' ');
            try testing.expectEqualStrings(family.?, words.next().?);
            const type_name = words.next().?;
            try testing.expect(std.mem.eql(u8, type_name, "counter") or
                std.mem.eql(u8, type_name, "gauge"));
            try testing.expect(words.next() == null);
            const is_total = std.mem.endsWith(u8, family.?, "_total");
            try testing.expectEqual(std.mem.eql(u8, type_name, "counter"), is_total);
            kind = type_name;
            continue;
        }
        try testing.expect(kind != null);
        const space = std.mem.lastIndexOfScalar(u8, line, ' ').?;
        const key = line[0..space];
        _ = try std.fmt.parseFloat(f64, line[space + 1 ..]);
        const name_end = std.mem.indexOfScalar(u8, key, '{') orelse key.len;
        try testing.expectEqualStrings(family.?, key[0..name_end]);
        if (name_end < key.len) {
            try testing.expect(std.mem.startsWith(u8, key[name_end..], "{executor=\""));
            try testing.expect(std.mem.endsWith(u8, key, "\"}"));
        }
        const entry = try series.getOrPut(gpa, key);
        try testing.expect(!entry.found_existing);
        samples += 1;
    }
    return .{ .samples = samples, .families = families.count() };
}

fn expectName(name: []const u8) !void {
    try testing.expect(std.mem.startsWith(u8, name, "weft_"));
    for (name) |byte| try testing.expect(std.ascii.isLower(byte) or byte == '_');
}
