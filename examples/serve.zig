//! weft-serve: "Hello World" over HTTP/1.1 (keep-alive) with weft.Server, in any shape.
//!
//!   zig build examples -Doptimize=ReleaseFast
//!   ./zig-out/bin/weft-serve --mode threaded --port 9123 --workers 2
//!   ./zig-out/bin/weft-serve --mode single --port 9123 --executors 2
//!   curl http://127.0.0.1:9123/
//!
//! SIGINT or SIGTERM stops it: no new connections, requests in flight get `--drain-timeout`
//! (5 s) to finish and are cut after it, then it prints what was served and cut and exits 0.
//! Listens on 127.0.0.1. In forked mode SIGTERM to one worker's pid (logged at its start)
//! restarts that worker alone.
//!
//! Exit status: 0 after a stop; 1 when it cannot listen or a worker cannot start (its runtime,
//! its fiber stacks, its first task: the log names the error and the address-space limit);
//! 2 for a bad command line; 3 after a stop in forked mode when a worker died uncleanly
//! meanwhile (a crash, an abort, a signal, a non-zero status: printed per worker).
const std = @import("std");
const builtin = @import("builtin");
const weft = @import("weft");
const linux = std.os.linux;

const usage =
    \\usage: weft-serve --mode single|threaded|forked --port PORT [--workers N]
    \\                  [--executors N] [--listeners reuse_port|shared] [--connections N]
    \\                  [--scheduling stealing|pinned] [--idle-timeout S] [--header-timeout S]
    \\                  [--body-timeout S] [--send-timeout S] [--request-timeout S]
    \\                  [--drain-timeout S] [--drain-grace S] [--when-full close-idle|refuse]
    \\                  [--stack-size KIB] [--metrics]
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
    \\  --drain-grace  seconds a stop keeps reading idle keep-alive connections, answering
    \\                 what arrives with Connection: close (default 1; at most half the
    \\                 drain timeout is used; 0: close them at once)
    \\  --when-full    what a worker with --connections open does with a new one:
    \\                 close-idle closes its longest-idle connection (default), refuse
    \\                 closes the new one
    \\  --stack-size   KiB of virtual address space per connection's fiber stack, guard page
    \\                 included (default 64; a multiple of 4, at least 16): what a handler
    \\                 may use. Each 512 KiB of it costs an open connection 1 KiB of page
    \\                 tables, and under `ulimit -v` a smaller one fits more connections
    \\  --metrics      also answer GET /metrics with weft.Metrics in the Prometheus text
    \\                 format (the runtime of the worker that serves the request)
    \\  -h, --help     this text, on stdout
    \\
    \\exit status: 0 stopped; 1 cannot listen or a worker cannot start; 2 bad arguments;
    \\3 stopped, but a forked worker died uncleanly (crash, abort, signal, status not 0)
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
    drain_idle_grace_ns: u64 = serverDefault(.drain_idle_grace_ns),
    when_full: weft.Server.WhenFull = serverDefault(.when_full),
    metrics: bool = false,
    stack_size_bytes: usize = stack_size_bytes_default,
};

/// The stack each connection's task gets unless `--stack-size` says otherwise: sized to this
/// program's handlers, not to `weft.Runtime`'s default (1 MiB, for any std.Io code). The
/// "Hello World" and /metrics handlers run in 32 KiB in Debug builds (the snapshot behind
/// /metrics is made on the blocking lane); twice that is room to spare, and an idle
/// connection's page tables cost 128 bytes instead of 2 KiB (bench/keepalive.sh).
const stack_size_bytes_default = 64 * 1024;

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
    return serve(args);
}

/// Exit statuses (`--help` and the header say what each means).
const exit_failed: u8 = 1;
const exit_unclean: u8 = 3;

/// Serves until SIGINT or SIGTERM; returns the exit status.
fn serve(args: Args) u8 {
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
        .drain_idle_grace_ns = args.drain_idle_grace_ns,
        .when_full = args.when_full,
        .stop_on_signals = true,
        .runtime = .{
            .executors = args.executors,
            .pinned = args.pinned,
            .stack_size_bytes = args.stack_size_bytes,
        },
    }) catch |err| {
        std.debug.print("weft-serve: cannot listen on 127.0.0.1:{d}: {t}\n", .{ args.port, err });
        return exit_failed;
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
        // A worker that could not start: the log above says why.
        std.debug.print("weft-serve: cannot start: {t}\n", .{err});
        return exit_failed;
    };
    printReport(report, args.shape.workers());
    return if (report.workers_unclean == 0) 0 else exit_unclean;
}

/// Prints the report's counts on one line, then one line per worker that died uncleanly.
fn printReport(report: weft.Server.Report, workers: u32) void {
    const w = report.workers;
    std.debug.print(
        "weft-serve: stopped; accepted={d} requests={d} rejected={d} rejected_full={d} " ++
            "closed_for_admission={d} closed_idle={d} cut_at_drain={d} cut_idle={d} cut_header={d} cut_body={d} " ++
            "cut_send={d} cut_request={d} restarted={d} restarts_delayed={d} killed={d} " ++
            "unclean={d}\n",
        .{
            w.accepted,               w.requests,                  w.requests_rejected,
            w.rejected_full,          w.closed_idle_for_admission, w.closed_idle_at_drain,
            w.cut_at_drain,           w.cut_idle_timeout,          w.cut_header_timeout,
            w.cut_body_timeout,       w.cut_send_timeout,          w.cut_request_timeout,
            report.workers_restarted, report.restarts_delayed,     report.workers_killed,
            report.workers_unclean,
        },
    );
    for (report.worker_exits[0..workers], 0..) |exits, index| {
        if (exits.unclean == 0) continue;
        std.debug.print("weft-serve: worker {d} died uncleanly {d} time(s), lately {f}\n", .{
            index, exits.unclean, exits.last_unclean,
        });
    }
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
    @"--drain-grace",
    @"--when-full",
    @"--stack-size",
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
            .@"--drain-grace" => parsed.drain_idle_grace_ns = if (eql(value, "0"))
                0
            else
                try seconds(option, value, misuse),
            .@"--stack-size" => parsed.stack_size_bytes = try stackSize(value, misuse),
            .@"--when-full" => {
                const WhenFull = enum { @"close-idle", refuse };
                const when_full = std.meta.stringToEnum(WhenFull, value) orelse {
                    return misuse.set("--when-full: \"{s}\" is not close-idle or refuse", .{value});
                };
                parsed.when_full = switch (when_full) {
                    .@"close-idle" => .close_idle,
                    .refuse => .refuse,
                };
            },
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

/// `value` as a stack size in KiB, in bytes: a multiple of the page size, at least
/// `weft.Runtime.stack_size_bytes_min`, at most 1 GiB; or the misuse.
fn stackSize(value: []const u8, misuse: *Misuse) error{Misuse}!usize {
    const page_kib = std.heap.page_size_min / 1024;
    const min_kib = weft.Runtime.stack_size_bytes_min / 1024;
    const max_kib = 1024 * 1024;
    const kib = std.fmt.parseInt(usize, value, 10) catch max_kib + 1;
    if (kib < min_kib or kib > max_kib or kib % page_kib != 0) {
        return misuse.set("--stack-size: \"{s}\" is not KiB within {d}-{d}, a multiple of {d}", .{
            value, min_kib, max_kib, page_kib,
        });
    }
    return kib * 1024;
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
            .args = &.{ "--when-full", "wait", "--mode", "single" },
            .message = "--when-full: \"wait\" is not close-idle or refuse",
        },
        .{
            .args = &.{ "--drain-grace", "-1" },
            .message = "--drain-grace: \"-1\" is not seconds within 0.001-86400",
        },
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
        .{
            .args = &.{ "--stack-size", "8" },
            .message = "--stack-size: \"8\" is not KiB within 16-1048576, a multiple of 4",
        },
        .{
            .args = &.{ "--stack-size", "66" },
            .message = "--stack-size: \"66\" is not KiB within 16-1048576, a multiple of 4",
        },
        .{
            .args = &.{ "--stack-size", "1M" },
            .message = "--stack-size: \"1M\" is not KiB within 16-1048576, a multiple of 4",
        },
        .{
            .args = &.{ "--mode", "single", "--stack-size" },
            .message = "--stack-size needs a value",
        },
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
    try std.testing.expectEqual(weft.Server.WhenFull.close_idle, timed.when_full);
    const stopping = (try parse(&.{
        "--mode", "single", "--port", "1", "--drain-grace", "0", "--when-full", "refuse",
    }, &misuse)).serve;
    try std.testing.expectEqual(0, stopping.drain_idle_grace_ns);
    try std.testing.expectEqual(stack_size_bytes_default, stopping.stack_size_bytes);
    const small = try parse(&.{ "--mode", "single", "--port", "1", "--stack-size", "32" }, &misuse);
    try std.testing.expectEqual(@as(usize, 32 * 1024), small.serve.stack_size_bytes);
    try std.testing.expectEqual(weft.Server.WhenFull.refuse, stopping.when_full);
}

test "weft-serve: a worker that cannot start exits 1, its log naming the address-space limit" {
    // ThreadSanitizer's shadow memory fits no RLIMIT_AS; its forked workers can hang.
    if (builtin.sanitize_thread) return error.SkipZigTest;
    for ([_][:0]const u8{ "single", "threaded", "forked" }) |mode| {
        expectCannotStart(mode) catch |err| {
            std.debug.print("--mode {s}: {t}\n", .{ mode, err });
            return err;
        };
    }
}

/// Runs weft-serve in `mode` in a child process whose address space leaves less than a
/// runtime keeps beside its stacks (`weft.Runtime.address_space_reserve_bytes`), so that no
/// fiber stack fits; expects exit status 1 within 10 s and a log that names RLIMIT_AS. One
/// that serves instead (accepting and closing every connection) is stopped with SIGTERM after
/// the 10 s.
fn expectCannotStart(mode: [:0]const u8) !void {
    var fds: [2]linux.fd_t = undefined;
    try std.testing.expectEqual(0, linux.pipe2(&fds, .{ .CLOEXEC = true, .NONBLOCK = true }));
    defer for (fds) |fd| {
        _ = linux.close(fd);
    };
    const fork_rc = linux.fork();
    try std.testing.expect(linux.errno(fork_rc) == .SUCCESS);
    if (fork_rc == 0) {
        if (linux.dup2(fds[1], 2) != 2) linux.exit_group(7);
        const headroom_bytes = weft.Runtime.address_space_reserve_bytes - 1024 * 1024;
        var limit: linux.rlimit = undefined;
        if (linux.getrlimit(.AS, &limit) != 0) linux.exit_group(7);
        limit.cur = @min(limit.max, addressSpaceBytes() + headroom_bytes);
        if (linux.setrlimit(.AS, &limit) != 0) linux.exit_group(7);
        var misuse: Misuse = .{};
        const argv = [_][:0]const u8{ "--mode", mode, "--port", "0", "--drain-timeout", "0.1" };
        const command = parse(&argv, &misuse) catch linux.exit_group(7);
        linux.exit_group(serve(command.serve));
    }
    const pid: linux.pid_t = @intCast(fork_rc);
    var status: u32 = 0;
    for (0..1000) |round| {
        if (linux.waitpid(pid, &status, linux.W.NOHANG) == pid) break;
        if (round == 999) {
            _ = linux.kill(pid, .TERM); // it serves: stop it, then fail
            _ = linux.waitpid(pid, &status, 0);
        }
        std.testing.io.sleep(.fromMilliseconds(10), .awake) catch {};
    }
    var log_buffer: [16 * 1024]u8 = undefined;
    const log_rc = linux.read(fds[0], &log_buffer, log_buffer.len);
    const log = if (linux.errno(log_rc) == .SUCCESS) log_buffer[0..log_rc] else "";
    errdefer std.debug.print("weft-serve's log:\n{s}\n", .{log});
    try std.testing.expect(linux.W.IFEXITED(status));
    try std.testing.expectEqual(exit_failed, linux.W.EXITSTATUS(status));
    try std.testing.expect(std.mem.indexOf(u8, log, "weft-serve: cannot start: ") != null);
    try std.testing.expect(std.mem.indexOf(u8, log, "RLIMIT_AS") != null);
}

/// The process's mapped address space (`VmSize`, what RLIMIT_AS bounds), from /proc.
fn addressSpaceBytes() u64 {
    const fd_rc = linux.open("/proc/self/statm", .{ .CLOEXEC = true }, 0);
    if (linux.errno(fd_rc) != .SUCCESS) return 0;
    defer _ = linux.close(@intCast(fd_rc));
    var buffer: [128]u8 = undefined;
    const len = linux.read(@intCast(fd_rc), &buffer, buffer.len);
    if (linux.errno(len) != .SUCCESS) return 0;
    var fields = std.mem.tokenizeScalar(u8, buffer[0..len], ' ');
    const pages = std.fmt.parseInt(u64, fields.next() orelse return 0, 10) catch return 0;
    return pages * std.heap.pageSize();
}
