//! weft.Server in its three shapes, driven by a raw HTTP/1.1 client over loopback. The
//! server runs on its own thread (its own runtime); the client on the test's runtime, so every
//! test also has two runtimes live in one process.
//!
//! Bounded, so that a server bug fails a test instead of hanging it: the server's timeouts
//! are 100-300 ms; every client runs under `bounded` (its reads are canceled and the test
//! fails with `error.TestTimedOut` after `client_deadline_s`); `Running.finish` panics if the
//! server has not stopped within its drain timeout and `stop_allowance_ns`, once the
//! server's runtimes wrote their task dumps (what each task waits for) to stderr; every wait
//! for a child process polls at most a few seconds. The limits are far above what a passing
//! test takes: they are hang guards, not timed assertions. The timed assertions (when a
//! timeout cut, when a supervisor restarted or killed a worker) bound each wait by what the
//! code promises, plus an allowance for a loaded machine's scheduling that keeps the bounds of
//! different causes apart.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const os = @import("../os/linux.zig");
const memory_limits = @import("../os/memory_limits.zig");
const Runtime = @import("../Runtime.zig");
const Server = @import("../server/Server.zig");
const config = @import("../config.zig");
const supervisor_shape = @import("../server/supervisor.zig");
const coverage = @import("../std_io/coverage.zig");
const metrics_test = @import("metrics_test.zig");
const qemu = @import("qemu.zig");

pub const hello = Server.http.Fixed("Hello World");
const request_get = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";

/// Longest a test's client side may take before it is canceled.
const client_deadline_s = 20;
/// What a test that times a cut allows beyond the reaper's promised lateness, for the
/// scheduling of the reaper, the connection's task and the client on a loaded 2-core machine
/// (two test runs at once, other engineers' builds). Observed lateness: 12-31 ms.
pub const cut_allowance_ms = 100;
/// What `Running.finish` allows beyond the server's drain timeout for `run` to return after
/// `stop`: past the drain, a stop takes milliseconds even on a loaded machine.
const stop_allowance_ns = 5 * std.time.ns_per_s;
/// Makes a `Running` server's runtimes write their task dumps to stderr
/// (`Runtime.Options.dump_signal`): what `finish` sends when the server does not stop.
const dump_signal: std.posix.SIG = .USR1;
/// How long `finish` lets the dumps be written before it panics: the process's first dump
/// loads the debug information (seconds in a Debug build under ThreadSanitizer).
const dump_wait_ns = 3 * std.time.ns_per_s;

/// Runs `function(args...)` on `io` and returns its result, or cancels it and returns
/// `error.TestTimedOut` once `client_deadline_s` have passed (weft cancels a pending socket
/// read or write, so a client waiting on a server that never answers does return).
pub fn bounded(io: Io, comptime function: anytype, args: anytype) !void {
    return boundedBy(io, .fromSeconds(client_deadline_s), function, args);
}

pub fn boundedBy(io: Io, deadline: Io.Duration, comptime function: anytype, args: anytype) !void {
    const Outcome = union(enum) { done: anyerror!void, timed_out: Io.Cancelable!void };
    var buffer: [2]Outcome = undefined;
    var select: Io.Select(Outcome) = .init(io, &buffer);
    try select.concurrent(.done, function, args);
    select.concurrent(.timed_out, Io.sleep, .{ io, deadline, .awake }) catch |err| {
        select.cancelDiscard();
        return err;
    };
    const first = try select.await();
    select.cancelDiscard();
    return switch (first) {
        .done => |result| result,
        .timed_out => error.TestTimedOut,
    };
}

/// A server running `run` on a thread of its own until `finish`.
pub const Running = struct {
    server: Server,
    thread: std.Thread = undefined,
    result: Server.RunError!Server.Report = error.WorkerStartFailed,
    /// Set (release) when `run` has returned and `result` is written.
    done: std.atomic.Value(bool) = .init(false),
    finished: bool = false,

    pub fn start(running: *Running, options: Server.Options, handler: Server.Handler) !void {
        var dumping = options;
        if (dumping.runtime.dump_signal == null) dumping.runtime.dump_signal = dump_signal;
        running.* = .{ .server = try Server.init(testing.allocator, dumping) };
        errdefer running.server.deinit();
        running.thread = try std.Thread.spawn(.{}, runThread, .{ running, handler });
    }

    fn runThread(running: *Running, handler: Server.Handler) void {
        running.result = running.server.run(handler);
        running.done.store(true, .release); // pairs with the acquire load in `finish`
    }

    /// Stops the server and returns its report. A server that does not stop within its drain
    /// timeout and `stop_allowance_ns` panics the test binary, once its runtimes wrote their
    /// task dumps: its thread still uses `running`, so the test can neither return nor go on.
    pub fn finish(running: *Running) !Server.Report {
        std.debug.assert(!running.finished);
        running.finished = true;
        running.server.stop();
        const limit_ns = running.server.options.drain_timeout_ns + stop_allowance_ns;
        const start_ns = os.monotonicNs();
        while (!running.done.load(.acquire)) {
            if (os.monotonicNs() - start_ns >= limit_ns) stopHung(limit_ns);
            os.sleepThread(10 * std.time.ns_per_ms);
        }
        running.thread.join();
        defer running.server.deinit();
        return running.result;
    }

    /// The server did not stop: its runtimes (each with `dump_signal`) write their task dumps,
    /// which say what each task still waits for, then the test binary panics.
    fn stopHung(limit_ns: u64) noreturn {
        std.debug.print("server did not stop within {d} ms of its stop; its runtimes:\n", .{
            limit_ns / std.time.ns_per_ms,
        });
        _ = linux.kill(linux.getpid(), dump_signal);
        os.sleepThread(dump_wait_ns);
        std.debug.panic("server did not stop within {d} ms of its stop (task dumps above)", .{
            limit_ns / std.time.ns_per_ms,
        });
    }

    /// For an `errdefer` right after `start`: a test failing midway still stops its server,
    /// whose thread uses `running` (about to go out of scope).
    pub fn abandon(running: *Running) void {
        if (!running.finished) _ = running.finish() catch {};
    }
};

pub fn optionsOf(shape: Server.Shape) Server.Options {
    return .{ .address = .{ .ip4 = .loopback(0) }, .shape = shape };
}

/// A `.forked` server of `workers` workers that drain for at most 1 s (the tests that time
/// the drain set a deadline of their own).
fn forkedOptions(workers: u32) Server.Options {
    var options = optionsOf(.{ .forked = workers });
    options.drain_timeout_ns = std.time.ns_per_s;
    return options;
}

/// One keep-alive client connection with its buffers (small: clients live on a fiber's
/// stack, sixteen at a time in one test, and responses are a few hundred bytes).
pub const Client = struct {
    stream: net.Stream,
    read_buffer: [4 * 1024]u8 = undefined,
    write_buffer: [1024]u8 = undefined,
    reader: net.Stream.Reader = undefined,
    writer: net.Stream.Writer = undefined,

    pub fn connect(client: *Client, io: Io, port: u16) !void {
        const address: net.IpAddress = .{ .ip4 = .loopback(port) };
        client.* = .{ .stream = try address.connect(io, .{ .mode = .stream }) };
        client.reader = client.stream.reader(io, &client.read_buffer);
        client.writer = client.stream.writer(io, &client.write_buffer);
    }

    pub fn close(client: *Client, io: Io) void {
        client.stream.close(io);
    }

    pub fn send(client: *Client, bytes: []const u8) !void {
        try client.writer.interface.writeAll(bytes);
        try client.writer.interface.flush();
    }

    /// Reads one response; returns its status and checks the body's length.
    pub fn receive(client: *Client) !u16 {
        const in = &client.reader.interface;
        const status_line = try in.takeDelimiterInclusive('\n');
        try testing.expect(std.mem.startsWith(u8, status_line, "HTTP/1.1 "));
        const status = try std.fmt.parseInt(u16, status_line[9..12], 10);
        var content_length: usize = 0;
        while (true) {
            const line = try in.takeDelimiterInclusive('\n');
            if (std.mem.eql(u8, line, "\r\n")) break;
            const prefix = "content-length: ";
            if (std.ascii.startsWithIgnoreCase(line, prefix)) {
                const digits = std.mem.trim(u8, line[prefix.len..], "\r\n");
                content_length = try std.fmt.parseInt(usize, digits, 10);
            }
        }
        const body = try in.take(content_length);
        if (status == 200) try testing.expectEqualStrings("Hello World", body);
        return status;
    }

    pub fn get(client: *Client) !u16 {
        try client.send(request_get);
        return client.receive();
    }

    /// True once the server closed the connection (end of stream or reset).
    pub fn expectClosed(client: *Client) !void {
        const in = &client.reader.interface;
        if (in.takeByte()) |_| return error.TestUnexpectedData else |err| switch (err) {
            error.EndOfStream, error.ReadFailed => {},
        }
    }
};

test "Server tests: a client waiting on a server that never answers fails, not hangs" {
    // A listener nobody accepts on: the kernel completes the connect, no byte ever comes back.
    var silent = try Server.init(testing.allocator, optionsOf(.single));
    defer silent.deinit();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try testing.expectError(error.TestTimedOut, boundedBy(io, .fromMilliseconds(100), struct {
        fn get(client_io: Io, port: u16) !void {
            var client: Client = undefined;
            try client.connect(client_io, port);
            defer client.close(client_io);
            _ = try client.get();
        }
    }.get, .{ io, silent.port() }));
}

test "Server: .single serves keep-alive requests and stops with nothing cut" {
    const report = try serveWhile(optionsOf(.single), &hello.http_handler, struct {
        fn body(io: Io, p: u16) !void {
            var client: Client = undefined;
            try client.connect(io, p);
            defer client.close(io);
            for (0..3) |_| try testing.expectEqual(200, try client.get());
            var second: Client = undefined;
            try second.connect(io, p);
            defer second.close(io);
            try testing.expectEqual(200, try second.get());
        }
    }.body);
    try testing.expectEqual(2, report.workers.accepted);
    try testing.expectEqual(0, report.workers.cut_at_drain);
}

/// Runs `function(io, args...)` on a runtime of its own, `bounded`: the client side of a test.
fn withClient(comptime function: anytype, args: anytype) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try bounded(io, function, .{io} ++ args);
}

/// Serves `http_handler` with `options` (`Running`) while `body(io, port)` runs as its client
/// (`withClient`), then stops the server and returns its report.
fn serveWhile(
    options: Server.Options,
    http_handler: *const Server.http.Handler,
    comptime body: fn (io: Io, port: u16) anyerror!void,
) !Server.Report {
    var running: Running = undefined;
    try running.start(options, Server.http.handler(http_handler));
    errdefer running.abandon();
    try withClient(body, .{running.server.port()});
    return running.finish();
}

test "Server: .threaded runs two runtimes in one process, with either kind of listeners" {
    for ([_]Server.Listeners{ .reuse_port, .shared }) |listeners| {
        var opts = optionsOf(.{ .threaded = 2 });
        opts.listeners = listeners;
        try expectThreadedServes(opts);
    }
}

test "Server: .single on a runtime of two executors serves connections from both threads" {
    var opts = optionsOf(.single);
    opts.runtime.executors = 2;
    const report = try serveWhile(opts, &hello.http_handler, struct {
        fn body(io: Io, p: u16) !void {
            // Connection tasks on both executors take and free slots concurrently.
            var clients: [16]Client = undefined;
            for (&clients) |*client| try client.connect(io, p);
            defer for (&clients) |*client| client.close(io);
            for (0..3) |_| {
                for (&clients) |*client| try testing.expectEqual(200, try client.get());
            }
        }
    }.body);
    try testing.expectEqual(16, report.workers.accepted);
    try testing.expectEqual(0, report.workers.cut_at_drain);
}

fn expectThreadedServes(opts: Server.Options) !void {
    var running: Running = undefined;
    try running.start(opts, Server.http.handler(&hello.http_handler));
    errdefer running.abandon();
    try testing.expectEqual(
        @as(u32, if (opts.listeners == .shared) 1 else 2),
        running.server.listener_count,
    );
    try withClient(struct {
        fn body(io: Io, p: u16) !void {
            // Sixteen connections: the kernel hashes them over both listeners (or both
            // workers take them from the shared one).
            var clients: [16]Client = undefined;
            for (&clients) |*client| try client.connect(io, p);
            defer for (&clients) |*client| client.close(io);
            for (&clients) |*client| try testing.expectEqual(200, try client.get());
            for (&clients) |*client| try testing.expectEqual(200, try client.get());
        }
    }.body, .{running.server.port()});
    const report = try running.finish();
    try testing.expectEqual(16, report.workers.accepted);
    // The idle keep-alive connections were closed at the drain, none cut mid-request.
    try testing.expectEqual(0, report.workers.cut_at_drain);
}

test "Server: a port in use is reported by init, in every shape" {
    var first = try Server.init(testing.allocator, optionsOf(.single));
    defer first.deinit();
    const taken: net.IpAddress = .{ .ip4 = .loopback(first.port()) };
    for ([_]Server.Shape{ .single, .{ .threaded = 2 }, .{ .forked = 2 } }) |shape| {
        try testing.expectError(error.AddressInUse, Server.init(testing.allocator, .{
            .address = taken,
            .shape = shape,
        }));
    }
    const no_workers = optionsOf(.{ .threaded = 0 });
    try testing.expectError(error.InvalidOptions, Server.init(testing.allocator, no_workers));
}

test "Server: past connections_max a new connection is closed at once (when_full = .refuse)" {
    var opts = optionsOf(.single);
    opts.connections_max = 2;
    opts.when_full = .refuse;
    const report = try serveWhile(opts, &hello.http_handler, struct {
        fn body(io: Io, p: u16) !void {
            var clients: [2]Client = undefined;
            for (&clients) |*client| try client.connect(io, p);
            defer for (&clients) |*client| client.close(io);
            for (&clients) |*client| try testing.expectEqual(200, try client.get());
            var third: Client = undefined;
            try third.connect(io, p);
            defer third.close(io);
            try third.expectClosed();
            // The two admitted connections still work.
            for (&clients) |*client| try testing.expectEqual(200, try client.get());
        }
    }.body);
    try testing.expectEqual(1, report.workers.rejected_full);
    try testing.expectEqual(3, report.workers.accepted);
}

test "Server: a header trickle and an idle connection are cut by their timeouts" {
    var opts = optionsOf(.single);
    opts.header_timeout_ns = 100 * std.time.ns_per_ms;
    opts.idle_timeout_ns = 300 * std.time.ns_per_ms;
    const report = try serveWhile(opts, &hello.http_handler, struct {
        fn body(io: Io, p: u16) !void {
            var slow: Client = undefined;
            try slow.connect(io, p);
            defer slow.close(io);
            var idle: Client = undefined;
            try idle.connect(io, p);
            defer idle.close(io);
            try testing.expectEqual(200, try idle.get());
            // A few bytes of a head, then one more every 40 ms: never complete in time.
            try slow.send("GET / HT");
            for (0..4) |_| {
                try io.sleep(.fromMilliseconds(40), .awake);
                slow.send("T") catch break;
            }
            try slow.expectClosed();
            try idle.expectClosed();
        }
    }.body);
    try testing.expectEqual(1, report.workers.cut_header_timeout);
    try testing.expectEqual(1, report.workers.cut_idle_timeout);
}

test "Server: timeouts cut no phase early: gaps under the idle timeout, an idle cut after it" {
    var opts = optionsOf(.single);
    opts.header_timeout_ns = 200 * std.time.ns_per_ms;
    opts.idle_timeout_ns = 200 * std.time.ns_per_ms;
    const report = try serveWhile(opts, &hello.http_handler, struct {
        fn body(io: Io, p: u16) !void {
            // Six idle gaps of 120 ms: each under the timeout, together well past it.
            var steady: Client = undefined;
            try steady.connect(io, p);
            defer steady.close(io);
            for (0..6) |_| {
                try testing.expectEqual(200, try steady.get());
                try io.sleep(.fromMilliseconds(120), .awake);
            }
            try testing.expectEqual(200, try steady.get());
            // A head that trickles in for 120 ms, under the header timeout.
            try steady.send("GET / HT");
            try io.sleep(.fromMilliseconds(60), .awake);
            try steady.send("TP/1.1\r\nHost: t");
            try io.sleep(.fromMilliseconds(60), .awake);
            // The idle phase begins after the response is sent, so after this (timed from
            // the response's arrival, a client scheduled late could see the cut early).
            const idle_start_ns = os.monotonicNs();
            try steady.send("\r\n\r\n");
            try testing.expectEqual(200, try steady.receive());
            // Left idle, it is cut: not before the timeout, and at most two reaper periods
            // (an eighth of the shortest timeout each) after it, as Worker.zig promises,
            // with `cut_allowance_ms` for a loaded machine's scheduling.
            try steady.expectClosed();
            const idle_ms = (os.monotonicNs() - idle_start_ns) / std.time.ns_per_ms;
            const due_ms_max = 200 + 2 * (200 / 8) + cut_allowance_ms;
            if (idle_ms < 200 or idle_ms > due_ms_max) {
                std.debug.print("idle cut after {d} ms, not within 200-{d} ms\n", .{
                    idle_ms, due_ms_max,
                });
                return error.TestIdleCutOutOfBounds;
            }
        }
    }.body);
    try testing.expectEqual(0, report.workers.cut_header_timeout);
    try testing.expectEqual(1, report.workers.cut_idle_timeout);
}

test "Server: malformed and oversized requests get 4xx, the server keeps serving" {
    _ = try serveWhile(optionsOf(.single), &hello.http_handler, struct {
        fn body(io: Io, p: u16) !void {
            var good: Client = undefined;
            try good.connect(io, p);
            defer good.close(io);
            try testing.expectEqual(200, try good.get());

            var bad: Client = undefined;
            try bad.connect(io, p);
            defer bad.close(io);
            try bad.send("GET / HTTP/9.9\r\nHost: t\r\n\r\n");
            try testing.expectEqual(505, try bad.receive());
            try bad.expectClosed();

            var big: Client = undefined;
            try big.connect(io, p);
            defer big.close(io);
            try big.send("GET / HTTP/1.1\r\nX-Big: " ++ "a" ** (12 * 1024) ++ "\r\n\r\n");
            try testing.expectEqual(431, try big.receive());
            try big.expectClosed();

            try testing.expectEqual(200, try good.get());
        }
    }.body);
}

/// Answers after `delay_ms` (from the handler's context): a request in flight during a stop.
const Slow = struct {
    delay_ms: i64,
    started: std.atomic.Value(u32) = .init(0),

    fn respond(
        context: ?*anyopaque,
        connection: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        const slow: *Slow = @ptrCast(@alignCast(context.?));
        _ = slow.started.fetchAdd(1, .release);
        connection.io().sleep(.fromMilliseconds(slow.delay_ms), .awake) catch
            return error.WriteFailed;
        try request.respond("Hello World", .{});
    }
};

/// Sends a request to a handler that takes `delay_ms`, stops the server while it is in flight,
/// and returns the response's status (null: cut) and the report.
fn stopDuringRequest(delay_ms: i64, drain_timeout_ns: u64) !struct { ?u16, Server.Report } {
    var slow: Slow = .{ .delay_ms = delay_ms };
    const http_handler: Server.http.Handler = .{ .context = &slow, .respondFn = &Slow.respond };
    var running: Running = undefined;
    var opts = optionsOf(.single);
    opts.drain_timeout_ns = drain_timeout_ns;
    try running.start(opts, Server.http.handler(&http_handler));
    errdefer running.abandon();
    var status: ?u16 = null;
    try withClient(requestDuringStop, .{ &running.server, &slow, &status });
    const report = try running.finish();
    return .{ status, report };
}

/// Sends a request, stops `server` once the handler has it, and reads the response into
/// `status` (null: the connection was cut).
fn requestDuringStop(io: Io, server: *Server, slow: *Slow, status: *?u16) !void {
    var client: Client = undefined;
    try client.connect(io, server.port());
    defer client.close(io);
    try client.send(request_get);
    while (slow.started.load(.acquire) == 0) try io.sleep(.fromMilliseconds(5), .awake);
    server.stop();
    status.* = client.receive() catch null;
}

test "Server: a stop lets the request in flight finish within the drain timeout" {
    const status, const report = try stopDuringRequest(100, std.time.ns_per_s);
    try testing.expectEqual(200, status);
    try testing.expectEqual(0, report.workers.cut_at_drain);
}

test "Server: a request still running at the drain deadline is cut and reported" {
    const status, const report = try stopDuringRequest(10_000, 100 * std.time.ns_per_ms);
    try testing.expectEqual(null, status);
    try testing.expectEqual(1, report.workers.cut_at_drain);
}

/// Pids listed in /proc/<pid>/task/<pid>/children (Linux ≥ 3.5 with CONFIG_PROC_CHILDREN).
fn childrenOf(pid: linux.pid_t, pids: []linux.pid_t) ![]linux.pid_t {
    var path_buffer: [64]u8 = undefined;
    const path = try std.fmt.bufPrintZ(&path_buffer, "/proc/{d}/task/{d}/children", .{ pid, pid });
    const fd_rc = linux.open(path, .{ .ACCMODE = .RDONLY, .CLOEXEC = true }, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return error.NoProcChildren;
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    var text_buffer: [256]u8 = undefined;
    const len_rc = linux.read(fd, &text_buffer, text_buffer.len);
    if (linux.errno(len_rc) != .SUCCESS) return error.NoProcChildren;
    var count: usize = 0;
    var it = std.mem.tokenizeScalar(u8, text_buffer[0..len_rc], ' ');
    while (it.next()) |word| : (count += 1) {
        if (count == pids.len) return error.TooManyChildren;
        pids[count] = try std.fmt.parseInt(linux.pid_t, std.mem.trim(u8, word, "\n"), 10);
    }
    return pids[0..count];
}

/// Whether /proc still lists the process (alive, or a zombie nobody reaped).
fn processExists(pid: linux.pid_t) bool {
    var path_buffer: [32]u8 = undefined;
    const path = std.fmt.bufPrintZ(&path_buffer, "/proc/{d}/stat", .{pid}) catch unreachable;
    const rc = linux.access(path, linux.F_OK);
    return linux.errno(rc) == .SUCCESS;
}

/// Polls `condition` every 20 ms for at most `seconds`.
fn eventually(
    io: Io,
    seconds: u32,
    context: anytype,
    comptime condition: fn (@TypeOf(context)) bool,
) !void {
    for (0..seconds * 50) |_| {
        if (condition(context)) return;
        try io.sleep(.fromMilliseconds(20), .awake);
    }
    return error.TestTimedOut;
}

fn expectServes(io: Io, port: u16) !void {
    var client: Client = undefined;
    try client.connect(io, port);
    defer client.close(io);
    try testing.expectEqual(200, try client.get());
    try testing.expectEqual(200, try client.get());
}

/// A `.forked` server whose supervisor runs in a child process of the test; its exit status
/// is the verdict on its report: 0 when `expected(report)` holds, 3 when `run` failed, 4
/// otherwise.
pub const Supervisor = struct {
    pid: linux.pid_t,
    port: u16,
    reaped: bool = false,

    /// Forks before the test makes a runtime, so the supervisor inherits none; the page
    /// allocator takes no lock a fork could leave held.
    pub fn start(
        options: Server.Options,
        http_handler: *const Server.http.Handler,
        comptime expected: fn (Server.Report) bool,
    ) !Supervisor {
        var server = try Server.init(std.heap.page_allocator, options);
        defer server.deinit(); // the test's copy of the listener
        const fork_rc = os.fork();
        try testing.expect(linux.errno(fork_rc) == .SUCCESS);
        if (fork_rc == 0) {
            // The supervisor logs every worker's start (info) and exit (warn for a crash or
            // a kill): these tests kill workers on purpose. `.info` shows the log.
            testing.log_level = .err;
            const report = server.run(Server.http.handler(http_handler)) catch linux.exit_group(3);
            // The supervisor makes no runtime of its own, whose end would write its counts.
            coverage.flush();
            linux.exit_group(if (expected(report)) 0 else 4);
        }
        return .{ .pid = @intCast(fork_rc), .port = server.port() };
    }

    /// For a `defer`: SIGKILLs and reaps a supervisor the test did not see exit.
    pub fn reap(supervisor: *Supervisor) void {
        if (supervisor.reaped) return;
        _ = linux.kill(supervisor.pid, .KILL);
        var status: u32 = 0;
        _ = linux.waitpid(supervisor.pid, &status, 0);
        supervisor.reaped = true;
    }

    /// Expects the supervisor (sent SIGTERM) to exit 0 within 5 s, and `workers` (its
    /// children before the signal) to be gone: reaped, not zombies.
    fn expectExitZero(supervisor: *Supervisor, io: Io, workers: []const linux.pid_t) !void {
        const status = try supervisor.awaitExit(io, 5 * std.time.ms_per_s) orelse
            return error.TestTimedOut;
        try testing.expect(linux.W.IFEXITED(status));
        try testing.expectEqual(0, linux.W.EXITSTATUS(status));
        for (workers) |worker| try testing.expect(!processExists(worker));
    }

    /// Reaps the supervisor and returns its wait status once it exited, polling every 10 ms;
    /// null if it still runs after `ms_max`.
    pub fn awaitExit(supervisor: *Supervisor, io: Io, ms_max: u64) !?u32 {
        var status: u32 = 0;
        for (0..ms_max / 10 + 1) |_| {
            const rc = linux.waitpid(supervisor.pid, &status, linux.W.NOHANG);
            if (rc == supervisor.pid) {
                supervisor.reaped = true;
                return status;
            }
            try io.sleep(.fromMilliseconds(10), .awake);
        }
        return null;
    }

    /// Waits until the supervisor has `count` children and returns them.
    fn awaitWorkers(
        supervisor: *const Supervisor,
        io: Io,
        count: usize,
        pids: []linux.pid_t,
    ) ![]linux.pid_t {
        for (0..250) |_| {
            const children = childrenOf(supervisor.pid, pids) catch pids[0..0];
            if (children.len == count) return children;
            try io.sleep(.fromMilliseconds(20), .awake);
        }
        return error.TestTimedOut;
    }
};

/// Why the .forked tests are skipped under ThreadSanitizer (the first of them says more).
pub const tsan_fork = "forked workers of a TSan process drain too slowly and can hang";

test "Server: .forked restarts a SIGKILLed worker, and SIGTERM drains, reaps and exits 0" {
    // Under ThreadSanitizer the forked workers (raw fork of a TSan process) drain too slowly
    // for the 1 s drain deadline, and the supervisor reports a killed worker (3 failures in
    // 16 TSan runs of this test). A 20 s drain deadline does not make it pass: one run in six
    // then hung for 2 minutes, as a child forked while another thread held one of TSan's
    // own locks can (TSan does not support fork from a threaded process).
    if (builtin.sanitize_thread) return os.skipTest(@src(), tsan_fork);
    var supervisor = try Supervisor.start(forkedOptions(2), &hello.http_handler, struct {
        fn expected(report: Server.Report) bool {
            return report.workers_restarted == 1 and report.workers_killed == 0;
        }
    }.expected);
    defer supervisor.reap();
    try withClient(restartAndTerm, .{&supervisor});
}

fn restartAndTerm(io: Io, supervisor: *Supervisor) !void {
    var pids_buffer: [8]linux.pid_t = undefined;
    const workers = try supervisor.awaitWorkers(io, 2, &pids_buffer);
    try expectServes(io, supervisor.port);

    const victim = workers[0];
    _ = linux.kill(victim, .KILL);
    // Reaped (no zombie) and replaced.
    try eventually(io, 5, victim, struct {
        fn gone(pid: linux.pid_t) bool {
            return !processExists(pid);
        }
    }.gone);
    var after_buffer: [8]linux.pid_t = undefined;
    const after = try supervisor.awaitWorkers(io, 2, &after_buffer);
    for (0..4) |_| try expectServes(io, supervisor.port);
    _ = linux.kill(supervisor.pid, .TERM);
    try supervisor.expectExitZero(io, after);
}

/// One request on a new connection, answered 200. A connection refused, reset or closed
/// unanswered (a worker died with it, or was draining as it was accepted) is retried once on
/// a new connection: the service itself must answer that one.
fn expectAnswered(io: Io, port: u16) !void {
    getOnNewConnection(io, port) catch |err| switch (err) {
        error.ConnectionRefused,
        error.ConnectionResetByPeer,
        error.WriteFailed,
        error.ReadFailed,
        error.EndOfStream,
        => return getOnNewConnection(io, port),
        else => return err,
    };
}

fn getOnNewConnection(io: Io, port: u16) !void {
    var client: Client = undefined;
    try client.connect(io, port);
    defer client.close(io);
    try testing.expectEqual(200, try client.get());
}

fn contains(pids: []const linux.pid_t, pid: linux.pid_t) bool {
    return std.mem.indexOfScalar(linux.pid_t, pids, pid) != null;
}

test "Server: .forked SIGTERM to one worker replaces it alone; the service keeps answering" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), tsan_fork);
    var supervisor = try Supervisor.start(forkedOptions(2), &hello.http_handler, struct {
        fn expected(report: Server.Report) bool {
            return report.workers_restarted == 1 and report.workers_killed == 0 and
                report.workers.cut_at_drain == 0;
        }
    }.expected);
    defer supervisor.reap();
    try withClient(termOneWorker, .{&supervisor});
}

fn termOneWorker(io: Io, supervisor: *Supervisor) !void {
    var pids_buffer: [8]linux.pid_t = undefined;
    const workers = try supervisor.awaitWorkers(io, 2, &pids_buffer);
    const victim = workers[0];
    const survivor = workers[1];
    try expectServes(io, supervisor.port);
    _ = linux.kill(victim, .TERM);
    // Bounded by the test's deadline: answered while the victim drains and is reaped.
    while (processExists(victim)) try expectAnswered(io, supervisor.port);
    var after_buffer: [8]linux.pid_t = undefined;
    // Answered while the replacement waits out its back-off, too.
    const after = for (0..250) |_| {
        try expectAnswered(io, supervisor.port);
        const children = childrenOf(supervisor.pid, &after_buffer) catch continue;
        if (children.len == 2) break children;
        try io.sleep(.fromMilliseconds(20), .awake);
    } else return error.TestTimedOut;
    try testing.expect(!contains(after, victim));
    try testing.expect(contains(after, survivor)); // a worker's stop is its own
    for (0..4) |_| try expectAnswered(io, supervisor.port);
    _ = linux.kill(supervisor.pid, .TERM);
    try supervisor.expectExitZero(io, after);
}

/// Sends one request per new connection (`expectAnswered`) until `stop`, counting the
/// answered ones.
const Steady = struct {
    port: u16,
    stop: std.atomic.Value(bool) = .init(false),
    answered: std.atomic.Value(u32) = .init(0),

    fn run(steady: *Steady, io: Io) !void {
        // Bounded by `stop`, or by the test's deadline canceling a request.
        while (!steady.stop.load(.acquire)) {
            try expectAnswered(io, steady.port);
            _ = steady.answered.fetchAdd(1, .release);
            // A few hundred connections a second, not tens of thousands: each closed one
            // holds a loopback port in TIME_WAIT for a minute.
            try io.sleep(.fromMilliseconds(2), .awake);
        }
    }

    const Goal = struct { steady: *const Steady, count: u32 };

    fn answeredAtLeast(context: Goal) bool {
        return context.steady.answered.load(.acquire) >= context.count;
    }
};

const kill_rounds = 6;

test "Server: .forked workers killed one by one, in turn SIGKILL and SIGTERM: all answered" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), tsan_fork);
    var supervisor = try Supervisor.start(forkedOptions(2), &hello.http_handler, struct {
        fn expected(report: Server.Report) bool {
            return report.workers_restarted == kill_rounds and report.workers_killed == 0;
        }
    }.expected);
    defer supervisor.reap();
    try withClient(killWhileServing, .{&supervisor});
}

fn killWhileServing(io: Io, supervisor: *Supervisor) !void {
    var steady: Steady = .{ .port = supervisor.port };
    var client = try io.concurrent(Steady.run, .{ &steady, io });
    defer _ = client.cancel(io) catch {};
    const killed = killInTurn(io, supervisor, &steady);
    steady.stop.store(true, .release);
    // The client's error first: it names the request that went unanswered.
    try client.await(io);
    try killed;
    try testing.expect(steady.answered.load(.acquire) >= 3 * (kill_rounds + 1));
    var pids_buffer: [8]linux.pid_t = undefined;
    const workers = try supervisor.awaitWorkers(io, 2, &pids_buffer);
    _ = linux.kill(supervisor.pid, .TERM);
    try supervisor.expectExitZero(io, workers);
}

fn killInTurn(io: Io, supervisor: *Supervisor, steady: *const Steady) !void {
    var pids_buffer: [8]linux.pid_t = undefined;
    for (0..kill_rounds + 1) |round| {
        const workers = try supervisor.awaitWorkers(io, 2, &pids_buffer);
        // The client gets answers from this pair before one of them dies (and from the
        // last pair before the test ends).
        const answered = steady.answered.load(.acquire);
        const goal: Steady.Goal = .{ .steady = steady, .count = answered + 3 };
        try eventually(io, 5, goal, Steady.answeredAtLeast);
        if (round == kill_rounds) break;
        const victim = workers[round % 2];
        _ = linux.kill(victim, if (round % 2 == 0) .KILL else .TERM);
        try eventually(io, 5, victim, struct {
            fn gone(pid: linux.pid_t) bool {
                return !processExists(pid);
            }
        }.gone);
    }
}

/// Ends its worker process at the first request: an exit status of 1 or a SIGKILL, by the
/// parity of its pid, for two kinds of crash.
fn crashRespond(
    _: ?*anyopaque,
    _: *Server.Connection,
    _: *Server.http.Request,
) Server.http.RespondError!void {
    const pid = linux.getpid();
    if (@mod(pid, 2) == 0) linux.exit_group(1);
    _ = linux.kill(pid, .KILL);
    unreachable; // SIGKILL is delivered before kill(2) returns to its own process
}

const crash_rounds = 4;
/// Beyond a back-off, for the supervisor's reap and fork and this test's polling on a loaded
/// machine (observed: 3-6 ms). A back-off that doubled once too often shows by the second
/// crash (400 ms > 200 + 150), as does one that did not double (100 ms < 200). Under
/// qemu-user a fork and a worker's start are emulated and a loaded CI machine has made one
/// take longer than 150 ms, so there only the lower bound (the wait itself) is held.
fn restartAllowanceMs() u64 {
    return if (qemu.underQemu()) 2 * std.time.ms_per_s else 150;
}

test "Server: .forked crash loop: each quick death doubles the wait before the restart" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), tsan_fork);
    const crash: Server.http.Handler = .{ .respondFn = &crashRespond };
    var supervisor = try Supervisor.start(forkedOptions(1), &crash, struct {
        fn expected(report: Server.Report) bool {
            // Waits of 100, 200, 400 and 800 ms, each waited out before the next crash.
            const min_ns = config.server_restart_backoff_ns_min;
            return report.restarts_delayed == crash_rounds and
                report.restart_delay_ns_max == min_ns << (crash_rounds - 1) and
                report.workers_restarted == crash_rounds and report.workers_killed == 0;
        }
    }.expected);
    defer supervisor.reap();
    try withClient(crashInTurn, .{&supervisor});
}

/// Crashes the worker `crash_rounds` times; each replacement must start no sooner than its
/// back-off after the crash (the report's counts alone pass with no wait at all), and not
/// much later.
fn crashInTurn(io: Io, supervisor: *Supervisor) !void {
    var pids_buffer: [8]linux.pid_t = undefined;
    var worker = (try supervisor.awaitWorkers(io, 1, &pids_buffer))[0];
    for (0..crash_rounds) |round| {
        var client: Client = undefined;
        try client.connect(io, supervisor.port);
        defer client.close(io);
        // The worker dies after this; its restart is due a back-off after its death.
        const crashed_ns = os.monotonicNs();
        try client.send(request_get);
        try client.expectClosed(); // unanswered: the worker died of it
        const backoff_min_ms: u64 = config.server_restart_backoff_ns_min / std.time.ns_per_ms;
        const backoff_ms = backoff_min_ms << @intCast(round);
        const next = try awaitReplacement(io, supervisor, worker, backoff_ms);
        const waited_ms = (os.monotonicNs() - crashed_ns) / std.time.ns_per_ms;
        const restart_allowance_ms = restartAllowanceMs();
        if (waited_ms < backoff_ms or waited_ms > backoff_ms + restart_allowance_ms) {
            std.debug.print("crash {d}: the worker was restarted after {d} ms, not within " ++
                "{d}-{d} ms (its back-off, {d} ms for the restart)\n", .{
                round + 1,                         waited_ms,            backoff_ms,
                backoff_ms + restart_allowance_ms, restart_allowance_ms,
            });
            return error.TestRestartNotBackedOff;
        }
        worker = next;
    }
    _ = linux.kill(supervisor.pid, .TERM);
    try supervisor.expectExitZero(io, &.{worker});
}

/// Waits until the supervisor's one child is a worker other than `crashed` (reaped, not a
/// zombie listed still); polls every 5 ms for at most the back-off and 5 s.
fn awaitReplacement(
    io: Io,
    supervisor: *const Supervisor,
    crashed: linux.pid_t,
    backoff_ms: u64,
) !linux.pid_t {
    var pids_buffer: [8]linux.pid_t = undefined;
    const polls = (backoff_ms + 5 * std.time.ms_per_s) / 5;
    for (0..polls) |_| {
        const children = childrenOf(supervisor.pid, &pids_buffer) catch pids_buffer[0..0];
        if (children.len == 1 and children[0] != crashed) return children[0];
        try io.sleep(.fromMilliseconds(5), .awake);
    }
    std.debug.print("no worker replaced pid {d} within {d} ms\n", .{ crashed, polls * 5 });
    return error.TestTimedOut;
}

/// `Slow` for the target "/slow" only, in memory shared with forked workers (so the test sees
/// `started`); other targets are answered at once.
const SlowPath = struct {
    slow: Slow,

    fn respond(
        context: ?*anyopaque,
        connection: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        if (!std.mem.eql(u8, request.head.target, "/slow")) {
            return request.respond("Hello World", .{});
        }
        const slow_path: *SlowPath = @ptrCast(@alignCast(context.?));
        return Slow.respond(&slow_path.slow, connection, request);
    }

    fn map(delay_ms: i64) !*SlowPath {
        return mapShared(SlowPath, .{ .slow = .{ .delay_ms = delay_ms } });
    }

    fn unmap(slow_path: *SlowPath) void {
        unmapShared(SlowPath, slow_path);
    }
};

/// A `T` in memory the test shares with the processes it forks (and theirs): what a forked
/// worker's handler writes there, the test sees.
fn mapShared(comptime T: type, value: T) !*T {
    const rc = linux.mmap(null, @sizeOf(T), .{ .READ = true, .WRITE = true }, .{
        .TYPE = .SHARED,
        .ANONYMOUS = true,
    }, -1, 0);
    if (linux.errno(rc) != .SUCCESS) return error.OutOfMemory;
    const pointer: *T = @ptrFromInt(rc);
    pointer.* = value;
    return pointer;
}

fn unmapShared(comptime T: type, pointer: *T) void {
    _ = linux.munmap(@ptrCast(pointer), @sizeOf(T));
}

test "Server: .forked SIGTERM with a request in flight: it completes, the supervisor exits 0" {
    const slow_path = try SlowPath.map(300);
    defer slow_path.unmap();
    const http_handler: Server.http.Handler = .{
        .context = slow_path,
        .respondFn = &SlowPath.respond,
    };
    var options = forkedOptions(2);
    options.drain_timeout_ns = 5 * std.time.ns_per_s;
    var supervisor = try Supervisor.start(options, &http_handler, struct {
        fn expected(report: Server.Report) bool {
            return report.workers.cut_at_drain == 0 and report.workers_killed == 0 and
                report.workers_restarted == 0;
        }
    }.expected);
    defer supervisor.reap();
    try withClient(termDuringRequest, .{ &supervisor, &slow_path.slow });
}

fn termDuringRequest(io: Io, supervisor: *Supervisor, slow: *Slow) !void {
    var pids_buffer: [8]linux.pid_t = undefined;
    const workers = try supervisor.awaitWorkers(io, 2, &pids_buffer);
    var client: Client = undefined;
    try client.connect(io, supervisor.port);
    defer client.close(io);
    try client.send("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    while (slow.started.load(.acquire) == 0) try io.sleep(.fromMilliseconds(5), .awake);
    _ = linux.kill(supervisor.pid, .TERM);
    try testing.expectEqual(200, try client.receive());
    try client.expectClosed(); // the response in flight was the connection's last
    try supervisor.expectExitZero(io, workers);
}

/// Blocks its worker's thread for `stuck_ms` in a plain sleep, as a handler stuck in a
/// blocking call or a long computation would: no cancelation point, so neither the worker's
/// drain nor its SIGTERM handler ends it. In memory shared with the forked workers, so the
/// test sees that it started, and in which worker.
const Stuck = struct {
    /// Far past the test's drain deadline; bounds a worker a failed test leaves behind.
    const stuck_ms = 10_000;

    started: std.atomic.Value(u32) = .init(0),
    /// Stored before `started` (release).
    pid: std.atomic.Value(linux.pid_t) = .init(0),

    fn respond(
        context: ?*anyopaque,
        _: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        const stuck: *Stuck = @ptrCast(@alignCast(context.?));
        stuck.pid.store(linux.getpid(), .monotonic);
        _ = stuck.started.fetchAdd(1, .release);
        os.sleepThread(stuck_ms * std.time.ns_per_ms);
        try request.respond("Hello World", .{});
    }
};

const stuck_drain_timeout_ms = 300;
/// Beyond the kill deadline: the supervisor's 100 ms tick (it checks the deadline once a
/// tick), its reaping, and scheduling on a loaded machine.
const kill_allowance_ms = 400;

test "Server: .forked worker stuck past the drain deadline is SIGKILLed at it, then reaped" {
    if (builtin.sanitize_thread) return error.SkipZigTest; // see the SIGKILL test above
    const stuck = try mapShared(Stuck, .{});
    defer unmapShared(Stuck, stuck);
    const http_handler: Server.http.Handler = .{ .context = stuck, .respondFn = &Stuck.respond };
    var options = forkedOptions(2);
    options.drain_timeout_ns = stuck_drain_timeout_ms * std.time.ns_per_ms;
    var supervisor = try Supervisor.start(options, &http_handler, struct {
        fn expected(report: Server.Report) bool {
            // The stuck worker killed (its report lost with it), the other one drained.
            return report.workers_killed == 1 and report.workers_restarted == 0;
        }
    }.expected);
    defer supervisor.reap();
    // A failed test leaves the stuck worker orphaned in its sleep: end it now.
    defer {
        const pid = stuck.pid.load(.acquire);
        if (pid != 0 and processExists(pid)) _ = linux.kill(pid, .KILL);
    }
    try withClient(stopWithWorkerStuck, .{ &supervisor, stuck });
}

fn stopWithWorkerStuck(io: Io, supervisor: *Supervisor, stuck: *const Stuck) !void {
    var pids_buffer: [8]linux.pid_t = undefined;
    const workers = try supervisor.awaitWorkers(io, 2, &pids_buffer);
    var client: Client = undefined;
    try client.connect(io, supervisor.port);
    defer client.close(io);
    try client.send(request_get);
    while (stuck.started.load(.acquire) == 0) try io.sleep(.fromMilliseconds(5), .awake);
    const stuck_pid = stuck.pid.load(.monotonic);
    try testing.expect(contains(workers, stuck_pid));

    const stop_ns = os.monotonicNs();
    _ = linux.kill(supervisor.pid, .TERM);
    // The other worker drains at once; the stuck one ends only by the supervisor's SIGKILL,
    // due when the drain timeout and the grace after it have passed.
    const kill_grace_ms = supervisor_shape.kill_grace_ns / std.time.ns_per_ms;
    const deadline_ms = stuck_drain_timeout_ms + kill_grace_ms;
    const exit_ms_max = deadline_ms + kill_allowance_ms;
    const status = try supervisor.awaitExit(io, exit_ms_max) orelse {
        std.debug.print("the supervisor had not exited {d} ms after its SIGTERM: worker " ++
            "{d}, stuck past the drain deadline ({d} ms), was not killed\n", .{
            exit_ms_max, stuck_pid, deadline_ms,
        });
        return error.TestStuckWorkerNotKilled;
    };
    const exited_ms = (os.monotonicNs() - stop_ns) / std.time.ns_per_ms;
    if (exited_ms < deadline_ms) {
        std.debug.print("the supervisor exited {d} ms after its SIGTERM, before the drain " ++
            "deadline ({d} ms): the stuck worker was killed early\n", .{
            exited_ms, deadline_ms,
        });
        return error.TestStuckWorkerKilledEarly;
    }
    // Its report says one worker killed, none restarted.
    try testing.expect(linux.W.IFEXITED(status));
    try testing.expectEqual(0, linux.W.EXITSTATUS(status));
    // Reaped, both: no zombie left.
    for (workers) |worker| try testing.expect(!processExists(worker));
    try client.expectClosed(); // unanswered: its worker died with it
}

test "Server: stop_on_signals: SIGTERM stops .single and .threaded; the handlers go back" {
    for ([_]Server.Shape{ .single, .{ .threaded = 2 } }) |shape| {
        var before: linux.Sigaction = undefined;
        try testing.expectEqual(@as(usize, 0), linux.sigaction(.TERM, null, &before));
        var options = optionsOf(shape);
        options.stop_on_signals = true;
        var running: Running = undefined;
        try running.start(options, Server.http.handler(&hello.http_handler));
        errdefer running.abandon();
        // Answered: `run` is serving, so its handlers are in place (installed before).
        try withClient(getOnNewConnection, .{running.server.port()});
        var during: linux.Sigaction = undefined;
        try testing.expectEqual(@as(usize, 0), linux.sigaction(.TERM, null, &during));
        // Without the server's handler the signal would end the test binary: check first.
        try testing.expect(during.handler.handler != before.handler.handler);
        try testing.expectEqual(@as(usize, 0), linux.kill(linux.getpid(), .TERM));
        var waited_ms: u32 = 0;
        while (!running.done.load(.acquire)) : (waited_ms += 10) {
            if (waited_ms >= 5_000) return error.TestServerNotStoppedBySignal;
            os.sleepThread(10 * std.time.ns_per_ms);
        }
        const report = try running.finish();
        try testing.expectEqual(1, report.workers.accepted);
        var after: linux.Sigaction = undefined;
        try testing.expectEqual(@as(usize, 0), linux.sigaction(.TERM, null, &after));
        try testing.expect(after.handler.handler == before.handler.handler);
    }
}

test "Server.http.WithMetrics: /metrics is the worker runtime's Prometheus text" {
    const metered: Server.http.WithMetrics = .{ .inner = &hello.http_handler };
    const metered_handler = metered.httpHandler();
    _ = try serveWhile(optionsOf(.single), &metered_handler, struct {
        fn body(io: Io, port: u16) !void {
            var client: Client = undefined;
            try client.connect(io, port);
            defer client.close(io);
            try testing.expectEqual(200, try client.get()); // any other path: the inner one
            try client.send("GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            var all: [64 * 1024]u8 = undefined;
            const response = all[0..try client.reader.interface.readSliceShort(&all)];
            try testing.expect(std.mem.startsWith(u8, response, "HTTP/1.1 200 OK\r\n"));
            try testing.expect(std.mem.indexOf(u8, response, "version=0.0.4") != null);
            // The connection of this very request is alive in the worker's runtime.
            try testing.expect(std.mem.indexOf(u8, response, "\nweft_tasks_live ") != null);
            const resumed = "weft_executor_tasks_resumed_total{executor=\"0\"}";
            try testing.expect(std.mem.indexOf(u8, response, resumed) != null);
            // A scrape measures the stacks' memory; this request's task holds one.
            const committed = "\nweft_stacks_committed_bytes ";
            const at = std.mem.indexOf(u8, response, committed) orelse return error.NoSeries;
            const value = std.mem.sliceTo(response[at + committed.len ..], '\n');
            try testing.expect(try std.fmt.parseInt(u64, value, 10) > 0);
        }
    }.body);
}

/// Sends `GET /metrics` on `client` (keep-alive) and reads the chunked response's body into
/// `buffer`.
fn scrape(client: *Client, buffer: []u8) ![]const u8 {
    try client.send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    const in = &client.reader.interface;
    const status_line = try in.takeDelimiterInclusive('\n');
    try testing.expect(std.mem.startsWith(u8, status_line, "HTTP/1.1 200 "));
    var content_length: ?usize = null;
    while (true) {
        const line = try in.takeDelimiterInclusive('\n');
        if (std.mem.eql(u8, line, "\r\n")) break;
        const prefix = "content-length: ";
        if (line.len > prefix.len and std.ascii.eqlIgnoreCase(line[0..prefix.len], prefix)) {
            const digits = std.mem.trimEnd(u8, line[prefix.len..], "\r\n");
            content_length = try std.fmt.parseInt(usize, digits, 10);
        }
    }
    // The text is made whole before the response starts (Runtime.prometheusTextOf).
    const length = content_length orelse return error.ScrapeWithoutLength;
    if (length > buffer.len) return error.ScrapeTooLarge;
    try in.readSliceAll(buffer[0..length]);
    return buffer[0..length];
}

fn serverSample(text: []const u8, series: []const u8) !u64 {
    return @intFromFloat(try metrics_test.sampleValue(text, series));
}

test "Server: /metrics counts K requests, a refusal at connections_max and a header cut" {
    const metered: Server.http.WithMetrics = .{ .inner = &hello.http_handler };
    const metered_handler = metered.httpHandler();
    var opts = optionsOf(.single);
    opts.connections_max = 2;
    opts.when_full = .refuse; // the idle first client is not closed for the third
    opts.header_timeout_ns = 100 * std.time.ns_per_ms;
    const report = try serveWhile(opts, &metered_handler, struct {
        fn body(io: Io, port: u16) !void {
            var client: Client = undefined;
            try client.connect(io, port);
            defer client.close(io);
            const requests = 5;
            for (0..requests) |_| try testing.expectEqual(200, try client.get());
            // A head that never ends takes the second slot until the header timeout cuts it;
            // meanwhile a third connection finds both slots taken.
            var slow: Client = undefined;
            try slow.connect(io, port);
            defer slow.close(io);
            try slow.send("GET / HT");
            var third: Client = undefined;
            try third.connect(io, port);
            defer third.close(io);
            try third.expectClosed();
            try slow.expectClosed();
            // The cut connection's slot is freed by its task, soon after the cut: scrape
            // until it shows (each scrape is a request too).
            var buffer: [64 * 1024]u8 = undefined;
            var scrapes: u64 = 0;
            const text = while (scrapes < 1000) {
                const text = try scrape(&client, &buffer);
                scrapes += 1;
                if (try serverSample(text, "weft_server_connections_open") == 1) break text;
                try io.sleep(.fromMilliseconds(5), .awake);
            } else return error.SlotNeverFreed;
            _ = try metrics_test.checkExposition(testing.allocator, text);
            const expected = [_]struct { []const u8, u64 }{
                .{ "weft_server_connections_open", 1 },
                .{ "weft_server_connections_max", 2 },
                .{ "weft_server_connections_accepted_total", 3 },
                .{ "weft_server_connections_refused_total{reason=\"connections_max\"}", 1 },
                .{ "weft_server_connections_refused_total{reason=\"no_task\"}", 0 },
                .{ "weft_server_connections_cut_total{timeout=\"header\"}", 1 },
                .{ "weft_server_connections_cut_total{timeout=\"idle\"}", 0 },
                .{ "weft_server_connections_cut_total{timeout=\"body\"}", 0 },
                .{ "weft_server_connections_cut_total{timeout=\"send\"}", 0 },
                .{ "weft_server_connections_cut_total{timeout=\"request\"}", 0 },
                .{ "weft_server_connections_cut_total{timeout=\"drain\"}", 0 },
                // The scrape that reads these is counted in them.
                .{ "weft_server_requests_total", requests + scrapes },
                .{ "weft_server_requests_rejected_total", 0 },
            };
            for (expected) |entry| {
                const value = try serverSample(text, entry[0]);
                testing.expectEqual(entry[1], value) catch |err| {
                    std.debug.print("{s}: {d}, not {d}\n", .{ entry[0], value, entry[1] });
                    return err;
                };
            }
        }
    }.body);
    try testing.expectEqual(3, report.workers.accepted);
    try testing.expectEqual(1, report.workers.rejected_full);
    try testing.expectEqual(1, report.workers.cut_header_timeout);
}

test "Server: idle keep-alive connections hold no buffer; heads longer than the first read" {
    const metered: Server.http.WithMetrics = .{ .inner = &hello.http_handler };
    const metered_handler = metered.httpHandler();
    _ = try serveWhile(optionsOf(.single), &metered_handler, struct {
        fn body(io: Io, port: u16) !void {
            var idle: [8]Client = undefined;
            for (&idle) |*client| {
                try client.connect(io, port);
                try testing.expectEqual(200, try client.get());
            }
            defer for (&idle) |*client| client.close(io);
            var scraper: Client = undefined;
            try scraper.connect(io, port);
            defer scraper.close(io);
            // A head of 3 KiB: its first 512 bytes are read before the connection takes a
            // buffer (config.server_first_read_bytes), the rest after; the same pipelined
            // after a short request, read with the buffer already held.
            const padding = "x" ** (3 * 1024);
            const long = "GET / HTTP/1.1\r\nHost: t\r\nX-Pad: " ++ padding ++ "\r\n\r\n";
            try idle[0].send(long);
            try testing.expectEqual(200, try idle[0].receive());
            try idle[1].send(request_get ++ long ++ request_get);
            for (0..3) |_| try testing.expectEqual(200, try idle[1].receive());
            // Only the scrape's own request holds a buffer while it is answered.
            var buffer: [64 * 1024]u8 = undefined;
            const text = try scrape(&scraper, &buffer);
            try testing.expectEqual(1, try serverSample(text, "weft_server_buffers_held"));
            try testing.expect(try serverSample(text, "weft_server_buffers_mapped") >= 1);
            try testing.expectEqual(9, try serverSample(text, "weft_server_connections_open"));
            // Every idle connection still answers.
            for (&idle) |*client| try testing.expectEqual(200, try client.get());
        }
    }.body);
}

/// The worker that a report of two forked workers says ended uncleanly once, and by `sig`
/// (`last_unclean`), the other never; null if the report says otherwise.
fn uncleanOnceBy(report: Server.Report, sig: linux.SIG) ?usize {
    if (report.workers_unclean != 1 or report.workers_killed != 0) return null;
    var victim: ?usize = null;
    for (report.worker_exits[0..2], 0..) |exits, index| {
        if (exits.unclean == 0) {
            if (exits.last_unclean != .none) return null;
            continue;
        }
        if (exits.unclean != 1 or victim != null) return null;
        if (!std.meta.eql(exits.last_unclean, .{ .signalled = sig })) return null;
        victim = index;
    }
    return victim;
}

fn exitedZero(exit: Server.Report.Exit) bool {
    return std.meta.eql(exit, .{ .exited = 0 });
}

/// Sets the soft RLIMIT_CORE to 0 (inherited by the processes the test forks): a worker
/// killed by SIGABRT on purpose writes no core file into the working directory. Returns the
/// limit to restore.
fn noCoreDumps() !linux.rlimit {
    var saved: linux.rlimit = undefined;
    try testing.expectEqual(0, linux.getrlimit(.CORE, &saved));
    const none: linux.rlimit = .{ .cur = 0, .max = saved.max };
    try testing.expectEqual(0, linux.setrlimit(.CORE, &none));
    return saved;
}

test "Server: .forked report: a worker killed by SIGABRT or SIGKILL while serving is unclean" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), tsan_fork);
    const saved_core = try noCoreDumps();
    defer _ = linux.setrlimit(.CORE, &saved_core);
    inline for ([_]linux.SIG{ .ABRT, .KILL }) |sig| {
        var supervisor = try Supervisor.start(forkedOptions(2), &hello.http_handler, struct {
            fn expected(report: Server.Report) bool {
                const victim = uncleanOnceBy(report, sig) orelse return false;
                // The victim's replacement stopped cleanly, like the other worker.
                return report.workers_restarted == 1 and
                    exitedZero(report.worker_exits[victim].last) and
                    exitedZero(report.worker_exits[1 - victim].last);
            }
        }.expected);
        defer supervisor.reap();
        try withClient(killOneWhileServing, .{ &supervisor, sig });
    }
}

fn killOneWhileServing(io: Io, supervisor: *Supervisor, sig: linux.SIG) !void {
    var pids_buffer: [8]linux.pid_t = undefined;
    const workers = try supervisor.awaitWorkers(io, 2, &pids_buffer);
    try expectServes(io, supervisor.port);
    const victim = workers[0];
    _ = linux.kill(victim, sig);
    try eventually(io, 5, victim, struct {
        fn gone(pid: linux.pid_t) bool {
            return !processExists(pid);
        }
    }.gone);
    var after_buffer: [8]linux.pid_t = undefined;
    const after = try supervisor.awaitWorkers(io, 2, &after_buffer);
    try testing.expect(!contains(after, victim));
    try expectServes(io, supervisor.port);
    _ = linux.kill(supervisor.pid, .TERM);
    try supervisor.expectExitZero(io, after);
}

test "Server: .forked report: a worker killed by SIGABRT or SIGKILL during the stop is unclean" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), tsan_fork);
    const saved_core = try noCoreDumps();
    defer _ = linux.setrlimit(.CORE, &saved_core);
    inline for ([_]linux.SIG{ .ABRT, .KILL }) |sig| {
        const stuck = try mapShared(Stuck, .{});
        defer unmapShared(Stuck, stuck);
        const http_handler: Server.http.Handler = .{
            .context = stuck,
            .respondFn = &Stuck.respond,
        };
        var options = forkedOptions(2);
        // Far past the kill: the supervisor must not be the one to end the stuck worker.
        options.drain_timeout_ns = 5 * std.time.ns_per_s;
        var supervisor = try Supervisor.start(options, &http_handler, struct {
            fn expected(report: Server.Report) bool {
                const victim = uncleanOnceBy(report, sig) orelse return false;
                return report.workers_restarted == 0 and
                    std.meta.eql(report.worker_exits[victim].last, .{ .signalled = sig }) and
                    exitedZero(report.worker_exits[1 - victim].last);
            }
        }.expected);
        defer supervisor.reap();
        // A failed test leaves the stuck worker orphaned in its sleep: end it now.
        defer {
            const pid = stuck.pid.load(.acquire);
            if (pid != 0 and processExists(pid)) _ = linux.kill(pid, .KILL);
        }
        try withClient(killOneDuringStop, .{ &supervisor, stuck, sig });
    }
}

fn killOneDuringStop(io: Io, supervisor: *Supervisor, stuck: *const Stuck, sig: linux.SIG) !void {
    var pids_buffer: [8]linux.pid_t = undefined;
    const workers = try supervisor.awaitWorkers(io, 2, &pids_buffer);
    var client: Client = undefined;
    try client.connect(io, supervisor.port);
    defer client.close(io);
    try client.send(request_get);
    while (stuck.started.load(.acquire) == 0) try io.sleep(.fromMilliseconds(5), .awake);
    const stuck_pid = stuck.pid.load(.monotonic);
    try testing.expect(contains(workers, stuck_pid));
    const idle_pid = if (workers[0] == stuck_pid) workers[1] else workers[0];
    _ = linux.kill(supervisor.pid, .TERM);
    // The stop has begun once the idle worker drained and was reaped.
    try eventually(io, 5, idle_pid, struct {
        fn gone(pid: linux.pid_t) bool {
            return !processExists(pid);
        }
    }.gone);
    _ = linux.kill(stuck_pid, sig);
    const status = try supervisor.awaitExit(io, 5 * std.time.ms_per_s) orelse
        return error.TestTimedOut;
    // Its report's verdict: the stuck worker's death by `sig` is in it.
    try testing.expect(linux.W.IFEXITED(status));
    try testing.expectEqual(0, linux.W.EXITSTATUS(status));
    for (workers) |worker| try testing.expect(!processExists(worker));
    try client.expectClosed(); // unanswered: its worker died with it
}

/// Why the address-space test is skipped under ThreadSanitizer.
const tsan_address_space = "ThreadSanitizer maps terabytes of shadow memory: no RLIMIT_AS fits";

test "Server: a worker whose address-space limit leaves no room for a stack fails run at start" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), tsan_address_space);
    if (qemu.underQemu()) return os.skipTest(@src(), "qemu-user maps the guest's memory itself");
    const shapes = [_]Server.Shape{ .single, .{ .threaded = 2 }, .{ .forked = 2 } };
    for (shapes) |shape| {
        expectStartFailure(shape) catch |err| {
            std.debug.print("shape {t}: {t}\n", .{ shape, err });
            return err;
        };
    }
}

/// Longest a child under the address-space limit may take to fail: a server that serves
/// instead never fails, and is killed after it.
const start_failure_ms_max = 10_000;

/// Runs a server of `shape` in a child process whose address space leaves no room for one
/// fiber stack beside what a runtime keeps for the rest of the process; expects `run` to
/// fail with `error.AddressSpaceLimit` (the runtime's `init`) and the log to name the limit.
fn expectStartFailure(shape: Server.Shape) !void {
    var fds: [2]linux.fd_t = undefined;
    try testing.expectEqual(0, linux.pipe2(&fds, .{ .CLOEXEC = true, .NONBLOCK = true }));
    defer for (fds) |fd| os.closeFd(fd);
    const fork_rc = os.fork();
    try testing.expect(linux.errno(fork_rc) == .SUCCESS);
    if (fork_rc == 0) startUnderAddressLimit(shape, fds[1]);
    const pid: linux.pid_t = @intCast(fork_rc);
    var status: u32 = 0;
    const exited = for (0..start_failure_ms_max / 10) |_| {
        if (linux.waitpid(pid, &status, linux.W.NOHANG) == pid) break true;
        os.sleepThread(10 * std.time.ns_per_ms);
    } else false;
    if (!exited) {
        _ = linux.kill(pid, .KILL); // its forked workers get SIGTERM (PDEATHSIG)
        _ = linux.waitpid(pid, &status, 0);
    }
    var log_buffer: [16 * 1024]u8 = undefined;
    const log_rc = linux.read(fds[0], &log_buffer, log_buffer.len);
    const log = if (linux.errno(log_rc) == .SUCCESS) log_buffer[0..log_rc] else "";
    errdefer std.debug.print("the server's log:\n{s}\n", .{log});
    if (!exited) return error.TestServedWithoutStacks;
    try testing.expect(linux.W.IFEXITED(status));
    try testing.expectEqual(0, linux.W.EXITSTATUS(status));
    try testing.expect(std.mem.indexOf(u8, log, "cannot start: AddressSpaceLimit") != null);
    try testing.expect(std.mem.indexOf(u8, log, "RLIMIT_AS") != null);
}

/// The child of `expectStartFailure`: logs to `log_fd`, lowers its RLIMIT_AS, runs the server.
/// Exits 0 when `run` failed with `error.AddressSpaceLimit`; 4 when with another error
/// (logged), 5 when `run` returned a report, 6 when `init` failed, 7 when the log pipe, /proc
/// or the limit could not be set up.
fn startUnderAddressLimit(shape: Server.Shape, log_fd: linux.fd_t) noreturn {
    if (linux.dup2(log_fd, 2) != 2) linux.exit_group(7);
    // Room for the server's threads, a little less than a runtime keeps for the rest of the
    // process: no stack fits beside it.
    const used_bytes = memory_limits.addressSpaceUsedBytes();
    if (used_bytes == 0) linux.exit_group(7);
    var limit: linux.rlimit = undefined;
    if (linux.getrlimit(.AS, &limit) != 0) linux.exit_group(7);
    const room_bytes = config.address_space_reserve_bytes - 1024 * 1024;
    limit.cur = @min(limit.max, used_bytes + room_bytes);
    if (linux.setrlimit(.AS, &limit) != 0) linux.exit_group(7);
    var options = optionsOf(shape);
    options.runtime.tasks_max = 1024;
    options.drain_timeout_ns = 100 * std.time.ns_per_ms;
    var server = Server.init(std.heap.page_allocator, options) catch linux.exit_group(6);
    const handler = Server.http.handler(&hello.http_handler);
    if (server.run(handler)) |_| linux.exit_group(5) else |err| {
        if (err == error.AddressSpaceLimit) linux.exit_group(0);
        std.debug.print("run failed with {t}, not AddressSpaceLimit\n", .{err});
        linux.exit_group(4);
    }
}
