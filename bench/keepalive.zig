//! keepalive: 10,000 concurrent keep-alive HTTP/1.1 connections held open and served, and the
//! server's peak RSS (the keep-alive row of the HTTP comparison with hyper and Go,
//! bench/keepalive.sh).
//!
//! The client (weft, one executor) opens `--conns` connections to a "Hello World" server on
//! 127.0.0.1, `open_window` at a time; each sends one request and checks the response before
//! the next window opens. A connection that was answered had been accepted, so the window
//! never overruns the server's accept backlog (an overrun costs a SYN retransmit, a second or
//! more, and measures the kernel, not the server). Then, every connection still open, it
//! holds them idle for `--hold-ms` and runs `--rounds` rounds in which every connection sends a
//! request at once and every response is checked (status 200, a content-length, the body
//! "Hello World", nothing after it). A connection the server closed, a wrong response or a
//! refused connect fails the line. While the connections are still open it reads the server's
//! peak RSS (VmHWM of /proc/PID/status), then closes them.
//!
//! An idle connection's cost: the server's resident memory (VmRSS) and page tables (VmPTE)
//! are read before the first connect and again twice with every connection open and idle:
//! after each was answered once and held for `--hold-ms` (`idle_*`), and after the last round
//! and another hold (`after_rounds_*`, what a server keeps of a burst of requests on idle
//! connections). Each is the difference over the connections, in bytes per connection.
//!
//!   bench-keepalive                   serves with weft.Server (.single) in a child process
//!   bench-keepalive --port P --pid PID --label NAME      an external server (bench/keepalive.sh)
//!
//! Options: --conns N (10000), --rounds N (3), --hold-ms N (1000), --timeout-s N (60: a
//! watchdog thread ends the run with status=timeout past it). One result line:
//!
//!   bench=keepalive runtime=NAME conns=N rounds=N hold_ms=N status=ok open_ms=.. round_ms_max=..
//!   req_per_s=.. failures=0 server_peak_rss_kib=.. idle_rss_b_per_conn=..
//!   idle_pte_b_per_conn=.. after_rounds_rss_b_per_conn=.. after_rounds_pte_b_per_conn=..
//!   client_peak_rss_kib=.. fd_soft=..
//!
//! Both sides need one fd per connection: the client raises its soft RLIMIT_NOFILE to the hard
//! limit (`weft.raiseFdLimit`; weft-serve does the same) and fails with
//! `error=fd_limit` naming both limits when the hard limit is below what N connections need.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const linux = std.os.linux;
const assert = std.debug.assert;
const weft = @import("weft");
const harness = @import("harness");

/// Connections being opened at once: below every server's accept backlog (weft's
/// `config.server_backlog`; 128 is the smallest a peer may use, Rust std's and older mio's
/// default). With 512, hyper took 13-18 s to open 10,000 connections and weft 1 s: SYNs
/// dropped on a full accept queue and retried a second later.
const open_window = 128;
/// Fds besides the connections: stdio, the runtime's ring or epoll set, wake fds, /proc.
const fds_spare = 64;
const response_bytes_max = 1024;
const connect_timeout_s = 10;
const request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
const body_expected = "Hello World";

comptime {
    assert(open_window < weft.Server.backlog);
}

const Conn = struct {
    stream: ?net.Stream = null,
    read_buffer: [response_bytes_max]u8 = undefined,
};

/// Counted by every connection's task (atomics: the client's runtime has one executor, but
/// nothing here should depend on it).
const Stats = struct {
    ok: std.atomic.Value(u64) = .init(0),
    failures: std.atomic.Value(u64) = .init(0),
    /// `@intFromError` of the first failure, 0 while none.
    first_error: std.atomic.Value(u16) = .init(0),

    fn fail(stats: *Stats, err: anyerror) void {
        _ = stats.failures.fetchAdd(1, .monotonic);
        _ = stats.first_error.cmpxchgStrong(0, @intFromError(err), .monotonic, .monotonic);
    }

    fn firstErrorName(stats: *const Stats) []const u8 {
        const code = stats.first_error.load(.monotonic);
        if (code == 0) return "none";
        return @errorName(@errorFromInt(code));
    }
};

const Settings = struct {
    conns: u32,
    rounds: u32,
    hold_ms: u32,
    timeout_s: u32,
};

/// The server under load: a child of this program, or one given by `--port` and `--pid`.
const Target = struct {
    port: u16,
    pid: ?linux.pid_t,
    label: []const u8,
    owned: bool,
};

const Result = struct {
    open_ms: u64 = 0,
    round_ms_max: u64 = 0,
    req_per_s: u64 = 0,
    failures: u64 = 0,
    first_error: []const u8 = "none",
    server_peak_rss_kib: u64 = 0,
    /// Bytes per connection over the server's memory before the first connect.
    idle: PerConn = .{},
    after_rounds: PerConn = .{},
};

/// What the server holds per open connection, in bytes: resident memory and page tables.
const PerConn = struct {
    rss_bytes: u64 = 0,
    pte_bytes: u64 = 0,

    fn since(now: Memory, base: Memory, conns: u32) PerConn {
        return .{
            .rss_bytes = (now.rss_kib -| base.rss_kib) * 1024 / @max(conns, 1),
            .pte_bytes = (now.pte_kib -| base.pte_kib) * 1024 / @max(conns, 1),
        };
    }
};

/// A process's resident memory (VmRSS) and page tables (VmPTE), KiB.
const Memory = struct {
    rss_kib: u64 = 0,
    pte_kib: u64 = 0,
};

const hello = weft.Server.http.Fixed(body_expected);

/// The owned server's pid, for the watchdog to kill.
var owned_pid: std.atomic.Value(linux.pid_t) = .init(0);

pub fn main(init: std.process.Init) !u8 {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    const settings: Settings = .{
        .conns = @intCast(try harness.flagInt(args, "--conns", 10_000)),
        .rounds = @intCast(try harness.flagInt(args, "--rounds", 3)),
        .hold_ms = @intCast(try harness.flagInt(args, "--hold-ms", 1000)),
        .timeout_s = @intCast(try harness.flagInt(args, "--timeout-s", 60)),
    };
    var out_buffer: [1024]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &out_buffer);
    const out = &stdout.interface;
    defer out.flush() catch {};

    const fd_limit = weft.raiseFdLimit();
    const label = harness.flagValue(args, "--label") orelse "weft-single-child";
    try out.print("bench=keepalive runtime={s} conns={d} rounds={d} hold_ms={d} ", .{
        label, settings.conns, settings.rounds, settings.hold_ms,
    });
    if (fd_limit.soft < settings.conns + fds_spare) {
        try out.print("status=failed error=fd_limit fd_soft={d} fd_hard={d} fd_needed={d}\n", .{
            fd_limit.soft, fd_limit.hard, settings.conns + fds_spare,
        });
        return 1;
    }
    const target = try targetOf(args, settings, label);
    try out.flush(); // the line's start, before the watchdog might finish it
    const watchdog = try std.Thread.spawn(.{}, watch, .{settings.timeout_s});
    watchdog.detach();

    const result = run(settings, target) catch |err| failed: {
        break :failed Result{ .failures = 1, .first_error = @errorName(err) };
    };
    if (target.owned) stopOwned(target.pid.?);
    const status = if (result.failures == 0) "ok" else "failed";
    try out.print(
        "status={s} open_ms={d} round_ms_max={d} req_per_s={d} failures={d} first_error={s} " ++
            "server_peak_rss_kib={d} idle_rss_b_per_conn={d} idle_pte_b_per_conn={d} " ++
            "after_rounds_rss_b_per_conn={d} after_rounds_pte_b_per_conn={d} " ++
            "client_peak_rss_kib={d} fd_soft={d}\n",
        .{
            status,                        result.open_ms,
            result.round_ms_max,           result.req_per_s,
            result.failures,               result.first_error,
            result.server_peak_rss_kib,    result.idle.rss_bytes,
            result.idle.pte_bytes,         result.after_rounds.rss_bytes,
            result.after_rounds.pte_bytes, harness.subprocess.selfPeakRssKib(),
            fd_limit.soft,
        },
    );
    return if (result.failures == 0) 0 else 1;
}

fn targetOf(args: []const []const u8, settings: Settings, label: []const u8) !Target {
    if (harness.flagValue(args, "--port")) |_| {
        const pid = try harness.flagInt(args, "--pid", 0);
        return .{
            .port = @intCast(try harness.flagInt(args, "--port", 0)),
            .pid = if (pid == 0) null else @intCast(pid),
            .label = label,
            .owned = false,
        };
    }
    return startOwned(settings.conns, label);
}

/// Forks a child serving "Hello World" with weft.Server (.single). Called before this process
/// has a runtime or a second thread, so the child inherits neither (and the smp allocator no
/// held lock).
fn startOwned(conns: u32, label: []const u8) !Target {
    var server = try weft.Server.init(std.heap.smp_allocator, .{
        .address = .{ .ip4 = .loopback(0) },
        .connections_max = conns,
        .stop_on_signals = true,
    });
    defer server.deinit(); // this process's copy of the listener
    const rc = linux.fork();
    if (linux.errno(rc) != .SUCCESS) return error.ForkFailed;
    if (rc == 0) {
        // The server must not outlive this program (a watchdog exit, a crash).
        _ = linux.prctl(@intFromEnum(linux.PR.SET_PDEATHSIG), @intFromEnum(linux.SIG.KILL), 0, 0, 0);
        const handler = weft.Server.http.handler(&hello.http_handler);
        _ = server.run(handler) catch linux.exit_group(1);
        linux.exit_group(0);
    }
    const pid: linux.pid_t = @intCast(rc);
    owned_pid.store(pid, .release);
    return .{ .port = server.port(), .pid = pid, .label = label, .owned = true };
}

/// SIGTERM (the server drains: every connection is closed by then), SIGKILL after 10 s.
fn stopOwned(pid: linux.pid_t) void {
    _ = linux.kill(pid, .TERM);
    var status: u32 = 0;
    for (0..1000) |_| {
        if (linux.waitpid(pid, &status, linux.W.NOHANG) == pid) return;
        sleepMs(10);
    }
    _ = linux.kill(pid, .KILL);
    _ = linux.waitpid(pid, &status, 0);
}

/// Ends the program with status=timeout after `timeout_s` (the line's start is printed).
fn watch(timeout_s: u32) void {
    sleepMs(@as(u64, timeout_s) * std.time.ms_per_s);
    const pid = owned_pid.load(.acquire);
    if (pid != 0) _ = linux.kill(pid, .KILL);
    var buffer: [64]u8 = undefined;
    const line = std.fmt.bufPrint(&buffer, "status=timeout timeout_s={d}\n", .{timeout_s}) catch
        unreachable;
    _ = linux.write(1, line.ptr, line.len);
    linux.exit_group(1);
}

fn run(settings: Settings, target: Target) !Result {
    const gpa = std.heap.smp_allocator;
    const conns = try gpa.alloc(Conn, settings.conns);
    defer gpa.free(conns);
    @memset(conns, .{});
    var rt = try weft.Runtime.init(gpa, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    defer for (conns) |*conn| if (conn.stream) |stream| stream.close(io);

    var stats: Stats = .{};
    var result: Result = .{};
    const base = if (target.pid) |pid| memoryOf(pid) else Memory{};
    const open_start_ns = harness.monotonicNs();
    try openAll(io, conns, target.port, &stats);
    result.open_ms = (harness.monotonicNs() - open_start_ns) / std.time.ns_per_ms;
    var rounds_ns: u64 = 0;
    for (0..settings.rounds) |round| {
        try io.sleep(.fromMilliseconds(settings.hold_ms), .awake);
        if (round == 0) if (target.pid) |pid| {
            result.idle = .since(memoryOf(pid), base, settings.conns);
        };
        const round_start_ns = harness.monotonicNs();
        try roundAll(io, conns, &stats);
        const round_ns = harness.monotonicNs() - round_start_ns;
        rounds_ns += round_ns;
        result.round_ms_max = @max(result.round_ms_max, round_ns / std.time.ns_per_ms);
    }
    try io.sleep(.fromMilliseconds(settings.hold_ms), .awake);
    if (target.pid) |pid| result.after_rounds = .since(memoryOf(pid), base, settings.conns);
    const round_requests = @as(u64, settings.conns) * settings.rounds;
    result.req_per_s = round_requests * std.time.ns_per_s / @max(rounds_ns, 1);
    result.failures = stats.failures.load(.monotonic);
    result.first_error = stats.firstErrorName();
    const expected_ok = @as(u64, settings.conns) * (1 + settings.rounds);
    if (result.failures == 0) assert(stats.ok.load(.monotonic) == expected_ok);
    if (target.pid) |pid| result.server_peak_rss_kib = peakRssKib(pid);
    return result;
}

/// Opens every connection, `open_window` at a time, each answered once before the next window.
fn openAll(io: Io, conns: []Conn, port: u16, stats: *Stats) !void {
    var start: usize = 0;
    while (start < conns.len) : (start += open_window) {
        const end = @min(start + open_window, conns.len);
        var group: Io.Group = .init;
        for (conns[start..end]) |*conn| {
            group.concurrent(io, openOne, .{ io, conn, port, stats }) catch |err| {
                group.cancel(io);
                return err;
            };
        }
        try group.await(io);
    }
}

fn openOne(io: Io, conn: *Conn, port: u16, stats: *Stats) void {
    assert(conn.stream == null);
    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    conn.stream = address.connect(io, .{
        .mode = .stream,
        .timeout = .{ .duration = .{ .raw = .fromSeconds(connect_timeout_s), .clock = .awake } },
    }) catch |err| return stats.fail(err);
    exchangeCounted(io, conn, stats);
}

/// One request on every open connection at once.
fn roundAll(io: Io, conns: []Conn, stats: *Stats) !void {
    var group: Io.Group = .init;
    for (conns) |*conn| {
        if (conn.stream == null) continue; // its connect failed: counted already
        group.concurrent(io, exchangeCounted, .{ io, conn, stats }) catch |err| {
            group.cancel(io);
            return err;
        };
    }
    try group.await(io);
}

fn exchangeCounted(io: Io, conn: *Conn, stats: *Stats) void {
    if (exchange(io, conn)) {
        _ = stats.ok.fetchAdd(1, .monotonic);
    } else |err| stats.fail(err);
}

const ExchangeError = error{
    WriteFailed,
    /// The server closed the connection (or reset it) before a whole response.
    ConnectionLost,
    BadStatus,
    BadHead,
    BadBody,
    /// Bytes after the response: the server answered more than asked.
    TrailingBytes,
};

/// Sends one request and checks the response: "HTTP/1.1 200", a content-length, the body.
fn exchange(io: Io, conn: *Conn) ExchangeError!void {
    const stream = conn.stream.?;
    var write_buffer: [request.len]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    writer.interface.writeAll(request) catch return error.WriteFailed;
    writer.interface.flush() catch return error.WriteFailed;
    var reader = stream.reader(io, &conn.read_buffer);
    const in = &reader.interface;
    const status_line = in.takeDelimiterInclusive('\n') catch return error.ConnectionLost;
    if (!std.mem.startsWith(u8, status_line, "HTTP/1.1 200")) return error.BadStatus;
    var content_length: ?usize = null;
    // Bounded by the read buffer: a head longer than it fails the take.
    while (true) {
        const line = in.takeDelimiterInclusive('\n') catch return error.ConnectionLost;
        if (std.mem.eql(u8, line, "\r\n")) break;
        const colon = std.mem.indexOfScalar(u8, line, ':') orelse return error.BadHead;
        if (!std.ascii.eqlIgnoreCase(line[0..colon], "content-length")) continue;
        const digits = std.mem.trim(u8, line[colon + 1 ..], " \r\n");
        content_length = std.fmt.parseInt(usize, digits, 10) catch return error.BadHead;
    }
    const length = content_length orelse return error.BadHead;
    const body = in.take(length) catch return error.ConnectionLost;
    if (!std.mem.eql(u8, body, body_expected)) return error.BadBody;
    if (in.bufferedLen() != 0) return error.TrailingBytes;
}

/// Blocks the calling OS thread (the watchdog, or this process before and after its runtime).
fn sleepMs(ms: u64) void {
    var remaining: linux.timespec = .{
        .sec = @intCast(ms / std.time.ms_per_s),
        .nsec = @intCast((ms % std.time.ms_per_s) * std.time.ns_per_ms),
    };
    // Bounded: each EINTR resumes with what is left.
    while (linux.errno(linux.nanosleep(&remaining, &remaining)) == .INTR) {}
}

/// VmHWM of a live process in KiB; 0 when /proc does not say.
fn peakRssKib(pid: linux.pid_t) u64 {
    var text: [4096]u8 = undefined;
    return statusKib(readStatus(pid, &text), "VmHWM:");
}

/// VmRSS and VmPTE of a live process; zeros when /proc does not say.
fn memoryOf(pid: linux.pid_t) Memory {
    var text: [4096]u8 = undefined;
    const status = readStatus(pid, &text);
    return .{ .rss_kib = statusKib(status, "VmRSS:"), .pte_kib = statusKib(status, "VmPTE:") };
}

/// /proc/PID/status, as much of it as `text` holds; empty when it cannot be read.
fn readStatus(pid: linux.pid_t, text: []u8) []const u8 {
    var path_buffer: [32]u8 = undefined;
    const path = std.fmt.bufPrintZ(&path_buffer, "/proc/{d}/status", .{pid}) catch unreachable;
    const fd_rc = linux.open(path, .{ .ACCMODE = .RDONLY, .CLOEXEC = true }, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return "";
    const fd: linux.fd_t = @intCast(fd_rc);
    defer _ = linux.close(fd);
    const len = linux.read(fd, text.ptr, text.len);
    if (linux.errno(len) != .SUCCESS) return "";
    return text[0..len];
}

/// The KiB figure of a `Name:   N kB` line of /proc/PID/status; 0 when absent.
fn statusKib(status: []const u8, key: []const u8) u64 {
    var lines = std.mem.tokenizeScalar(u8, status, '\n');
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, key)) continue;
        const digits = std.mem.trim(u8, line[key.len..], " \tkB");
        return std.fmt.parseInt(u64, digits, 10) catch 0;
    }
    return 0;
}
