//! weft-serve: "Hello World" over HTTP/1.1 (keep-alive) with weft.Server, in any shape.
//!
//!   zig build examples -Doptimize=ReleaseFast
//!   ./zig-out/bin/weft-serve --mode threaded --port 9123 --workers 2
//!   ./zig-out/bin/weft-serve --mode single --port 9123 --executors 2
//!   curl http://127.0.0.1:9123/
//!
//! SIGINT or SIGTERM stops it: no new connections, requests in flight get `--drain-timeout`
//! (5 s) to finish and are cut after it, then it prints what was served and cut and exits 0. Listens on 127.0.0.1. In forked mode
//! SIGTERM to one worker's pid (logged at its start) restarts that worker alone.
const std = @import("std");
const weft = @import("weft");

const usage =
    \\usage: weft-serve --mode single|threaded|forked --port PORT [--workers N]
    \\                  [--executors N] [--listeners reuse_port|shared] [--connections N]
    \\                  [--scheduling stealing|pinned] [--idle-timeout S] [--header-timeout S]
    \\                  [--body-timeout S] [--send-timeout S] [--request-timeout S]
    \\                  [--drain-timeout S] [--metrics]
    \\       weft-serve --help
    \\
    \\  --mode         single: one runtime on one thread
    \\                 threaded: N threads, each a runtime
    \\                 forked: a supervisor and N worker processes sharing one listener
    \\  --port         TCP port on 127.0.0.1 (0: any free port, printed at start)
    \\  --workers      threads or processes for threaded/forked (default 2)
    \\  --executors    executor threads of each worker's runtime (default 1); `--mode single
    \\                 --executors 2` is one runtime whose connections run on 2 threads
    \\  --listeners    threaded: one SO_REUSEPORT listener per thread (reuse_port, default)
    \\                 or one listener they all accept on (shared)
    \\  --connections  connections each worker serves at once (default 4096)
    \\  --scheduling   stealing: a runtime's tasks move between its executors (default);
    \\                 pinned: each connection stays on the executor it was given
    \\                 (weft.Runtime.Options.pinned)
    \\  --*-timeout    seconds (decimals allowed) a connection may spend waiting for a
    \\                 request (idle, default 60), on a request head (header, 10), on each
    \\                 read of a body (body, 60), on each write of a response (send, 60), on
    \\                 a whole request (request, unbounded); drain: how long a stop lets
    \\                 requests in flight finish (5)
    \\  --metrics      also answer GET /metrics with weft.Metrics in the Prometheus text
    \\                 format (the runtime of the worker that serves the request)
    \\  -h, --help     this text, on stdout
    \\
;

const hello = weft.Server.http.Fixed("Hello World");

const Args = struct {
    shape: weft.Server.Shape,
    port: u16,
    executors: usize = 1,
    listeners: weft.Server.Listeners = .reuse_port,
    connections_max: u32 = serverDefault(.connections_max),
    pinned: bool = false,
    idle_timeout_ns: u64 = serverDefault(.idle_timeout_ns),
    header_timeout_ns: u64 = serverDefault(.header_timeout_ns),
    body_timeout_ns: u64 = serverDefault(.body_timeout_ns),
    send_timeout_ns: u64 = serverDefault(.send_timeout_ns),
    request_timeout_ns: ?u64 = null,
    drain_timeout_ns: u64 = serverDefault(.drain_timeout_ns),
    metrics: bool = false,
};

/// `weft.Server.Options`' own default for `field`.
fn serverDefault(comptime field: std.meta.FieldEnum(weft.Server.Options)) @FieldType(
    weft.Server.Options,
    @tagName(field),
) {
    return std.meta.fieldInfo(weft.Server.Options, field).defaultValue().?;
}

pub fn main(init: std.process.Init) u8 {
    const argv = init.minimal.args.toSlice(init.arena.allocator()) catch return 1;
    var misuse: Misuse = .{};
    const command = parse(argv[1..], &misuse) catch {
        std.debug.print("weft-serve: {s}\n{s}", .{ misuse.message(), usage });
        return 2;
    };
    const args = switch (command) {
        .help => {
            std.Io.File.stdout().writeStreamingAll(init.io, usage) catch return 1;
            return 0;
        },
        .serve => |args| args,
    };
    // Every connection is an fd: take all the fds the hard limit allows.
    const fd_limit = weft.raiseFdLimit();
    // The smp allocator: thread-safe for .threaded, and fork-safe here because the process
    // has one thread when the supervisor forks.
    var server = weft.Server.init(std.heap.smp_allocator, .{
        .address = .{ .ip4 = .loopback(args.port) },
        .shape = args.shape,
        .listeners = args.listeners,
        .connections_max = args.connections_max,
        .idle_timeout_ns = args.idle_timeout_ns,
        .header_timeout_ns = args.header_timeout_ns,
        .body_timeout_ns = args.body_timeout_ns,
        .send_timeout_ns = args.send_timeout_ns,
        .request_timeout_ns = args.request_timeout_ns,
        .drain_timeout_ns = args.drain_timeout_ns,
        .stop_on_signals = true,
        .runtime = .{ .executors = args.executors, .pinned = args.pinned },
    }) catch |err| {
        std.debug.print("weft-serve: cannot listen on 127.0.0.1:{d}: {t}\n", .{ args.port, err });
        return 1;
    };
    defer server.deinit();
    std.debug.print(
        "weft-serve: {t} x{d} ({t}), {d} executor(s) each, pid {d}, fds {d}, " ++
            "listening on http://127.0.0.1:{d}/\n",
        .{
            args.shape,     args.shape.workers(),  args.listeners,
            args.executors, std.os.linux.getpid(), fd_limit.soft,
            server.port(),
        },
    );
    const metered: weft.Server.http.WithMetrics = .{ .inner = &hello.http_handler };
    const metered_handler = metered.httpHandler();
    const http_handler = if (args.metrics) &metered_handler else &hello.http_handler;
    const report = server.run(weft.Server.http.handler(http_handler)) catch |err| {
        std.debug.print("weft-serve: {t}\n", .{err});
        return 1;
    };
    const w = report.workers;
    std.debug.print(
        "weft-serve: stopped; accepted={d} requests={d} rejected={d} rejected_full={d} " ++
            "closed_idle={d} cut_at_drain={d} cut_idle={d} cut_header={d} cut_body={d} " ++
            "cut_send={d} cut_request={d} restarted={d} restarts_delayed={d} killed={d}\n",
        .{
            w.accepted,              w.requests,             w.requests_rejected,
            w.rejected_full,         w.closed_idle_at_drain, w.cut_at_drain,
            w.cut_idle_timeout,      w.cut_header_timeout,   w.cut_body_timeout,
            w.cut_send_timeout,      w.cut_request_timeout,  report.workers_restarted,
            report.restarts_delayed, report.workers_killed,
        },
    );
    return 0;
}

const Command = union(enum) {
    serve: Args,
    /// `--help` or `-h`: print the usage to stdout and exit 0.
    help,
};

/// Why the command line was refused: one line naming the argument, for the user.
const Misuse = struct {
    buffer: [200]u8 = undefined,
    len: usize = 0,

    fn message(misuse: *const Misuse) []const u8 {
        return misuse.buffer[0..misuse.len];
    }

    /// Records the message; a value too long for the buffer is cut, not an error.
    fn set(misuse: *Misuse, comptime format: []const u8, args: anytype) error{Misuse} {
        var writer: std.Io.Writer = .fixed(&misuse.buffer);
        writer.print(format, args) catch {};
        misuse.len = writer.buffered().len;
        return error.Misuse;
    }
};

const Option = enum {
    @"--mode",
    @"--port",
    @"--workers",
    @"--executors",
    @"--listeners",
    @"--connections",
    @"--scheduling",
    @"--idle-timeout",
    @"--header-timeout",
    @"--body-timeout",
    @"--send-timeout",
    @"--request-timeout",
    @"--drain-timeout",
};

/// Reads the options after the program name; on `error.Misuse`, `misuse` says which and why.
fn parse(args: []const [:0]const u8, misuse: *Misuse) error{Misuse}!Command {
    var mode: ?[]const u8 = null;
    var port: ?u16 = null;
    var workers: u32 = 2;
    var parsed: Args = .{ .shape = .single, .port = 0 };
    var i: usize = 0;
    while (i < args.len) {
        if (eql(args[i], "--help") or eql(args[i], "-h")) return .help;
        if (eql(args[i], "--metrics")) {
            // A flag: the only option without a value.
            parsed.metrics = true;
            i += 1;
            continue;
        }
        defer i += 2;
        const option = std.meta.stringToEnum(Option, args[i]) orelse
            return misuse.set("unknown option \"{s}\"", .{args[i]});
        if (i + 1 >= args.len) return misuse.set("{t} needs a value", .{option});
        const value = args[i + 1];
        switch (option) {
            .@"--mode" => mode = value,
            .@"--port" => port = std.fmt.parseInt(u16, value, 10) catch
                return misuse.set("--port: \"{s}\" is not a port (0-65535)", .{value}),
            .@"--workers" => {
                workers = try count(u32, option, value, weft.Server.workers_max, misuse);
            },
            .@"--executors" => {
                const max = weft.Runtime.executors_max;
                parsed.executors = try count(usize, option, value, max, misuse);
            },
            .@"--listeners" => {
                parsed.listeners = std.meta.stringToEnum(weft.Server.Listeners, value) orelse
                    return misuse.set("--listeners: \"{s}\" is not reuse_port or shared", .{value});
            },
            .@"--connections" => {
                const max = std.math.maxInt(u32);
                parsed.connections_max = try count(u32, option, value, max, misuse);
            },
            .@"--scheduling" => {
                const Scheduling = enum { stealing, pinned };
                const scheduling = std.meta.stringToEnum(Scheduling, value) orelse {
                    return misuse.set("--scheduling: \"{s}\" is not stealing or pinned", .{value});
                };
                parsed.pinned = scheduling == .pinned;
            },
            .@"--idle-timeout" => parsed.idle_timeout_ns = try seconds(option, value, misuse),
            .@"--header-timeout" => parsed.header_timeout_ns = try seconds(option, value, misuse),
            .@"--body-timeout" => parsed.body_timeout_ns = try seconds(option, value, misuse),
            .@"--send-timeout" => parsed.send_timeout_ns = try seconds(option, value, misuse),
            .@"--request-timeout" => {
                parsed.request_timeout_ns = try seconds(option, value, misuse);
            },
            .@"--drain-timeout" => parsed.drain_timeout_ns = try seconds(option, value, misuse),
        }
    }
    const name = mode orelse return misuse.set("--mode is required", .{});
    parsed.shape = if (eql(name, "single"))
        .single
    else if (eql(name, "threaded"))
        .{ .threaded = workers }
    else if (eql(name, "forked"))
        .{ .forked = workers }
    else
        return misuse.set("--mode: \"{s}\" is not single, threaded or forked", .{name});
    parsed.port = port orelse return misuse.set("--port is required", .{});
    return .{ .serve = parsed };
}

/// `value` as a count within 1-`max`, or the misuse naming `option`.
fn count(
    comptime Int: type,
    option: Option,
    value: []const u8,
    max: Int,
    misuse: *Misuse,
) error{Misuse}!Int {
    const n = std.fmt.parseInt(Int, value, 10) catch 0;
    if (n == 0 or n > max) {
        return misuse.set("{t}: \"{s}\" is not a count within 1-{d}", .{ option, value, max });
    }
    return n;
}

/// `value` as seconds (decimals allowed) within 1 ms-1 day, in ns, or the misuse naming
/// `option`.
fn seconds(option: Option, value: []const u8, misuse: *Misuse) error{Misuse}!u64 {
    const s = std.fmt.parseFloat(f64, value) catch std.math.nan(f64);
    // Written so that NaN fails too.
    if (!(s >= 0.001 and s <= 86_400)) {
        return misuse.set("{t}: \"{s}\" is not seconds within 0.001-86400", .{ option, value });
    }
    return @intFromFloat(s * std.time.ns_per_s);
}

fn eql(a: []const u8, b: []const u8) bool {
    return std.mem.eql(u8, a, b);
}

test "weft-serve: a bad argument is named, with why" {
    const cases = [_]struct { args: []const [:0]const u8, message: []const u8 }{
        .{ .args = &.{"--foo"}, .message = "unknown option \"--foo\"" },
        .{ .args = &.{"serve"}, .message = "unknown option \"serve\"" },
        .{ .args = &.{ "--mode", "single", "--workers" }, .message = "--workers needs a value" },
        .{
            .args = &.{ "--mode", "single", "--port", "70000" },
            .message = "--port: \"70000\" is not a port (0-65535)",
        },
        .{
            .args = &.{ "--mode", "threaded", "--port", "1", "--workers", "0" },
            .message = std.fmt.comptimePrint("--workers: \"0\" is not a count within 1-{d}", .{
                weft.Server.workers_max,
            }),
        },
        .{
            .args = &.{ "--mode", "many", "--port", "1" },
            .message = "--mode: \"many\" is not single, threaded or forked",
        },
        .{
            .args = &.{ "--listeners", "one", "--mode", "single" },
            .message = "--listeners: \"one\" is not reuse_port or shared",
        },
        .{ .args = &.{ "--port", "8080" }, .message = "--mode is required" },
        .{
            .args = &.{ "--body-timeout", "0" },
            .message = "--body-timeout: \"0\" is not seconds within 0.001-86400",
        },
        .{
            .args = &.{ "--send-timeout", "nan" },
            .message = "--send-timeout: \"nan\" is not seconds within 0.001-86400",
        },
        .{ .args = &.{ "--mode", "forked" }, .message = "--port is required" },
        .{ .args = &.{ "--metrics", "--port" }, .message = "--port needs a value" },
    };
    for (cases) |case| {
        var misuse: Misuse = .{};
        try std.testing.expectError(error.Misuse, parse(case.args, &misuse));
        try std.testing.expectEqualStrings(case.message, misuse.message());
    }
}

test "weft-serve: --help and -h ask for the usage; good arguments parse" {
    var misuse: Misuse = .{};
    try std.testing.expectEqual(Command.help, try parse(&.{"--help"}, &misuse));
    try std.testing.expectEqual(Command.help, try parse(&.{ "--mode", "single", "-h" }, &misuse));
    const command = try parse(&.{
        "--mode",        "threaded", "--port",       "9123",   "--workers", "3",
        "--connections", "10",       "--scheduling", "pinned",
    }, &misuse);
    const args = command.serve;
    try std.testing.expectEqual(@as(u16, 9123), args.port);
    try std.testing.expectEqual(@as(u32, 3), args.shape.workers());
    try std.testing.expectEqual(@as(u32, 10), args.connections_max);
    try std.testing.expect(args.pinned);
    try std.testing.expect(!args.metrics);
    const timed = (try parse(&.{
        "--metrics",         "--mode", "single",    "--port", "1", "--body-timeout", "1.5",
        "--request-timeout", "30",     "--metrics",
    }, &misuse)).serve;
    try std.testing.expect(timed.metrics);
    try std.testing.expectEqual(1_500 * std.time.ns_per_ms, timed.body_timeout_ns);
    try std.testing.expectEqual(30 * std.time.ns_per_s, timed.request_timeout_ns.?);
}
