//! weft-serve: "Hello World" over HTTP/1.1 (keep-alive) with weft.Server, in any shape.
//!
//!   zig build examples -Doptimize=ReleaseFast
//!   ./zig-out/bin/weft-serve --mode threaded --port 9123 --workers 2
//!   ./zig-out/bin/weft-serve --mode single --port 9123 --executors 2
//!   curl http://127.0.0.1:9123/
//!
//! SIGINT or SIGTERM stops it: no new connections, requests in flight finish (5 s at most),
//! then it prints what was served and cut and exits 0. Listens on 127.0.0.1. In forked mode
//! SIGTERM to one worker's pid (logged at its start) restarts that worker alone.
const std = @import("std");
const weft = @import("weft");

const usage =
    \\usage: weft-serve --mode single|threaded|forked --port PORT [--workers N]
    \\                  [--executors N] [--listeners reuse_port|shared] [--connections N]
    \\                  [--scheduling stealing|pinned]
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
    \\
;

const hello = weft.Server.http.Fixed("Hello World");

const Args = struct {
    shape: weft.Server.Shape,
    port: u16,
    executors: usize = 1,
    listeners: weft.Server.Listeners = .reuse_port,
    connections_max: u32 = weft.config.server_connections_max_default,
    pinned: bool = false,
};

pub fn main(init: std.process.Init) u8 {
    const argv = init.minimal.args.toSlice(init.arena.allocator()) catch return 1;
    const args = parse(argv[1..]) catch |err| {
        std.debug.print("weft-serve: {t}\n{s}", .{ err, usage });
        return 2;
    };
    // Every connection is an fd: take all the fds the hard limit allows.
    const fd_limit = weft.Server.raiseFdLimit();
    // The smp allocator: thread-safe for .threaded, and fork-safe here because the process
    // has one thread when the supervisor forks.
    var server = weft.Server.init(std.heap.smp_allocator, .{
        .address = .{ .ip4 = .loopback(args.port) },
        .shape = args.shape,
        .listeners = args.listeners,
        .connections_max = args.connections_max,
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
    const report = server.run(weft.Server.http.handler(&hello.http_handler)) catch |err| {
        std.debug.print("weft-serve: {t}\n", .{err});
        return 1;
    };
    const w = report.workers;
    std.debug.print(
        "weft-serve: stopped; accepted={d} rejected_full={d} closed_idle={d} cut_at_drain={d} " ++
            "cut_idle={d} cut_header={d} restarted={d} restarts_delayed={d} killed={d}\n",
        .{
            w.accepted,               w.rejected_full,         w.closed_idle_at_drain,
            w.cut_at_drain,           w.cut_idle_timeout,      w.cut_header_timeout,
            report.workers_restarted, report.restarts_delayed, report.workers_killed,
        },
    );
    return 0;
}

fn parse(args: []const [:0]const u8) error{ BadArgument, MissingMode, MissingPort }!Args {
    var mode: ?[]const u8 = null;
    var port: ?u16 = null;
    var workers: u32 = 2;
    var parsed: Args = .{ .shape = .single, .port = 0 };
    var i: usize = 0;
    while (i < args.len) : (i += 2) {
        if (i + 1 >= args.len) return error.BadArgument;
        const value = args[i + 1];
        if (std.mem.eql(u8, args[i], "--mode")) {
            mode = value;
        } else if (std.mem.eql(u8, args[i], "--port")) {
            port = std.fmt.parseInt(u16, value, 10) catch return error.BadArgument;
        } else if (std.mem.eql(u8, args[i], "--workers")) {
            workers = std.fmt.parseInt(u32, value, 10) catch return error.BadArgument;
            if (workers == 0 or workers > weft.config.server_workers_max) return error.BadArgument;
        } else if (std.mem.eql(u8, args[i], "--executors")) {
            parsed.executors = std.fmt.parseInt(usize, value, 10) catch return error.BadArgument;
            if (parsed.executors == 0 or parsed.executors > weft.config.executors_max) {
                return error.BadArgument;
            }
        } else if (std.mem.eql(u8, args[i], "--listeners")) {
            parsed.listeners = std.meta.stringToEnum(weft.Server.Listeners, value) orelse
                return error.BadArgument;
        } else if (std.mem.eql(u8, args[i], "--connections")) {
            parsed.connections_max = std.fmt.parseInt(u32, value, 10) catch
                return error.BadArgument;
            if (parsed.connections_max == 0) return error.BadArgument;
        } else if (std.mem.eql(u8, args[i], "--scheduling")) {
            const Scheduling = enum { stealing, pinned };
            const scheduling = std.meta.stringToEnum(Scheduling, value) orelse
                return error.BadArgument;
            parsed.pinned = scheduling == .pinned;
        } else return error.BadArgument;
    }
    const name = mode orelse return error.MissingMode;
    parsed.shape = if (std.mem.eql(u8, name, "single"))
        .single
    else if (std.mem.eql(u8, name, "threaded"))
        .{ .threaded = workers }
    else if (std.mem.eql(u8, name, "forked"))
        .{ .forked = workers }
    else
        return error.BadArgument;
    parsed.port = port orelse return error.MissingPort;
    return parsed;
}
