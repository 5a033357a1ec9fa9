//! `weft.Server`: one connection handler served in one of three shapes.
//!
//! - `.single`: one runtime on the calling thread, one listener.
//! - `.threaded = n`: n OS threads, each with its own runtime (one executor). By default
//!   (`listeners = .reuse_port`) each has its own `SO_REUSEPORT` listener on the same port
//!   and the kernel spreads connections over them; with `listeners = .shared` they all accept
//!   on one listener (see `Listeners` for the measurements behind the default). Every
//!   worker's runtime has one executor unless `runtime.executors` says otherwise.
//! - `.forked = n`: a supervisor process forks n worker processes, each with its own runtime.
//!   The listener is opened once, before the fork, and shared (see `supervisor.zig` for why
//!   not `SO_REUSEPORT`). The supervisor restarts any worker that exits while the service
//!   runs: a crash, a panic, or SIGTERM/SIGINT sent to that worker alone (it drains and
//!   exits 0); one that keeps dying young is restarted after a growing back-off. Each start
//!   and exit is logged with the worker's pid, and every exit but a clean one is counted in
//!   `Report.workers_unclean` and `Report.worker_exits`. Only SIGTERM/SIGINT to the
//!   supervisor (or `stop` in its process) stops the service: it stops accepting, forwards
//!   SIGTERM, waits for the drain and returns.
//!
//! In every shape a worker that cannot start (its runtime, its memory, its first task, its
//! thread or process) fails `run` with that error before it accepts a connection, after the
//! other workers stopped, and the log says why (`RunError`).
//!
//! ```
//! var server = try weft.Server.init(gpa, .{ .address = address, .shape = .{ .threaded = 2 } });
//! defer server.deinit();
//! const report = try server.run(weft.Server.http.handler(&hello));
//! ```
//!
//! In every shape a stop (`stop`, or a signal with `stop_on_signals`) ends accepting, closes
//! idle keep-alive connections, lets requests in flight finish within `drain_timeout_ns`, and
//! cuts the rest; `run` then returns a `Report` saying what was cut. Each worker serves at
//! most `connections_max` connections (one more is closed as soon as it is accepted) and cuts
//! a connection that outlasts the timeout of its phase: idle, head, each body read, each
//! response write, and the whole request if `request_timeout_ns` is set (see `Worker.zig`).
//!
//! Every fd weft opens is close-on-exec; a forked worker inherits the listener and nothing
//! else from the supervisor, which holds no runtime.
//!
//! On the threaded runtime (every OS but Linux, and Linux with `-Dbackend=threaded`) the
//! workers' runtimes are std.Io.Threaded's: `.single` and `.threaded` with a shared listener
//! opened through std.Io, stopped through a word each worker's waiter watches
//! (`Worker.Stop.word`); `.forked` and `.reuse_port` are `error.InvalidOptions` there
//! (docs/SERVER.md, "Off Linux").
const Server = @This();

const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const config = @import("../config.zig");
const platform = @import("../platform.zig");
const os = @import("../os/linux.zig");
const host = @import("../os/host.zig");
const memory_limits = @import("../os/memory_limits.zig");
const socket = @import("../net/socket.zig");
/// weft.Runtime as root.zig chooses it (src/platform.zig): each worker runs one.
const Runtime = if (platform.fibers)
    @import("../Runtime.zig")
else
    @import("../ThreadedRuntime.zig");
const Worker = @import("Worker.zig");
const LiveTasks = @import("../sched/LiveTasks.zig");
pub const http = @import("http.zig");
const supervisor = @import("supervisor.zig");

pub const Connection = Worker.Connection;
pub const WhenFull = Worker.WhenFull;
pub const Handler = Worker.Handler;

gpa: std.mem.Allocator,
options: Options,
/// The bound address (the port resolved when `options.address` asked for port 0).
address: net.IpAddress,
/// One listener per worker for `.threaded` with `.reuse_port`, one shared listener otherwise.
listener_fds: [config.server_workers_max]net.Socket.Handle = undefined,
listener_count: u32 = 0,
/// Set by `stop`; read by the forked supervisor's loop.
stopping: std.atomic.Value(bool) = .init(false),
/// The threaded runtime's workers wait on it (`Worker.Stop.word`): 1 once `stop` was called.
stop_word: std.atomic.Value(u32) = .init(0),

pub const Shape = union(enum) {
    single,
    /// Worker threads, each with a runtime and a listener.
    threaded: u32,
    /// Worker processes under a supervisor.
    forked: u32,

    pub fn workers(shape: Shape) u32 {
        return switch (shape) {
            .single => 1,
            .threaded, .forked => |n| n,
        };
    }
};

/// How the workers of `.threaded` get their connections. On the threaded runtime (off Linux,
/// and with `-Dbackend=threaded`) only `.shared` holds, the default there: `SO_REUSEPORT`
/// spreads connections over a group on Linux only.
///
/// The default, `.reuse_port`, had the better keep-alive median over 19 interleaved runs of
/// `bench/http.sh weft-threaded2 weft-threaded2-shared` on the 2-core test machine (wrk -c50:
/// 57.6k req/s against 52.4k; ahead on a busy machine, even on a quieter one). `.shared` was
/// ahead with a connection per request (ab -c50: 14.9k against 12.3k), so a server of short
/// connections should try it. Every run is in docs/BENCHMARKS.md.
pub const Listeners = enum {
    /// One `SO_REUSEPORT` listener per worker: the kernel hashes each new connection to one
    /// worker's accept queue, so workers never contend on accept; a busy worker still gets
    /// its share of new connections.
    reuse_port,
    /// One listener, one accept queue, every worker accepting on it: an idle worker takes the
    /// next connection. All workers are woken for one connection (each ring or epoll set
    /// watches the same socket) and all but one find nothing.
    shared,
};

pub const Options = struct {
    address: net.IpAddress,
    shape: Shape = .single,
    /// `.threaded` only (`.single` has one listener; `.forked` always shares one, see
    /// `supervisor.zig`).
    listeners: Listeners = if (platform.fibers) .reuse_port else .shared,
    /// Per worker.
    connections_max: u32 = config.server_connections_max_default,
    /// What a worker with `connections_max` open does with a new connection: by default it
    /// closes its longest-idle keep-alive connection to serve the new one.
    when_full: WhenFull = .close_idle,
    /// Longest wait for a keep-alive connection's next request.
    idle_timeout_ns: u64 = config.server_idle_timeout_ns_default,
    /// Longest time from a request's first byte to the end of its head.
    header_timeout_ns: u64 = config.server_header_timeout_ns_default,
    /// Longest wait for the next bytes of a request body (each read).
    body_timeout_ns: u64 = config.server_body_timeout_ns_default,
    /// Longest wait for the client to take more of a response (each write).
    send_timeout_ns: u64 = config.server_send_timeout_ns_default,
    /// Longest time for a whole request, first byte to last response byte; null: unbounded
    /// (a handler streaming a long response would be cut).
    request_timeout_ns: ?u64 = null,
    /// Longest time a stop lets requests in flight finish.
    drain_timeout_ns: u64 = config.server_drain_timeout_ns_default,
    /// How long a stop keeps reading idle keep-alive connections, answering what arrives with
    /// `Connection: close` (at most half of `drain_timeout_ns` is used); 0 shuts them at once.
    drain_idle_grace_ns: u64 = config.server_drain_idle_grace_ns_default,
    /// `.single`/`.threaded`: SIGINT and SIGTERM call `stop` while `run` runs; on Windows,
    /// Ctrl+C, Ctrl+Break, the console's close and the system's shutdown. One server per
    /// process: another's `run` with it meanwhile fails with `error.SignalsTaken`. The forked
    /// supervisor always handles them, and each forked worker its own.
    stop_on_signals: bool = false,
    runtime: Runtime.Options = .{},
};

pub const Report = struct {
    /// Summed over the workers (for `.forked`: over every worker process that exited
    /// normally, restarted ones included).
    workers: Worker.Report = .{},
    /// `.forked`: workers that exited while the service ran (crashed, killed, or stopped by
    /// a signal sent to them alone) and were started again.
    workers_restarted: u32 = 0,
    /// `.forked`: worker exits whose restart was held back because the worker had run less
    /// than `config.server_restart_backoff_reset_ns` (a crash loop, see `supervisor.zig`).
    restarts_delayed: u32 = 0,
    /// `.forked`: the longest of those holds; it doubles with each quick death of a slot.
    restart_delay_ns_max: u64 = 0,
    /// `.forked`: workers still running after the drain deadline, killed with SIGKILL.
    workers_killed: u32 = 0,
    /// `.forked`: worker exits other than status 0 that the supervisor did not cause, while
    /// the service ran or during the stop: a crash, an abort (SIGABRT: a panic, a failed
    /// assertion), a signal from elsewhere (SIGKILL from the OOM killer), a non-zero status
    /// (1: a restarted worker that could not start). A crash loop shows here, one per death.
    /// Not counted: the supervisor's kills at the drain deadline (`workers_killed`), and
    /// exits reaped by another (`Exit.lost`). `weft-serve` exits 3 when it is not 0.
    workers_unclean: u32 = 0,
    /// `.forked`: per worker (by index, as the log names them), how its latest process ended,
    /// and how many of its processes ended uncleanly and how the latest of those did.
    /// Entries past `shape.workers()` stay empty.
    worker_exits: [config.server_workers_max]WorkerExits = @splat(.{}),

    /// How a worker process ended (`waitpid`'s status).
    pub const Exit = union(enum) {
        /// Not ended: no process of this worker was reaped.
        none,
        /// `exit(status)`: 0 after its drain, 1 when it could not start.
        exited: u8,
        /// Killed by this signal: SIGABRT for a panic or an abort, SIGKILL from the
        /// supervisor at the drain deadline or from elsewhere, SIGSEGV for a fault.
        signalled: Signal,
        /// Reaped by another (the program set SIGCHLD to SIG_IGN): how it ended is unknown.
        lost,

        /// From a `waitpid` status (null: reaped by another).
        pub fn fromStatus(status: ?u32) Exit {
            const s = status orelse return .lost;
            if (linux.W.IFEXITED(s)) return .{ .exited = linux.W.EXITSTATUS(s) };
            if (linux.W.IFSIGNALED(s)) return .{ .signalled = linux.W.TERMSIG(s) };
            return .none; // stopped or continued: not reported without WUNTRACED/WCONTINUED
        }

        /// "exited with status 0", "killed by signal SIGABRT (6)", ...
        pub fn format(exit: Exit, writer: *Io.Writer) Io.Writer.Error!void {
            switch (exit) {
                .none => try writer.writeAll("not ended"),
                .exited => |status| try writer.print("exited with status {d}", .{status}),
                .signalled => |sig| try writer.print("killed by signal SIG{s} ({d})", .{
                    std.enums.tagName(Signal, sig) orelse "?", @intFromEnum(sig),
                }),
                .lost => try writer.writeAll("exited (status lost: reaped elsewhere)"),
            }
        }
    };

    pub const WorkerExits = struct {
        /// How the worker's latest process ended (at the stop, unless it could not start).
        last: Exit = .none,
        /// How the latest of its processes that ended uncleanly ended: a crash that a
        /// restart and a clean stop followed stays visible here.
        last_unclean: Exit = .none,
        /// Its processes that ended uncleanly, as `workers_unclean` counts them.
        unclean: u32 = 0,
    };
};

/// A signal, by Linux's names where `.forked` runs (elsewhere no worker process is forked, so
/// no exit is `.signalled`).
const Signal = if (builtin.os.tag == .linux) linux.SIG else enum(u32) { _ };

/// Workers at most (`Shape`).
pub const workers_max = config.server_workers_max;
/// The listen backlog: connections the kernel queues before `accept` takes them.
pub const backlog = config.server_backlog;

pub const InitError = error{
    /// No workers, more than `workers_max`, `connections_max` or a timeout of 0; on the
    /// threaded runtime, a shape or option only the fiber runtime has (`refuseOffFibers`).
    InvalidOptions,
    /// Another socket listens on the address (with or without `SO_REUSEPORT`).
    AddressInUse,
    AddressUnavailable,
    AddressFamilyUnsupported,
    ProcessFdQuotaExceeded,
    SystemFdQuotaExceeded,
    SystemResources,
    Unexpected,
};

/// Opens the listener(s), so that a port in use is reported before anything starts.
pub fn init(gpa: std.mem.Allocator, options: Options) InitError!Server {
    const workers = options.shape.workers();
    if (workers == 0 or workers > config.server_workers_max) return error.InvalidOptions;
    try validateLimits(options);
    if (!platform.fibers) try refuseOffFibers(options);
    var server: Server = .{ .gpa = gpa, .options = options, .address = options.address };
    if (!platform.fibers) {
        server.listener_fds[0] = try openListenerStd(&server.address);
        server.listener_count = 1;
        return server;
    }
    errdefer server.closeListeners();
    const shared = switch (options.shape) {
        .single, .forked => true,
        .threaded => options.listeners == .shared,
    };
    switch (shared) {
        true => {
            server.listener_fds[0] = try openListener(&server.address, .exclusive);
            server.listener_count = 1;
        },
        false => {
            // A socket without SO_REUSEPORT cannot join a group of others: probing with one
            // makes a port held by anyone (even another weft server) `AddressInUse`, and
            // resolves port 0 for the group.
            const probe = try openListener(&server.address, .exclusive);
            os.closeFd(probe);
            for (0..workers) |i| {
                server.listener_fds[i] = try openListener(&server.address, .reuse_port);
                server.listener_count += 1;
            }
        },
    }
    assert(server.listener_count >= 1);
    assert(server.address.getPort() != 0);
    return server;
}

/// On the threaded runtime: `error.InvalidOptions` for what only the fiber runtime's server
/// does: `.forked` (its supervisor is built on Linux's process calls) and `.reuse_port`
/// listeners (a balanced `SO_REUSEPORT` group is Linux's).
fn refuseOffFibers(options: Options) error{InvalidOptions}!void {
    switch (options.shape) {
        .single => {},
        .threaded => if (options.listeners == .reuse_port) return error.InvalidOptions,
        .forked => return error.InvalidOptions,
    }
}

/// `error.InvalidOptions` unless the connection bound and every timeout are usable.
fn validateLimits(options: Options) error{InvalidOptions}!void {
    if (options.connections_max == 0) return error.InvalidOptions;
    // A timeout of 0 would cut every connection at the reaper's first sweep.
    const timeouts = [_]u64{
        options.idle_timeout_ns, options.header_timeout_ns,           options.body_timeout_ns,
        options.send_timeout_ns, options.request_timeout_ns orelse 1,
    };
    for (timeouts) |timeout_ns| if (timeout_ns == 0) return error.InvalidOptions;
}

/// `Worker.StartError`: the worker could not start its own tasks on `io`, and accepted nothing.
pub const ServeError = error{ InvalidOptions, OutOfMemory } || Worker.StartError || Io.Cancelable;

/// Serves `handler` on `listener` with the caller's `io`, on the calling task: any std.Io
/// will do (a weft runtime's, or a weft.Sim's, which runs the server on simulated time and
/// sockets). Applies `options`' connection bound and timeouts (its address, shape,
/// listeners, signals and runtime are `run`'s). Returns, after draining as `run` does, once
/// the listener is shut down (`(net.Stream{ .socket = listener.socket }).shutdown(io,
/// .both)`, what `stop` does to the fiber runtime's listeners: a pending accept wakes so on
/// Linux and under weft.Sim, not on a BSD or Windows listener); if canceled (the way to stop
/// it on every OS), it drains and returns `error.Canceled`; if `io` cannot start the worker's
/// own tasks, it returns `error.ConcurrencyUnavailable` before accepting. The listener stays
/// open: it is the caller's.
pub fn serve(
    gpa: std.mem.Allocator,
    io: Io,
    listener: net.Server,
    handler: Handler,
    options: Options,
) ServeError!Report {
    try validateLimits(options);
    const server: Server = .{ .gpa = gpa, .options = options, .address = options.address };
    var worker: Worker = undefined;
    try worker.init(gpa, io, listener.socket, handler, server.limits());
    defer worker.deinit(gpa);
    return .{ .workers = try worker.run(.listener_shutdown) };
}

/// Closes the listeners. Call after `run` returned.
pub fn deinit(server: *Server) void {
    server.closeListeners();
    server.* = undefined;
}

fn closeListeners(server: *Server) void {
    for (server.listener_fds[0..server.listener_count]) |fd| {
        if (platform.fibers) {
            os.closeFd(fd);
        } else {
            const listener: net.Socket = .{ .handle = fd, .address = server.address };
            listener.close(Io.Threaded.global_single_threaded.io());
        }
    }
    server.listener_count = 0;
}

pub fn port(server: *const Server) u16 {
    return server.address.getPort();
}

/// Stops accepting in every worker; each then drains. Returns at once. Thread-safe and
/// async-signal-safe (atomic stores and `shutdown(2)` calls, or on the threaded runtime a
/// futex wake), so a signal handler may call it. Calling it more than once is harmless.
pub fn stop(server: *Server) void {
    server.stopping.store(true, .release); // pairs with the acquire load in the supervisor
    if (!platform.fibers) {
        // Each worker's waiter on the word cancels its accept (`Worker.Stop.word`).
        server.stop_word.store(1, .release);
        host.futexWake(&server.stop_word, std.math.maxInt(u32));
        return;
    }
    for (server.listener_fds[0..server.listener_count]) |fd| {
        // ENOTCONN after the first call; nothing else can fail on a listener we own.
        _ = linux.shutdown(fd, linux.SHUT.RDWR);
    }
}

/// Why a worker could not start, in every shape alike: its runtime (`Runtime.InitError`), its
/// memory (`OutOfMemory`), its first tasks (`Worker.StartError`: no fiber stack, for one),
/// or its thread or process (`WorkerStartFailed`). `run` returns the first worker's such
/// error once the other workers have stopped; the failed worker accepted nothing. Each is
/// logged (scope `weft_server`) with the worker's index, and a shortage of memory or address
/// space with the process's `RLIMIT_AS` and what a runtime maps (`logStartFailure`).
pub const RunError = error{
    /// `.threaded`: a worker thread could not be spawned. `.forked`: a worker process could
    /// not be forked, or could not make its stop eventfd or its serving thread.
    WorkerStartFailed,
    /// `stop_on_signals` while another server of this process runs with it: one server per
    /// process owns SIGINT and SIGTERM. Returned before anything is served.
    SignalsTaken,
} || Worker.StartError || Runtime.InitError || error{OutOfMemory};

/// Serves until `stop` (or a signal, see `Options.stop_on_signals`), then drains. Blocks the
/// calling thread. For `.forked` it returns in the supervisor only.
pub fn run(server: *Server, handler: Handler) RunError!Report {
    assert(server.listener_count >= 1);
    return switch (server.options.shape) {
        .single => server.runSingle(handler),
        .threaded => server.runThreaded(handler),
        // Refused by `init` on the threaded runtime (`refuseOffFibers`).
        .forked => if (platform.fibers) supervisor.run(server, handler, serveOn) else unreachable,
    };
}

fn runSingle(server: *Server, handler: Handler) RunError!Report {
    var signals: Signals = .{};
    if (server.options.stop_on_signals) try signals.install(server);
    defer signals.restore();
    return .{ .workers = try server.serveOn(0, handler, null) };
}

/// Runs worker `index` on a new runtime on the calling thread, over its own listener or the
/// shared one, until `stop` or, when `stop_fd` (an eventfd) is not null, until it is
/// signalled (`Worker.run`, `Worker.Stop`). Every error is a start failure, logged here
/// (where it happens, so that the address space in use is the failing worker's), so that
/// each shape logs it alike.
fn serveOn(
    server: *Server,
    index: u32,
    handler: Handler,
    stop_fd: ?std.posix.fd_t,
) RunError!Worker.Report {
    assert(index < server.options.shape.workers());
    assert(server.listener_count == 1 or server.listener_count == server.options.shape.workers());
    const listener_index = if (server.listener_count == 1) 0 else index;
    // Each worker is one executor thread (`.single` is one thread; `.threaded` and `.forked`
    // already run one worker per thread or process), unless the options ask for more.
    var runtime_options = server.options.runtime;
    if (runtime_options.executors == null) runtime_options.executors = 1;
    var rt = Runtime.init(server.gpa, runtime_options) catch |err| {
        return startFailed(index, err, runtime_options);
    };
    defer rt.deinit();
    const io = rt.io();
    const listener: net.Socket = .{
        .handle = server.listener_fds[listener_index],
        .address = server.address,
    };
    var worker: Worker = undefined;
    worker.init(server.gpa, io, listener, handler, server.limits()) catch |err| {
        return startFailed(index, err, runtime_options);
    };
    defer worker.deinit(server.gpa);
    const stop_by: Worker.Stop = if (!platform.fibers)
        .{ .word = &server.stop_word }
    else if (stop_fd) |fd|
        .{ .eventfd = fd }
    else
        .listener_shutdown;
    return worker.run(stop_by) catch |err| switch (err) {
        error.Canceled => unreachable, // the runtime's main task is never canceled
        error.ConcurrencyUnavailable => |e| startFailed(index, e, runtime_options),
    };
}

/// Logs why worker `index` could not start (`logStartFailure`) and returns `err`.
fn startFailed(index: u32, err: RunError, runtime: Runtime.Options) RunError {
    logStartFailure(index, err, runtime);
    return err;
}

/// Logs why worker `index` could not start. For a shortage of memory or address space it
/// adds what an operator would change: the process's address-space limit (`ulimit -v`) and
/// use, the cgroup's `memory.max`, and what a runtime maps (its task table at init, a slab of
/// fiber stacks per executor at its first task, `fiber/stack.zig`), from `runtime`
/// (`Server.Options.runtime`).
fn logStartFailure(index: u32, err: RunError, runtime: Runtime.Options) void {
    const log = std.log.scoped(.weft_server);
    // The limits below are Linux's, and the task table and fiber stacks the fiber runtime's.
    if (!platform.fibers) return log.err("worker {d} cannot start: {t}", .{ index, err });
    switch (err) {
        error.SystemResources,
        error.OutOfMemory,
        error.ConcurrencyUnavailable,
        error.AddressSpaceLimit,
        error.MemoryLimit,
        => {},
        else => return log.err("worker {d} cannot start: {t}", .{ index, err }),
    }
    const mib = 1024 * 1024;
    const found = memory_limits.read();
    var limit_buffer: [32]u8 = undefined;
    const limit_text = if (found.address_space_bytes) |bytes|
        std.fmt.bufPrint(&limit_buffer, "{d} MiB", .{bytes / mib}) catch unreachable
    else
        "unlimited";
    var cgroup_buffer: [32]u8 = undefined;
    const cgroup_text = if (found.cgroup_memory_bytes) |bytes|
        std.fmt.bufPrint(&cgroup_buffer, "{d} MiB", .{bytes / mib}) catch unreachable
    else
        "none";
    const table_bytes = LiveTasks.mappedBytes(runtime.tasks_max);
    const slab_bytes = runtime.stack_size_bytes * config.slab_stacks;
    log.err("worker {d} cannot start: {t}. Address space: RLIMIT_AS {s}, {d} MiB in use; " ++
        "cgroup memory.max {s}; a runtime maps {d} MiB for its task table (runtime.tasks_max " ++
        "{d}, lowered to fit the limits) and, from its first task, up to {d} MiB of fiber " ++
        "stacks per executor ({d} stacks of runtime.stack_size_bytes, {d} KiB; fewer " ++
        "under a limit), and needs room for one stack beside {d} MiB for the rest", .{
        index,                                    err,
        limit_text,                               found.address_space_used_bytes / mib,
        cgroup_text,                              table_bytes / mib,
        runtime.tasks_max,                        slab_bytes / mib,
        config.slab_stacks,                       runtime.stack_size_bytes / 1024,
        config.address_space_reserve_bytes / mib,
    });
}

fn limits(server: *const Server) Worker.Limits {
    return .{
        .connections_max = server.options.connections_max,
        .when_full = server.options.when_full,
        .idle_timeout_ns = server.options.idle_timeout_ns,
        .header_timeout_ns = server.options.header_timeout_ns,
        .body_timeout_ns = server.options.body_timeout_ns,
        .send_timeout_ns = server.options.send_timeout_ns,
        .request_timeout_ns = server.options.request_timeout_ns,
        .drain_timeout_ns = server.options.drain_timeout_ns,
        .drain_idle_grace_ns = server.options.drain_idle_grace_ns,
    };
}

const ThreadResult = union(enum) { running, report: Worker.Report, failed: RunError };

fn runThreaded(server: *Server, handler: Handler) RunError!Report {
    const workers = server.options.shape.workers();
    assert(server.listener_count == 1 or server.listener_count == workers);
    var signals: Signals = .{};
    if (server.options.stop_on_signals) try signals.install(server);
    defer signals.restore();

    var results: [config.server_workers_max]ThreadResult = @splat(.running);
    var threads: [config.server_workers_max]std.Thread = undefined;
    var started: u32 = 0;
    var failure: ?RunError = null;
    while (started < workers) : (started += 1) {
        threads[started] = std.Thread.spawn(.{}, threadMain, .{
            server, started, handler, &results[started],
        }) catch |err| {
            std.log.scoped(.weft_server).err("worker {d} cannot start: no thread: {t}", .{
                started, err,
            });
            failure = error.WorkerStartFailed;
            server.stop();
            break;
        };
    }
    var report: Report = .{};
    for (threads[0..started], results[0..started]) |thread, *result| {
        thread.join();
        switch (result.*) {
            .running => unreachable, // joined
            .report => |r| report.workers.add(r),
            // The first worker's (by index), as `.single` would return it.
            .failed => |err| failure = failure orelse err,
        }
    }
    if (failure) |err| return err;
    return report;
}

fn threadMain(server: *Server, index: u32, handler: Handler, result: *ThreadResult) void {
    result.* = if (server.serveOn(index, handler, null)) |report|
        .{ .report = report }
    else |err| failed: {
        server.stop(); // the others stop too: a server with a dead worker is not what was asked
        break :failed .{ .failed = err };
    };
}

/// SIGINT and SIGTERM handlers that call `stop` on one server, and the previous handlers. On
/// Windows, which has no such signals, a console control handler does the same for Ctrl+C,
/// Ctrl+Break, the console's close and the system's shutdown (it runs on a thread of its own,
/// where `stop`'s futex wake is allowed).
const Signals = struct {
    installed: bool = false,
    previous: [2]if (is_windows) void else std.posix.Sigaction = undefined,

    var target: std.atomic.Value(?*Server) = .init(null);
    const is_windows = builtin.os.tag == .windows;
    const signals = if (is_windows) {} else [2]std.posix.SIG{ .INT, .TERM };

    /// `error.SignalsTaken` while another server's handlers are installed.
    pub fn install(s: *Signals, server: *Server) error{SignalsTaken}!void {
        assert(!s.installed);
        // One server per process owns the signals: a second is the caller's misuse.
        if (target.cmpxchgStrong(null, server, .acq_rel, .acquire) != null) {
            return error.SignalsTaken;
        }
        if (is_windows) {
            // Fails only for a handler that is not a function, or too many of them.
            if (!SetConsoleCtrlHandler(&onConsoleEvent, .TRUE).toBool()) {
                std.log.scoped(.weft_server).err("cannot handle Ctrl+C: {t}; stop it by " ++
                    "`stop` alone", .{std.os.windows.GetLastError()});
                assert(target.swap(null, .acq_rel) == server);
                return;
            }
        } else {
            const action: std.posix.Sigaction = .{
                .handler = .{ .handler = &onSignal },
                .mask = std.posix.sigemptyset(),
                .flags = std.posix.SA.RESTART,
            };
            for (signals, &s.previous) |sig, *previous| std.posix.sigaction(sig, &action, previous);
        }
        s.installed = true;
    }

    pub fn restore(s: *Signals) void {
        if (!s.installed) return;
        if (is_windows) {
            assert(SetConsoleCtrlHandler(&onConsoleEvent, .FALSE).toBool()); // installed above
        } else {
            for (signals, &s.previous) |sig, *previous| std.posix.sigaction(sig, previous, null);
        }
        assert(target.swap(null, .acq_rel) != null);
        s.installed = false;
    }

    fn onSignal(_: std.posix.SIG) callconv(.c) void {
        if (target.load(.acquire)) |server| server.stop();
    }

    /// Handled (so the process goes on to drain) for the events a stop answers; the rest go to
    /// the next handler. The close and shutdown events end the process when handlers return,
    /// so a drain there is as long as Windows allows (5 s for a close).
    fn onConsoleEvent(event: std.os.windows.DWORD) callconv(.winapi) std.os.windows.BOOL {
        const ctrl_c = 0;
        const ctrl_break = 1;
        const ctrl_close = 2;
        const ctrl_shutdown = 6;
        switch (event) {
            ctrl_c, ctrl_break, ctrl_close, ctrl_shutdown => {},
            else => return .FALSE,
        }
        const server = target.load(.acquire) orelse return .FALSE;
        server.stop();
        return .TRUE;
    }

    extern "kernel32" fn SetConsoleCtrlHandler(
        handler: ?*const fn (event: std.os.windows.DWORD) callconv(.winapi) std.os.windows.BOOL,
        add: std.os.windows.BOOL,
    ) callconv(.winapi) std.os.windows.BOOL;
};

test "Signals: SIGTERM (on Windows a console Ctrl+C) calls stop; one server holds them" {
    const address: net.IpAddress = .{ .ip4 = .loopback(0) };
    // No listener: `stop` only marks the server stopping (and wakes nobody).
    var server: Server = .{
        .gpa = std.testing.allocator,
        .options = .{ .address = address },
        .address = address,
    };
    var signals: Signals = .{};
    try signals.install(&server);
    defer signals.restore();
    try std.testing.expect(signals.installed);
    // A second server cannot take them while the first holds them.
    var second = server;
    var second_signals: Signals = .{};
    try std.testing.expectError(error.SignalsTaken, second_signals.install(&second));
    try std.testing.expect(!second_signals.installed);
    if (Signals.is_windows) {
        // What the console's thread calls on Ctrl+C (generating the event would reach every
        // process of the console, the test runner's included).
        try std.testing.expect(Signals.onConsoleEvent(0).toBool());
    } else {
        try std.posix.raise(.TERM);
    }
    // A signal raised on this thread is handled before `raise` returns.
    try std.testing.expect(server.stopping.load(.acquire));
    if (!platform.fibers) try std.testing.expectEqual(@as(u32, 1), server.stop_word.load(.acquire));
}

/// The threaded runtime's listener, through std.Io: on every OS std.Io.Threaded's own calls
/// make the socket that its accept then waits on. `reuse_address` (SO_REUSEADDR, on POSIX
/// with SO_REUSEPORT): a restarted server binds while old connections sit in TIME_WAIT; the
/// price on POSIX is that another socket of the same user setting both may join the port
/// instead of failing with `AddressInUse` (the fiber runtime's listener sets SO_REUSEADDR
/// alone). Windows' SO_REUSEADDR lets any socket take the port: not set there.
fn openListenerStd(address: *net.IpAddress) InitError!net.Socket.Handle {
    const io = Io.Threaded.global_single_threaded.io();
    const listener = address.listen(io, .{
        .kernel_backlog = config.server_backlog,
        .reuse_address = builtin.os.tag != .windows,
    }) catch |err| return switch (err) {
        error.AddressInUse,
        error.AddressUnavailable,
        error.AddressFamilyUnsupported,
        error.ProcessFdQuotaExceeded,
        error.SystemFdQuotaExceeded,
        error.SystemResources,
        => |e| e,
        else => error.Unexpected, // TCP over IPv4/6 is always there; a privileged port
    };
    address.* = listener.socket.address;
    return listener.socket.handle;
}

const ListenerKind = enum { exclusive, reuse_port };

/// A close-on-exec, non-blocking TCP listener bound to `address` (whose port 0 is replaced by
/// the one the kernel chose).
fn openListener(address: *net.IpAddress, kind: ListenerKind) InitError!socket.fd_t {
    const flags = socket.flags_nonblocking; // a listener (net/socket.zig)
    const fd = socket.open(socket.family(address), .stream, null, flags) catch |err| switch (err) {
        error.ProtocolUnsupportedBySystem,
        error.ProtocolUnsupportedByAddressFamily,
        error.SocketModeUnsupported,
        => return error.Unexpected, // TCP over IPv4/6 is always there
        else => |e| return e,
    };
    errdefer os.closeFd(fd);
    // SO_REUSEADDR: a restarted server binds while old connections sit in TIME_WAIT.
    try socket.setOption(fd, linux.SOL.SOCKET, linux.SO.REUSEADDR, 1);
    if (kind == .reuse_port) try socket.setOption(fd, linux.SOL.SOCKET, linux.SO.REUSEPORT, 1);
    var storage: socket.IpStorage = undefined;
    const len = socket.ipToPosix(address, &storage);
    socket.bind(fd, &storage.any, len) catch |err| switch (err) {
        error.AddressInUse, error.AddressUnavailable => |e| return e,
        error.AddressFamilyUnsupported, error.SystemResources => |e| return e,
        else => return error.Unexpected, // privileged port, or a Unix-only error
    };
    try socket.listen(fd, config.server_backlog);
    address.* = try socket.localAddress(fd);
    return fd;
}
