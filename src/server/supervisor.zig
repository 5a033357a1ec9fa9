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
const linux = std.os.linux;
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
    /// When a dead worker is started again (unless the service is stopping).
    restart_at_ns: u64 = 0,
    /// How long the next quick death of this slot's worker holds its restart back.
    backoff_ns: u64 = config.server_restart_backoff_ns_min,
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
    // Workers write their reports here on exit: shared, so the supervisor sees them.
    const reports = try mapReports(workers);
    defer _ = linux.munmap(@ptrCast(reports.ptr), reports.len * @sizeOf(Worker.Report));

    var waited = linux.sigemptyset();
    for ([_]linux.SIG{ .INT, .TERM, .CHLD }) |sig| linux.sigaddset(&waited, sig);
    var mask_before: linux.sigset_t = undefined;
    assert(linux.sigprocmask(linux.SIG.BLOCK, &waited, &mask_before) == 0);
    defer assert(linux.sigprocmask(linux.SIG.SETMASK, &mask_before, null) == 0);

    var slots: [config.server_workers_max]Slot = @splat(.{});
    var report: Server.Report = .{};
    var start_failed = false;
    for (slots[0..workers], 0..) |*slot, i| {
        start(server, slot, @intCast(i), handler, serve, &mask_before, reports) catch {
            start_failed = true; // the ones started are stopped, then run fails
            break;
        };
    }
    var stop_deadline_ns: ?u64 = null;
    var killed = false;
    // Bounded: once stopping, every child is SIGKILLed at the deadline and then reaped.
    while (true) {
        const signalled = waitStopSignal(&waited, waitNs(slots[0..workers], stop_deadline_ns));
        const stop_asked = signalled or start_failed or server.stopping.load(.acquire);
        // Before reaping: a worker that died of the same Ctrl-C is not restarted.
        if (stop_deadline_ns == null and stop_asked) {
            stop_deadline_ns = beginStop(server, slots[0..workers]);
        }
        const stopping = stop_deadline_ns != null;
        const live = reapExited(slots[0..workers], reports, &report, stopping);
        if (stop_deadline_ns) |deadline_ns| {
            if (live == 0) break;
            if (!killed and os.monotonicNs() >= deadline_ns) {
                for (slots[0..workers]) |slot| {
                    if (slot.pid == 0) continue;
                    _ = linux.kill(slot.pid, .KILL);
                    report.workers_killed += 1;
                }
                killed = true;
            }
            continue;
        }
        restartDue(server, slots[0..workers], handler, serve, &mask_before, reports, &report);
    }
    for (slots[0..workers]) |slot| assert(slot.pid == 0);
    if (start_failed) return error.WorkerStartFailed;
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

/// Reaps the workers that exited, adds the reports of those that exited 0, logs each exit,
/// and unless `stopping` schedules its restart. Returns how many workers still run.
fn reapExited(
    slots: []Slot,
    reports: []Worker.Report,
    report: *Server.Report,
    stopping: bool,
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
        if (status) |s| if (linux.W.IFEXITED(s) and linux.W.EXITSTATUS(s) == 0) {
            report.workers.add(reports[i]);
            reports[i] = .{};
        };
        const delay_ns = if (stopping) null else scheduleRestart(slot, now_ns, ran_ns, report);
        logExit(i, pid, status, ran_ns, delay_ns);
    }
    return live;
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
    reports: []Worker.Report,
    report: *Server.Report,
) void {
    const now_ns = os.monotonicNs();
    for (slots, 0..) |*slot, i| {
        if (slot.pid != 0 or slot.restart_at_ns > now_ns) continue;
        start(server, slot, @intCast(i), handler, serve, mask_before, reports) catch {
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
/// when the service is stopping.
fn logExit(
    index: usize,
    pid: linux.pid_t,
    status: ?u32,
    ran_ns: u64,
    restart_delay_ns: ?u64,
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
    const format = "worker {d} (pid {d}) {s} after {d} ms; {s}";
    const args = .{ index, pid, how, ran_ns / std.time.ns_per_ms, next };
    if (clean) log.info(format, args) else log.warn(format, args);
}

/// "exited with status 0", "killed by signal SIGSEGV (11), core dumped", ...
fn describeStatus(buffer: []u8, status: ?u32) []const u8 {
    const s = status orelse return "exited (status lost: reaped elsewhere)";
    if (linux.W.IFEXITED(s)) {
        return std.fmt.bufPrint(buffer, "exited with status {d}", .{linux.W.EXITSTATUS(s)}) catch
            unreachable; // 64 bytes hold it
    }
    if (linux.W.IFSIGNALED(s)) {
        const sig = linux.W.TERMSIG(s);
        const name = std.enums.tagName(linux.SIG, sig) orelse "?";
        const core_dumped = s & 0x80 != 0; // WCOREDUMP
        return std.fmt.bufPrint(buffer, "killed by signal SIG{s} ({d}){s}", .{
            name, @intFromEnum(sig), if (core_dumped) ", core dumped" else "",
        }) catch unreachable; // 64 bytes hold it
    }
    return "ended"; // stopped or continued: not reported without WUNTRACED/WCONTINUED
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

fn mapReports(workers: u32) error{OutOfMemory}![]Worker.Report {
    const len = workers * @sizeOf(Worker.Report);
    const rc = linux.mmap(null, len, .{ .READ = true, .WRITE = true }, .{
        .TYPE = .SHARED,
        .ANONYMOUS = true,
    }, -1, 0);
    if (os.errno(rc) != .SUCCESS) return error.OutOfMemory;
    const reports: [*]Worker.Report = @ptrFromInt(rc);
    @memset(reports[0..workers], .{});
    return reports[0..workers];
}

fn start(
    server: *Server,
    slot: *Slot,
    index: u32,
    handler: Server.Handler,
    serve: Serve,
    mask_before: *const linux.sigset_t,
    reports: []Worker.Report,
) error{WorkerStartFailed}!void {
    assert(slot.pid == 0);
    const supervisor_pid = linux.getpid();
    const rc = linux.fork();
    if (os.errno(rc) != .SUCCESS) return error.WorkerStartFailed;
    if (rc == 0) workerMain(server, index, handler, serve, mask_before, supervisor_pid, reports);
    slot.pid = @intCast(rc);
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
    reports: []Worker.Report,
) noreturn {
    // A supervisor killed outright must not leave its workers serving: they get SIGTERM,
    // whose handler stops the worker like any SIGTERM.
    _ = linux.prctl(@intFromEnum(linux.PR.SET_PDEATHSIG), @intFromEnum(linux.SIG.TERM), 0, 0, 0);
    // Blocking (see `Worker.awaitSignalled`); close-on-exec like every fd weft opens.
    const fd_rc = linux.eventfd(0, linux.EFD.CLOEXEC);
    if (os.errno(fd_rc) != .SUCCESS) {
        log.err("worker {d}: no eventfd: {t}", .{ index, os.errno(fd_rc) });
        linux.exit_group(1);
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
        server, index, handler, serve, stop_fd, &reports[index],
    }) catch |err| {
        log.err("worker {d}: no thread: {t}", .{ index, err });
        linux.exit_group(1);
    };
    thread.join();
    linux.exit_group(0);
}

/// The worker's serving thread: its runtime's first executor. Exits the process with status 1
/// if the runtime cannot start; otherwise writes the worker's report for the supervisor.
fn serveWorker(
    server: *Server,
    index: u32,
    handler: Server.Handler,
    serve: Serve,
    stop_fd: linux.fd_t,
    report: *Worker.Report,
) void {
    log.info("worker {d} (pid {d}) serves on thread {d}", .{
        index, linux.getpid(), linux.gettid(),
    });
    report.* = serve(server, 0, handler, stop_fd) catch |err| {
        log.err("worker {d}: {t}", .{ index, err });
        linux.exit_group(1);
    };
}
