//! The `.forked` shape: a supervisor process that forks worker processes and keeps them
//! running until it is told to stop.
//!
//! The supervisor holds no runtime, no threads and no fds but the listener (opened by
//! `Server.init`, close-on-exec): a forked worker inherits exactly that. It blocks SIGINT,
//! SIGTERM and SIGCHLD and waits for them with `rt_sigtimedwait` (a 100 ms tick also polls
//! `Server.stop` and the children, so a lost SIGCHLD costs at most a tick).
//!
//! One listener shared by all workers, opened before the fork, rather than one
//! `SO_REUSEPORT` listener per worker: a worker that crashes takes nothing with it (with
//! `SO_REUSEPORT` the connections the kernel had queued on its listener are reset), a port in
//! use is reported by `init` before anything is forked, and a restarted worker needs no new
//! bind. The cost is that the workers contend on one accept queue; with keep-alive load
//! that is one accept per connection. In one full run of bench/http.sh (wrk -c50 keep-alive)
//! forked 2 made 73.9k req/s and threaded 2 73.7k; the SO_REUSEPORT variant of forked was
//! not measured.
//!
//! States of a worker slot: `running` (pid > 0) → `exited` (reaped) → `running` again. While
//! the service runs, every exit is followed by a restart, whatever its cause: a crash, a
//! panic, a signal, or the worker's own stop. SIGINT or SIGTERM sent to one worker stops that
//! worker alone: its handler signals the worker's eventfd (never `Server.stop`, whose
//! `shutdown(2)` acts on the socket every worker shares), the worker stops accepting, drains
//! like a stopped server (`Worker.acceptUntilSignalled`) and exits 0. A worker that ran less
//! than `config.server_restart_backoff_reset_ns` is a crash loop in the making: its restart
//! waits out its slot's back-off (from `server_restart_backoff_ns_min`, doubling with each
//! quick death up to `server_restart_backoff_ns_max`; counted in `Report.restarts_delayed`),
//! and connections meanwhile wait in the listener's queue. One that ran longer is restarted
//! at once and its slot's back-off starts over.
//!
//! A worker that cannot start (`Server.RunError`: its runtime, its first task, its thread)
//! stores its error in memory it shares with the supervisor (`Shared.start_error`, beside its
//! report) and exits 1; nothing else writes there, so a start failure is told from a crash
//! later. At the service's start (the first worker of its slot) the supervisor then stops the
//! service and `run` returns that error, as `.single` and `.threaded` do; a restarted worker
//! that cannot start is a quick death like any other (memory may come back; the back-off
//! bounds the retries). Every exit is recorded in `Report.worker_exits`, and one that is not
//! status 0 (a signal, an abort, a non-zero status; the supervisor's SIGKILL at the drain
//! deadline excepted) is counted in `Report.workers_unclean`, so a crash during the stop is
//! not reported as a clean stop.
//!
//! The supervisor logs (scope `weft_server`) each worker's pid when it starts, and its exit:
//! pid, exit status or signal, how long it ran, and when it restarts. The worker logs its pid
//! and the thread it serves on. std's default panic handler prints "thread <id> panic: ..."
//! (a library cannot replace the root's handler): that id leads to the worker's start line,
//! whose pid leads to its exit (SIGABRT). Only the first executor's thread is logged; with
//! `runtime.executors` > 1 the others are the worker's other threads. The worker serves on
//! a thread it starts after the fork, not on the forked thread: std caches a thread's id on
//! first use, and the forked one would name the supervisor's thread it was copied from.
//!
//! Stopping (SIGINT/SIGTERM to the supervisor, or `Server.stop` in its process; nothing else
//! stops the service): the supervisor shuts the listener down (every worker's accept ends),
//! forwards SIGTERM, waits until `drain_timeout_ns` plus `kill_grace_ns` for the workers to
//! drain and exit, SIGKILLs the rest, reaps every child, and returns: no zombie is left.
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const Server = @import("Server.zig");
const Worker = @import("Worker.zig");

const log = std.log.scoped(.weft_server);

const tick_ns = 100 * std.time.ns_per_ms;
/// Beyond the drain timeout, for a worker to write its report and exit.
pub const kill_grace_ns = std.time.ns_per_s;

const Slot = struct {
    pid: linux.pid_t = 0,
    started_ns: u64 = 0,
    /// Processes forked for this slot: the first is the service's start, the others restarts.
    starts: u32 = 0,
    /// Set when the supervisor SIGKILLed the running process at the drain deadline.
    killed: bool = false,
    /// When a dead worker is started again (unless the service is stopping).
    restart_at_ns: u64 = 0,
    /// How long the next quick death of this slot's worker holds its restart back.
    backoff_ns: u64 = config.server_restart_backoff_ns_min,
};

/// What a worker process leaves for the supervisor, in memory they share (`mapShared`).
const Shared = struct {
    /// Written by the worker as it exits after its drain; read once it exited with status 0.
    report: Worker.Report = .{},
    /// `@intFromError` of the `Server.RunError` the worker could not start with, 0 if none.
    /// The supervisor clears it before the fork; the worker stores it before it exits with
    /// status 1 (release), and the supervisor reads it after reaping the worker (acquire).
    /// An error's integer is the same in both processes: one program, forked.
    start_error: std.atomic.Value(ErrorInt) = .init(0),

    const ErrorInt = @TypeOf(@intFromError(error.WorkerStartFailed));
};

/// How a worker process serves: `Server.serveOn`, which is not public (users have `run`), so
/// `Server.run` hands it over.
pub const Serve = *const fn (
    server: *Server,
    index: u32,
    handler: Server.Handler,
    stop_fd: ?linux.fd_t,
) Server.RunError!Worker.Report;

/// Forks the workers and supervises them; returns when they have all exited after a stop.
pub fn run(server: *Server, handler: Server.Handler, serve: Serve) Server.RunError!Server.Report {
    const workers = server.options.shape.workers();
    assert(server.listener_count == 1);
    assert(workers >= 1);
    // Workers write their reports and start errors here: shared, so the supervisor sees them.
    const shared = try mapShared(workers);
    defer _ = linux.munmap(@ptrCast(shared.ptr), shared.len * @sizeOf(Shared));

    var waited = linux.sigemptyset();
    for ([_]linux.SIG{ .INT, .TERM, .CHLD }) |sig| linux.sigaddset(&waited, sig);
    var mask_before: linux.sigset_t = undefined;
    assert(linux.sigprocmask(linux.SIG.BLOCK, &waited, &mask_before) == 0);
    defer assert(linux.sigprocmask(linux.SIG.SETMASK, &mask_before, null) == 0);

    var slots: [config.server_workers_max]Slot = @splat(.{});
    var report: Server.Report = .{};
    // The first worker that could not start: the ones started are stopped, then run fails.
    var failure: ?Server.RunError = null;
    for (slots[0..workers], 0..) |*slot, i| {
        start(server, slot, @intCast(i), handler, serve, &mask_before, shared) catch |err| {
            failure = err;
            break;
        };
    }
    var stop_deadline_ns: ?u64 = null;
    var killed = false;
    // Bounded: once stopping, every child is SIGKILLed at the deadline and then reaped.
    while (true) {
        const signalled = waitStopSignal(&waited, waitNs(slots[0..workers], stop_deadline_ns));
        const stop_asked = signalled or failure != null or server.stopping.load(.acquire);
        // Before reaping: a worker that died of the same Ctrl-C is not restarted.
        if (stop_deadline_ns == null and stop_asked) {
            stop_deadline_ns = beginStop(server, slots[0..workers]);
        }
        const stopping = stop_deadline_ns != null;
        const live = reapExited(slots[0..workers], shared, &report, stopping, &failure);
        if (stop_deadline_ns) |deadline_ns| {
            if (live == 0) break;
            if (!killed and os.monotonicNs() >= deadline_ns) {
                for (slots[0..workers]) |*slot| {
                    if (slot.pid == 0) continue;
                    _ = linux.kill(slot.pid, .KILL);
                    slot.killed = true;
                    report.workers_killed += 1;
                }
                killed = true;
            }
            continue;
        }
        // A worker that could not start at the service's start stops it at the next pass.
        if (failure != null) continue;
        restartDue(server, slots[0..workers], handler, serve, &mask_before, shared, &report);
    }
    for (slots[0..workers]) |slot| assert(slot.pid == 0);
    if (failure) |err| return err;
    return report;
}

/// Shuts the shared listener down and forwards SIGTERM; returns the deadline for the drain.
fn beginStop(server: *Server, slots: []const Slot) u64 {
    server.stop();
    for (slots) |slot| {
        if (slot.pid != 0) _ = linux.kill(slot.pid, .TERM);
    }
    return os.monotonicNs() + server.options.drain_timeout_ns + kill_grace_ns;
}

/// How long to wait for a signal: a tick, or less when a restart is due sooner.
fn waitNs(slots: []const Slot, stop_deadline_ns: ?u64) u64 {
    if (stop_deadline_ns != null) return tick_ns;
    const now_ns = os.monotonicNs();
    var wait_ns: u64 = tick_ns;
    for (slots) |slot| {
        if (slot.pid != 0) continue;
        wait_ns = @min(wait_ns, slot.restart_at_ns -| now_ns);
    }
    return wait_ns;
}

/// Reaps the workers that exited, adds the reports of those that exited 0, records and logs
/// each exit, and unless `stopping` schedules its restart. A worker that could not start at
/// the service's start (its slot's first) is not restarted: its error goes to `failure`, and
/// the service stops. Returns how many workers still run.
fn reapExited(
    slots: []Slot,
    shared: []Shared,
    report: *Server.Report,
    stopping: bool,
    failure: *?Server.RunError,
) u32 {
    var live: u32 = 0;
    for (slots, 0..) |*slot, i| {
        if (slot.pid == 0) continue;
        var status_raw: u32 = 0;
        const rc = linux.waitpid(slot.pid, &status_raw, linux.W.NOHANG);
        const status: ?u32 = switch (os.errno(rc)) {
            .SUCCESS => if (rc == 0) {
                live += 1;
                continue;
            } else status_raw,
            // Not our child any more: reaped by the kernel (the program set SIGCHLD to
            // SIG_IGN), so its status is lost. Counted as exited, or no stop would end.
            .CHILD => null,
            else => { // EINTR: asked again at the next tick
                live += 1;
                continue;
            },
        };
        const now_ns = os.monotonicNs();
        const ran_ns = now_ns -| slot.started_ns;
        const pid = slot.pid;
        slot.pid = 0;
        const exit: Server.Report.Exit = .fromStatus(status);
        if (std.meta.eql(exit, .{ .exited = 0 })) {
            report.workers.add(shared[i].report);
            shared[i].report = .{};
        }
        recordExit(report, i, exit, slot.killed);
        const start_error = startErrorOf(shared[i].start_error.load(.acquire));
        const failed_at_start = start_error != null and slot.starts == 1;
        if (failed_at_start) failure.* = failure.* orelse start_error.?;
        const delay_ns = if (stopping or failed_at_start)
            null
        else
            scheduleRestart(slot, now_ns, ran_ns, report);
        logExit(i, pid, status, ran_ns, delay_ns, start_error);
    }
    return live;
}

/// Records worker `index`'s exit in `report`: its last, and unless it was clean or
/// `killed_by_supervisor` (or unknown), one more unclean exit.
fn recordExit(
    report: *Server.Report,
    index: usize,
    exit: Server.Report.Exit,
    killed_by_supervisor: bool,
) void {
    assert(exit != .none);
    const exits = &report.worker_exits[index];
    exits.last = exit;
    const unclean = switch (exit) {
        .none => unreachable, // asserted above
        .exited => |code| code != 0,
        // SIGKILL at the drain deadline is `workers_killed`'s; a worker killed then by
        // another signal (its handler panicked as it died) is the supervisor's doing too.
        .signalled => !killed_by_supervisor,
        .lost => false, // unknown: a clean exit too is lost where SIGCHLD is ignored
    };
    if (!unclean) return;
    exits.last_unclean = exit;
    exits.unclean += 1;
    report.workers_unclean += 1;
    assert(exits.unclean <= report.workers_unclean);
}

/// The start error a worker left in `Shared.start_error`, or null.
fn startErrorOf(code: Shared.ErrorInt) ?Server.RunError {
    if (code == 0) return null;
    inline for (@typeInfo(Server.RunError).error_set.?) |member| {
        const err = @field(Server.RunError, member.name);
        if (@intFromError(err) == code) return err;
    }
    return error.WorkerStartFailed; // written by no worker: `serveWorker` stores a RunError
}

/// Sets when the slot's dead worker starts again: at once after a worker that ran for
/// `server_restart_backoff_reset_ns` (and the back-off starts over), else after the slot's
/// back-off, which then doubles. Returns that delay.
fn scheduleRestart(slot: *Slot, now_ns: u64, ran_ns: u64, report: *Server.Report) u64 {
    assert(slot.pid == 0);
    assert(slot.backoff_ns >= config.server_restart_backoff_ns_min);
    assert(slot.backoff_ns <= config.server_restart_backoff_ns_max);
    var delay_ns: u64 = 0;
    if (ran_ns >= config.server_restart_backoff_reset_ns) {
        slot.backoff_ns = config.server_restart_backoff_ns_min;
    } else {
        delay_ns = slot.backoff_ns;
        slot.backoff_ns = @min(slot.backoff_ns * 2, config.server_restart_backoff_ns_max);
        report.restarts_delayed += 1;
        report.restart_delay_ns_max = @max(report.restart_delay_ns_max, delay_ns);
    }
    slot.restart_at_ns = now_ns + delay_ns;
    return delay_ns;
}

/// Starts the dead workers whose restart is due. A fork that fails counts as a quick death:
/// it is retried after the slot's back-off, and the workers left keep serving.
fn restartDue(
    server: *Server,
    slots: []Slot,
    handler: Server.Handler,
    serve: Serve,
    mask_before: *const linux.sigset_t,
    shared: []Shared,
    report: *Server.Report,
) void {
    const now_ns = os.monotonicNs();
    for (slots, 0..) |*slot, i| {
        if (slot.pid != 0 or slot.restart_at_ns > now_ns) continue;
        start(server, slot, @intCast(i), handler, serve, mask_before, shared) catch {
            const delay_ns = scheduleRestart(slot, now_ns, 0, report);
            log.err("worker {d}: fork failed; retrying in {d} ms", .{
                i, delay_ns / std.time.ns_per_ms,
            });
            continue;
        };
        report.workers_restarted += 1;
    }
}

/// Logs a worker's exit: `status` null when it was reaped elsewhere, `restart_delay_ns` null
/// when the service is stopping, `start_error` the error it could not start with.
fn logExit(
    index: usize,
    pid: linux.pid_t,
    status: ?u32,
    ran_ns: u64,
    restart_delay_ns: ?u64,
    start_error: ?Server.RunError,
) void {
    var how_buffer: [64]u8 = undefined;
    const how = describeStatus(&how_buffer, status);
    const clean = if (status) |s| linux.W.IFEXITED(s) and linux.W.EXITSTATUS(s) == 0 else false;
    var next_buffer: [64]u8 = undefined;
    const next = if (restart_delay_ns) |delay_ns| if (delay_ns == 0)
        "restarting now"
    else
        std.fmt.bufPrint(&next_buffer, "restarting in {d} ms (back-off: ran under {d} s)", .{
            delay_ns / std.time.ns_per_ms,
            config.server_restart_backoff_reset_ns / std.time.ns_per_s,
        }) catch unreachable // 64 bytes hold it
    else "not restarted: stopping";
    if (start_error) |err| {
        return log.err("worker {d} (pid {d}) could not start ({t}): {s} after {d} ms; {s}", .{
            index, pid, err, how, ran_ns / std.time.ns_per_ms, next,
        });
    }
    const format = "worker {d} (pid {d}) {s} after {d} ms; {s}";
    const args = .{ index, pid, how, ran_ns / std.time.ns_per_ms, next };
    if (clean) log.info(format, args) else log.warn(format, args);
}

/// "exited with status 0", "killed by signal SIGSEGV (11), core dumped", ...
fn describeStatus(buffer: []u8, status: ?u32) []const u8 {
    const exit: Server.Report.Exit = .fromStatus(status);
    // Not reported without WUNTRACED/WCONTINUED.
    if (exit == .none) return "ended";
    const core_dumped = exit == .signalled and status.? & 0x80 != 0; // WCOREDUMP
    return std.fmt.bufPrint(buffer, "{f}{s}", .{
        exit, if (core_dumped) ", core dumped" else "",
    }) catch unreachable; // 64 bytes hold it
}

/// Waits up to `timeout_ns` for one of the `waited` signals, then takes those already
/// pending too; returns whether SIGINT or SIGTERM was among them. Taking them all before
/// the children are reaped keeps a Ctrl-C, which a terminal sends to the workers as well,
/// from looking like workers that exited by themselves.
fn waitStopSignal(waited: *const linux.sigset_t, timeout_ns: u64) bool {
    var stop = false;
    var wait_ns = timeout_ns;
    // Bounded: standard signals do not queue, so at most the three waited ones are pending.
    for (0..4) |_| {
        const sig = waitSignal(waited, wait_ns) orelse break;
        if (sig == .INT or sig == .TERM) stop = true;
        wait_ns = 0;
    }
    return stop;
}

/// The next of the `waited` signals, or null after `timeout_ns`.
fn waitSignal(waited: *const linux.sigset_t, timeout_ns: u64) ?linux.SIG {
    const timeout = os.timespecFromNs(timeout_ns);
    const rc = linux.syscall4(
        .rt_sigtimedwait,
        @intFromPtr(waited),
        0,
        @intFromPtr(&timeout),
        linux.NSIG / 8,
    );
    return switch (os.errno(rc)) {
        .SUCCESS => @enumFromInt(rc),
        .AGAIN, .INTR => null, // the time passed, or another signal interrupted
        else => null, // EINVAL/EFAULT: a bug above; the tick loop still bounds the wait
    };
}

fn mapShared(workers: u32) error{OutOfMemory}![]Shared {
    const len = workers * @sizeOf(Shared);
    const rc = linux.mmap(null, len, .{ .READ = true, .WRITE = true }, .{
        .TYPE = .SHARED,
        .ANONYMOUS = true,
    }, -1, 0);
    if (os.errno(rc) != .SUCCESS) return error.OutOfMemory;
    const shared: [*]Shared = @ptrFromInt(rc);
    @memset(shared[0..workers], .{});
    return shared[0..workers];
}

fn start(
    server: *Server,
    slot: *Slot,
    index: u32,
    handler: Server.Handler,
    serve: Serve,
    mask_before: *const linux.sigset_t,
    shared: []Shared,
) error{WorkerStartFailed}!void {
    assert(slot.pid == 0);
    const supervisor_pid = linux.getpid();
    shared[index].start_error.store(0, .monotonic); // the worker is not forked yet
    const rc = os.fork();
    if (os.errno(rc) != .SUCCESS) {
        log.err("worker {d} cannot start: fork: {t}", .{ index, os.errno(rc) });
        return error.WorkerStartFailed;
    }
    if (rc == 0) workerMain(server, index, handler, serve, mask_before, supervisor_pid, shared);
    slot.pid = @intCast(rc);
    slot.starts += 1;
    slot.killed = false;
    slot.started_ns = os.monotonicNs();
    log.info("worker {d} started: pid {d}", .{ index, slot.pid });
}

/// The worker process's stop eventfd, written by its SIGINT/SIGTERM handler; -1 before the
/// worker made it. Set before the handler is installed, read only by the handler.
var worker_stop_fd: std.atomic.Value(linux.fd_t) = .init(-1);

/// Async-signal-safe: one `write(2)`, no runtime call.
fn onWorkerSignal(_: linux.SIG) callconv(.c) void {
    const fd = worker_stop_fd.load(.acquire);
    if (fd >= 0) os.eventFdSignal(fd);
}

/// A worker process: its own runtime over the shared listener. Never returns.
fn workerMain(
    server: *Server,
    index: u32,
    handler: Server.Handler,
    serve: Serve,
    mask_before: *const linux.sigset_t,
    supervisor_pid: linux.pid_t,
    shared: []Shared,
) noreturn {
    // A supervisor killed outright must not leave its workers serving: they get SIGTERM,
    // whose handler stops the worker like any SIGTERM.
    _ = linux.prctl(@intFromEnum(linux.PR.SET_PDEATHSIG), @intFromEnum(linux.SIG.TERM), 0, 0, 0);
    // Blocking (see `Worker.awaitSignalled`); close-on-exec like every fd weft opens.
    const fd_rc = linux.eventfd(0, linux.EFD.CLOEXEC);
    if (os.errno(fd_rc) != .SUCCESS) {
        log.err("worker {d} cannot start: no eventfd: {t}", .{ index, os.errno(fd_rc) });
        exitStartFailed(&shared[index], error.WorkerStartFailed);
    }
    const stop_fd: linux.fd_t = @intCast(fd_rc);
    worker_stop_fd.store(stop_fd, .release); // pairs with the acquire load in the handler
    const action: linux.Sigaction = .{
        .handler = .{ .handler = &onWorkerSignal },
        .mask = linux.sigemptyset(),
        .flags = linux.SA.RESTART,
    };
    for ([_]linux.SIG{ .INT, .TERM }) |sig| assert(linux.sigaction(sig, &action, null) == 0);
    // A SIGTERM forwarded before this point is pending; it is delivered here, to the handler.
    assert(linux.sigprocmask(linux.SIG.SETMASK, mask_before, null) == 0);
    if (linux.getppid() != supervisor_pid) os.eventFdSignal(stop_fd); // died before the prctl
    // On a thread of its own: std's panic handler names the thread with
    // `std.Thread.getCurrentId`, which each thread caches on first use, so this (forked)
    // thread keeps the id of the supervisor thread it was forked from once that one logged
    // anything. A thread started here has a fresh cache: a panic names the worker's thread.
    const thread = std.Thread.spawn(.{}, serveWorker, .{
        server, index, handler, serve, stop_fd, &shared[index],
    }) catch |err| {
        log.err("worker {d} cannot start: no thread: {t}", .{ index, err });
        exitStartFailed(&shared[index], error.WorkerStartFailed);
    };
    thread.join();
    linux.exit_group(0);
}

/// Leaves `err` for the supervisor (`Shared.start_error`) and exits with status 1.
fn exitStartFailed(shared: *Shared, err: Server.RunError) noreturn {
    shared.start_error.store(@intFromError(err), .release); // pairs with the supervisor's
    linux.exit_group(1);
}

/// The worker's serving thread: its runtime's first executor. Writes the worker's report for
/// the supervisor, or if the worker cannot start (`Server.serveOn` logged why), its error,
/// and exits the process with status 1.
fn serveWorker(
    server: *Server,
    index: u32,
    handler: Server.Handler,
    serve: Serve,
    stop_fd: linux.fd_t,
    shared: *Shared,
) void {
    log.info("worker {d} (pid {d}) serves on thread {d}", .{
        index, linux.getpid(), linux.gettid(),
    });
    // Every error of `serve` is a start failure: it returns none once serving.
    shared.report = serve(server, index, handler, stop_fd) catch |err| exitStartFailed(shared, err);
}
