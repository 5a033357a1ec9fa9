//! The task dump (`Runtime.dumpTasks`, `Runtime.setName`, `Options.dump_signal`): each test
//! parks tasks in known places and parses the dump (docs/TASK_DUMP.md's format).
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Lane = @import("../lanes/Lane.zig");
const Channel = @import("../sync/channel.zig").Channel;
const frames = @import("../fiber/frames.zig");
const os = @import("../os/linux.zig");
const parked = @import("parked.zig");
const deadline = @import("deadline.zig");
const Notify = @import("../sync/Notify.zig");

/// The dump of `rt` as text, owned by the caller.
fn dumpText(rt: Runtime) ![]u8 {
    var out: Io.Writer.Allocating = .init(testing.allocator);
    errdefer out.deinit();
    try rt.dumpTasks(&out.writer);
    return out.toOwnedSlice();
}

/// One task's line of a dump, split into its fields.
const TaskLine = struct {
    id: u64,
    state: []const u8,
    /// The text after `state=...`, up to the name.
    fields: []const u8,
    name: ?[]const u8,
    /// The trace lines below it.
    trace: []const u8,

    /// The value of `key=` among the fields, if present.
    fn field(line: TaskLine, key: []const u8) ?[]const u8 {
        var words = std.mem.tokenizeScalar(u8, line.fields, ' ');
        while (words.next()) |word| {
            if (word.len > key.len and std.mem.startsWith(u8, word, key) and word[key.len] == '=') {
                return word[key.len + 1 ..];
            }
        }
        return null;
    }

    /// The value of `key="..."` among the fields, if present, still escaped.
    fn quoted(line: TaskLine, comptime key: []const u8) ?[]const u8 {
        const marker = " " ++ key ++ "=\"";
        const start = (std.mem.indexOf(u8, line.fields, marker) orelse return null) + marker.len;
        var end = start;
        while (end < line.fields.len and line.fields[end] != '"') : (end += 1) {
            if (line.fields[end] == '\\') end += 1; // an escaped byte: `\"` or `\\`
        }
        if (end >= line.fields.len) return null; // no closing quote
        return line.fields[start..end];
    }
};

/// Iterates over the task lines of a dump, checking the header and the end line on the way.
const Parser = struct {
    lines: std.mem.SplitIterator(u8, .scalar),
    listed: u64 = 0,
    ended: bool = false,

    fn init(text: []const u8) !Parser {
        var parser: Parser = .{ .lines = std.mem.splitScalar(u8, text, '\n') };
        const header = parser.lines.next() orelse return error.NoHeader;
        if (!std.mem.startsWith(u8, header, "weft task dump: live=")) return error.BadHeader;
        return parser;
    }

    fn next(parser: *Parser) !?TaskLine {
        while (parser.lines.next()) |text| {
            if (std.mem.startsWith(u8, text, "end of task dump: tasks=")) {
                const count = try std.fmt.parseInt(u64, text["end of task dump: tasks=".len..], 10);
                if (count != parser.listed) return error.CountMismatch;
                parser.ended = true;
                return null;
            }
            if (!std.mem.startsWith(u8, text, "task ")) return error.UnexpectedLine;
            var line: TaskLine = undefined;
            var rest = text["task ".len..];
            const id_end = std.mem.indexOfScalar(u8, rest, ' ') orelse return error.NoState;
            line.id = try std.fmt.parseInt(u64, rest[0..id_end], 10);
            rest = rest[id_end + 1 ..];
            if (!std.mem.startsWith(u8, rest, "state=")) return error.NoState;
            rest = rest["state=".len..];
            const state_end = std.mem.indexOfScalar(u8, rest, ' ') orelse rest.len;
            line.state = rest[0..state_end];
            rest = rest[state_end..];
            if (std.mem.indexOf(u8, rest, " name=\"")) |name_start| {
                line.name = rest[name_start + " name=\"".len .. rest.len - 1];
                rest = rest[0..name_start];
            } else line.name = null;
            line.fields = rest;
            // The trace: the indented lines that follow, as one slice of the text.
            const trace_start = parser.lines.index orelse text.len;
            var trace_end = trace_start;
            while (parser.lines.peek()) |following| {
                if (!std.mem.startsWith(u8, following, "    ")) break;
                _ = parser.lines.next();
                trace_end = parser.lines.index orelse parser.lines.buffer.len;
            }
            line.trace = parser.lines.buffer[trace_start..trace_end];
            parser.listed += 1;
            return line;
        }
        return error.NoEndLine;
    }

    /// The line of the task named `name`.
    fn find(text: []const u8, name: []const u8) !TaskLine {
        var parser: Parser = try .init(text);
        while (try parser.next()) |line| {
            if (line.name != null and std.mem.eql(u8, line.name.?, name)) return line;
        }
        return error.TaskNotListed;
    }
};

fn sleepNamed(io: Io, index: usize) Io.Cancelable!void {
    var name_buffer: [32]u8 = undefined;
    Runtime.setName(io, std.fmt.bufPrint(&name_buffer, "sleeper {d}", .{index}) catch unreachable);
    try io.sleep(.fromSeconds(60), .awake);
}

test "dump: 10,000 sleeping tasks are each listed once, with state sleep" {
    const count = 10_000;
    var rt = try Runtime.init(testing.allocator, .{ .stack_size_bytes = 256 * 1024 });
    defer rt.deinit();
    const io = rt.io();
    const futures = try testing.allocator.alloc(Io.Future(Io.Cancelable!void), count);
    defer testing.allocator.free(futures);
    for (futures, 0..) |*future, index| future.* = try io.concurrent(sleepNamed, .{ io, index });
    defer for (futures) |*future| future.cancel(io) catch {};
    for (futures) |*future| try parked.waitParked(io, future, .cancelable);

    const text = try dumpText(rt);
    defer testing.allocator.free(text);
    var seen: std.DynamicBitSetUnmanaged = try .initEmpty(testing.allocator, count);
    defer seen.deinit(testing.allocator);
    var parser: Parser = try .init(text);
    var main_listed = false;
    while (try parser.next()) |line| {
        if (line.id == 1) {
            main_listed = true; // the main task, which dumps: running
            try testing.expectEqualStrings("running", line.state);
            continue;
        }
        try testing.expectEqualStrings("sleep", line.state);
        const left_ms = try std.fmt.parseInt(i64, line.field("deadline_in_ms").?, 10);
        try testing.expect(left_ms > 0 and left_ms <= 60_000);
        _ = try std.fmt.parseInt(u64, line.field("age_ms").?, 10);
        const name = line.name.?;
        try testing.expect(std.mem.startsWith(u8, name, "sleeper "));
        const index = try std.fmt.parseInt(usize, name["sleeper ".len..], 10);
        try testing.expect(!seen.isSet(index)); // listed once
        seen.set(index);
    }
    try testing.expect(parser.ended);
    try testing.expect(main_listed);
    try testing.expectEqual(@as(usize, count), seen.count());
}

/// Blocks the lane's worker until `release` is set (a plain OS thread: the kernel futex).
fn holdWorker(release: *std.atomic.Value(u32)) void {
    while (release.load(.acquire) == 0) os.futexWait(release, 0, null);
}

fn waitInLane(io: Io, lane: *Lane, release: *std.atomic.Value(u32)) !void {
    Runtime.setName(io, "in a lane job");
    try lane.run(io, holdWorker, .{release});
}

fn lockMutex(io: Io, mutex: *Io.Mutex) Io.Cancelable!void {
    Runtime.setName(io, "on a mutex");
    try mutex.lock(io);
    mutex.unlock(io);
}

fn readSocket(io: Io, stream: Io.net.Stream) !u8 {
    Runtime.setName(io, "reading a socket");
    var buffer: [1]u8 = undefined;
    var reader = stream.reader(io, &buffer);
    return reader.interface.takeByte() catch |err| switch (err) {
        error.ReadFailed => return reader.err.?,
        error.EndOfStream => return error.EndOfStream,
    };
}

fn receive(io: Io, channel: *Channel(u8)) anyerror!u8 {
    Runtime.setName(io, "on a channel");
    return channel.recv(io);
}

fn awaitOther(io: Io, other: *Io.Future(anyerror!u8)) anyerror!u8 {
    Runtime.setName(io, "awaiting");
    return other.await(io);
}

test "dump: names what a task waits for: a lane job, a futex, a socket read, a channel, an await" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();

    const lane = try Lane.init(testing.allocator, .{
        .threads = 1,
        .queue_limit = 4,
        .name = "legacy \"db\"",
    });
    defer lane.deinit(io);
    var release: std.atomic.Value(u32) = .init(0);
    var in_lane = try io.concurrent(waitInLane, .{ io, lane, &release });

    var mutex: Io.Mutex = .init;
    try mutex.lock(io);
    var on_mutex = try io.concurrent(lockMutex, .{ io, &mutex });

    const loopback: Io.net.IpAddress = .{ .ip4 = .loopback(0) };
    var server = try loopback.listen(io, .{});
    defer server.deinit(io);
    const client = try server.socket.address.connect(io, .{ .mode = .stream });
    defer client.close(io);
    const peer = try server.accept(io);
    defer peer.close(io);
    var reading = try io.concurrent(readSocket, .{ io, client });

    var slots: [1]u8 = undefined;
    var channel: Channel(u8) = .init(&slots);
    var on_channel: Io.Future(anyerror!u8) = try io.concurrent(receive, .{ io, &channel });
    var awaiting = try io.concurrent(awaitOther, .{ io, &on_channel });

    try parked.waitParked(io, &in_lane, .either);
    try parked.waitParked(io, &on_mutex, .cancelable);
    try parked.waitParked(io, &reading, .cancelable);
    try parked.waitParked(io, &on_channel, .cancelable);
    try parked.waitParked(io, &awaiting, .cancelable);
    const text = try dumpText(rt);
    defer testing.allocator.free(text);

    const lane_line = try Parser.find(text, "in a lane job");
    try testing.expectEqualStrings("lane", lane_line.state);
    try expectAddress(lane_line.field("lane"), @intFromPtr(lane));
    // The lane's name is copied with process_vm_readv, as the stack is: without it, no name.
    if (std.mem.indexOf(u8, lane_line.trace, "process_vm_readv") == null) {
        try testing.expectEqualStrings("legacy \\\"db\\\"", lane_line.quoted("lane_name").?);
    }
    const mutex_line = try Parser.find(text, "on a mutex");
    try testing.expectEqualStrings("futex", mutex_line.state);
    try expectAddress(mutex_line.field("address"), @intFromPtr(&mutex.state));
    const socket_line = try Parser.find(text, "reading a socket");
    try testing.expectEqualStrings("io", socket_line.state);
    const fd = try std.fmt.parseInt(i32, socket_line.field("fd").?, 10);
    try testing.expectEqual(client.socket.handle, fd);
    const op = socket_line.field("op").?;
    try testing.expect(std.mem.startsWith(u8, op, "recv") or std.mem.eql(u8, op, "read") or
        std.mem.eql(u8, op, "poll"));
    const channel_line = try Parser.find(text, "on a channel");
    try testing.expectEqualStrings("channel_recv", channel_line.state);
    try expectAddress(channel_line.field("object"), @intFromPtr(&channel.receivers));
    const await_line = try Parser.find(text, "awaiting");
    try testing.expectEqualStrings("await", await_line.state);
    const awaited = try std.fmt.parseInt(u64, await_line.field("task").?, 10);
    try testing.expectEqual(channel_line.id, awaited);

    release.store(1, .release);
    os.futexWake(&release, 1);
    try in_lane.await(io);
    mutex.unlock(io);
    try on_mutex.await(io);
    var writer = peer.writer(io, &.{});
    try writer.interface.writeAll("z");
    try testing.expectEqual(@as(u8, 'z'), try reading.await(io));
    try channel.send(io, 7);
    try testing.expectEqual(@as(u8, 7), try awaiting.await(io));
}

fn expectAddress(text: ?[]const u8, address: usize) !void {
    const hex = text orelse return error.NoAddress;
    if (!std.mem.startsWith(u8, hex, "0x")) return error.NotHex;
    try testing.expectEqual(address, try std.fmt.parseInt(usize, hex[2..], 16));
}

fn sleepWithName(io: Io, name: []const u8) Io.Cancelable!void {
    Runtime.setName(io, name);
    try io.sleep(.fromSeconds(60), .awake);
}

test "dump: a named task shows its name; a long one is cut, quotes escaped; off weft, a no-op" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    const long = "conn \"10.0.0.7\":5123 and then a tail past the limit";
    var named = try io.concurrent(sleepWithName, .{ io, long });
    defer named.cancel(io) catch {};
    try parked.waitParked(io, &named, .cancelable);
    const text = try dumpText(rt);
    defer testing.allocator.free(text);
    var parser: Parser = try .init(text);
    var found = false;
    while (try parser.next()) |line| {
        const name = line.name orelse continue;
        // The first 32 bytes, its two quotes escaped.
        try testing.expectEqualStrings("conn \\\"10.0.0.7\\\":5123 and then a ", name);
        try testing.expectEqual(@as(usize, Runtime.task_name_bytes_max + 2), name.len);
        found = true;
    }
    try testing.expect(found);

    // Another Io, and a thread weft does not run: nothing to name, and no harm.
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    Runtime.setName(threaded.io(), "never shown");
    const thread = try std.Thread.spawn(.{}, Runtime.setName, .{ io, "never shown" });
    thread.join();
    const after = try dumpText(rt);
    defer testing.allocator.free(after);
    try testing.expect(std.mem.indexOf(u8, after, "never shown") == null);
}

test "dump: a writer that fails ends the dump with its error, and the runtime goes on" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (0..100) |index| try group.concurrent(io, sleepNamed, .{ io, index });
    // Room for the header and a few lines only.
    var buffer: [300]u8 = undefined;
    var short: Io.Writer = .fixed(&buffer);
    try testing.expectError(error.WriteFailed, rt.dumpTasks(&short));
    // The table's lock was let go: spawns and dumps still work.
    var future = io.async(sleepNamed, .{ io, 100 });
    future.cancel(io) catch {};
    const text = try dumpText(rt);
    defer testing.allocator.free(text);
    var parser: Parser = try .init(text);
    while (try parser.next()) |_| {}
    try testing.expect(parser.ended);
}

noinline fn parkedInThisFunction(io: Io) Io.Cancelable!void {
    Runtime.setName(io, "traced");
    try io.sleep(.fromSeconds(60), .awake);
}

test "dump: the stack trace of a parked task names the function it parks in" {
    if (!std.options.allow_stack_tracing) {
        return os.skipTest(@src(), "no debug information in this build (stack tracing off)");
    }
    if (!frames.available) return os.skipTest(@src(), "this build omits frame pointers");
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var traced = try io.concurrent(parkedInThisFunction, .{io});
    defer traced.cancel(io) catch {};
    try parked.waitParked(io, &traced, .cancelable);
    const text = try dumpText(rt);
    defer testing.allocator.free(text);
    const line = try Parser.find(text, "traced");
    if (std.mem.indexOf(u8, line.trace, "process_vm_readv") != null) {
        return os.skipTest(@src(), "process_vm_readv is unavailable (qemu-user or seccomp)");
    }
    try testing.expect(std.mem.indexOf(u8, line.trace, "in parkedInThisFunction (") != null);
    // The walk reached the fiber's start, where the chain ends.
    try testing.expect(std.mem.indexOf(u8, line.trace, "trace cut") == null);
}

test "dump: the dump signal writes a dump to stderr, and the process goes on" {
    const signal: linux.SIG = .USR2;
    var before: linux.Sigaction = undefined;
    try testing.expectEqual(@as(usize, 0), linux.sigaction(signal, null, &before));
    {
        var rt = try Runtime.init(testing.allocator, .{ .dump_signal = signal });
        defer rt.deinit();
        const io = rt.io();
        var named = try io.concurrent(sleepWithName, .{ io, "waiting for the signal" });
        defer named.cancel(io) catch {};
        try parked.waitParked(io, &named, .cancelable);
        // The first dump of the process loads the debug information to name return addresses,
        // and the dump's writes wait for the names: seconds in this binary under
        // ThreadSanitizer (its 10 s wait ran out so, 1 run in 5). Loaded here, before the wait.
        var discard: Io.Writer.Discarding = .init(&.{});
        try rt.dumpTasks(&discard.writer);

        // stderr goes to a memory file while the signal's dump is written.
        const memory_fd: i32 = @intCast(linux.memfd_create("dump", linux.MFD.CLOEXEC));
        try testing.expect(memory_fd >= 0);
        defer os.closeFd(memory_fd);
        const saved_stderr: i32 = @intCast(linux.dup(2));
        try testing.expect(saved_stderr >= 0);
        defer os.closeFd(saved_stderr);
        _ = linux.dup3(memory_fd, 2, 0);
        const text = dumpFromSignal(io, signal, memory_fd);
        _ = linux.dup3(saved_stderr, 2, 0);
        const dump = try text;
        defer testing.allocator.free(dump);
        const line = try Parser.find(dump, "waiting for the signal");
        try testing.expectEqualStrings("sleep", line.state);

        // The process, and the runtime, go on.
        var after = io.async(sleepWithName, .{ io, "after" });
        after.cancel(io) catch {};
    }
    var restored: linux.Sigaction = undefined;
    try testing.expectEqual(@as(usize, 0), linux.sigaction(signal, null, &restored));
    try testing.expectEqual(before.handler.handler, restored.handler.handler);
}

/// Sends `signal` to this process and returns what reaches `memory_fd` once the dump's end
/// line is there (at most 60 s: naming the frames of stacks not seen before, the main thread's
/// among them, takes seconds under ThreadSanitizer).
fn dumpFromSignal(io: Io, signal: linux.SIG, memory_fd: i32) ![]u8 {
    _ = linux.kill(linux.getpid(), signal);
    const start_ns = os.monotonicNs();
    var text: std.ArrayList(u8) = .empty;
    errdefer text.deinit(testing.allocator);
    while (os.monotonicNs() - start_ns < 60 * std.time.ns_per_s) {
        try io.sleep(.fromMilliseconds(5), .awake);
        const size = linux.lseek(memory_fd, 0, linux.SEEK.END);
        try text.resize(testing.allocator, size);
        _ = linux.pread(memory_fd, text.items.ptr, text.items.len, 0);
        if (std.mem.indexOf(u8, text.items, "end of task dump: tasks=") != null) {
            return text.toOwnedSlice(testing.allocator);
        }
    }
    return error.NoDumpWithin60s;
}

fn spawnAndEnd(io: Io, stop: *std.atomic.Value(bool)) Io.Cancelable!void {
    var round: u64 = 0;
    while (!stop.load(.acquire)) : (round += 1) {
        var group: Io.Group = .init;
        for (0..32) |index| group.async(io, sleepBriefly, .{ io, index + round });
        try group.await(io);
    }
}

fn sleepBriefly(io: Io, index: u64) void {
    if (index % 3 == 0) Runtime.setName(io, "brief");
    io.sleep(.fromMicroseconds(@intCast(index % 50)), .awake) catch {};
}

fn dumpRepeatedly(rt: Runtime, dumps: usize) !void {
    for (0..dumps) |_| {
        var discard: Io.Writer.Discarding = .init(&.{});
        try rt.dumpTasks(&discard.writer);
    }
}

test "Runtime: dumpTasks from a plain thread and from a task while tasks come and go" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var stop: std.atomic.Value(bool) = .init(false);
    var churn = try io.concurrent(spawnAndEnd, .{ io, &stop });
    const thread = try std.Thread.spawn(.{}, dumpRepeatedly, .{ rt, 20 });
    var from_task = try io.concurrent(dumpRepeatedly, .{ rt, 20 });
    thread.join();
    try from_task.await(io);
    stop.store(true, .release);
    try churn.await(io);
}

fn returnOrFail(io: Io, value: u32) error{ Odd, Canceled }!u32 {
    try io.sleep(.fromMicroseconds(50), .awake);
    if (value % 2 == 1) return error.Odd;
    return value;
}

test "deadline: a wait that ends returns its result; one never resumed is named in the dump" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try testing.expectEqual(@as(u32, 4), try deadline.run(io, returnOrFail, .{ io, 4 }));
    try testing.expectError(error.Odd, deadline.run(io, returnOrFail, .{ io, 5 }));
    var future = try io.concurrent(returnOrFail, .{ io, 6 });
    try testing.expectEqual(@as(u32, 6), try deadline.await(io, &future));

    var never: Notify = .init;
    var out: Io.Writer.Allocating = .init(testing.allocator);
    defer out.deinit();
    const timeout_ns = 20 * std.time.ns_per_ms;
    try testing.expectError(
        error.WaiterNeverResumed,
        deadline.runReporting(io, timeout_ns, &out, Notify.wait, .{ &never, io }),
    );
    const text = out.written();
    const dump_at = std.mem.indexOf(u8, text, "weft task dump: ") orelse return error.NoDump;
    const line = try Parser.find(text[dump_at..], "deadline: the wait under test");
    try testing.expectEqualStrings("notify", line.state);
    try expectAddress(line.field("object"), @intFromPtr(&never.waiters));
    try testing.expect(std.mem.endsWith(u8, text, "deadline: the wait ended when canceled\n"));
    try testing.expectEqual(@as(usize, 0), never.waiters.len); // the canceled wait withdrew
}
