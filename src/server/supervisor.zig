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
//! States of a worker slot: `running` (pid > 0) → `exited` (reaped) → `running` again
//! (restarted, unless the server is stopping; a worker that dies within
//! `restart_delay_ns` of its start waits out the rest of it, so a crash loop forks once a
//! second, not in a spin).
//!
//! Stopping (SIGINT/SIGTERM to the supervisor, `Server.stop`, or a worker that exited by
//! itself, which only happens when the shared listener was shut down, e.g. by a SIGTERM sent
//! to that worker): the supervisor shuts the listener down (every worker's accept ends),
//! forwards SIGTERM, waits until `drain_timeout_ns` plus `kill_grace_ns` for the workers to
//! drain and exit, SIGKILLs the rest, reaps every child, and returns: no zombie is left.
const std = @import("std");
const linux = std.os.linux;
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const Server = @import("Server.zig");
const Worker = @import("Worker.zig");

const tick_ns = 100 * std.time.ns_per_ms;
const restart_delay_ns = std.time.ns_per_s;
/// Beyond the drain timeout, for a worker to write its report and exit.
const kill_grace_ns = std.time.ns_per_s;

const Slot = struct {
    pid: linux.pid_t = 0,
    started_ns: u64 = 0,
    /// When a dead worker may be started again; 0 when it runs.
    restart_at_ns: u64 = 0,
};

/// Forks the workers and supervises them; returns when they have all exited after a stop.
pub fn run(server: *Server, handler: Server.Handler) Server.RunError!Server.Report {
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

    var slots: [@import("../config.zig").server_workers_max]Slot = @splat(.{});
    var report: Server.Report = .{};
    for (slots[0..workers], 0..) |*slot, i| {
        try start(server, slot, @intCast(i), handler, &mask_before, reports);
    }
    var stop_deadline_ns: ?u64 = null;
    var killed = false;
    // Bounded: once stopping, every child is SIGKILLed at the deadline and then reaped.
    while (true) {
        const sig = waitSignal(&waited);
        const stop_asked = sig == .INT or sig == .TERM or server.stopping.load(.acquire);
        var exited_cleanly = false;
        var live: u32 = 0;
        for (slots[0..workers], 0..) |*slot, i| {
            if (slot.pid == 0) continue;
            var status: u32 = 0;
            const rc = linux.waitpid(slot.pid, &status, linux.W.NOHANG);
            if (os.errno(rc) != .SUCCESS or rc == 0) {
                live += 1;
                continue;
            }
            slot.pid = 0;
            if (linux.W.IFEXITED(status) and linux.W.EXITSTATUS(status) == 0) {
                exited_cleanly = true;
                report.workers.add(reports[i]);
                reports[i] = .{};
            }
            const now_ns = os.monotonicNs();
            slot.restart_at_ns = @max(now_ns, slot.started_ns + restart_delay_ns);
        }
        if (stop_deadline_ns == null and (stop_asked or exited_cleanly)) {
            stop_deadline_ns = beginStop(server, slots[0..workers]);
        }
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
        const now_ns = os.monotonicNs();
        for (slots[0..workers], 0..) |*slot, i| {
            if (slot.pid != 0 or slot.restart_at_ns > now_ns) continue;
            try start(server, slot, @intCast(i), handler, &mask_before, reports);
            report.workers_restarted += 1;
        }
    }
    for (slots[0..workers]) |slot| assert(slot.pid == 0);
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

/// The next of the `waited` signals, or null after a tick.
fn waitSignal(waited: *const linux.sigset_t) ?linux.SIG {
    const timeout = os.timespecFromNs(tick_ns);
    const rc = linux.syscall4(
        .rt_sigtimedwait,
        @intFromPtr(waited),
        0,
        @intFromPtr(&timeout),
        linux.NSIG / 8,
    );
    return switch (os.errno(rc)) {
        .SUCCESS => @enumFromInt(rc),
        .AGAIN, .INTR => null, // the tick passed, or another signal interrupted
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
    mask_before: *const linux.sigset_t,
    reports: []Worker.Report,
) error{WorkerStartFailed}!void {
    assert(slot.pid == 0);
    const supervisor_pid = linux.getpid();
    const rc = linux.fork();
    if (os.errno(rc) != .SUCCESS) return error.WorkerStartFailed;
    if (rc == 0) workerMain(server, index, handler, mask_before, supervisor_pid, reports);
    slot.* = .{ .pid = @intCast(rc), .started_ns = os.monotonicNs() };
}

/// A worker process: its own runtime over the shared listener. Never returns.
fn workerMain(
    server: *Server,
    index: u32,
    handler: Server.Handler,
    mask_before: *const linux.sigset_t,
    supervisor_pid: linux.pid_t,
    reports: []Worker.Report,
) noreturn {
    // A supervisor killed outright must not leave its workers serving: they get SIGTERM,
    // whose handler shuts the listener down like a normal stop.
    _ = linux.prctl(@intFromEnum(linux.PR.SET_PDEATHSIG), @intFromEnum(linux.SIG.TERM), 0, 0, 0);
    var signals: Server.Signals = .{};
    signals.install(server);
    // A SIGTERM forwarded before this point is pending; it is delivered here, to the handler.
    assert(linux.sigprocmask(linux.SIG.SETMASK, mask_before, null) == 0);
    if (linux.getppid() != supervisor_pid) server.stop(); // it died before the prctl
    const worker_report = server.serveOn(0, handler) catch |err| {
        std.log.scoped(.weft_server).err("worker process {d}: {t}", .{ index, err });
        linux.exit_group(1);
    };
    reports[index] = worker_report;
    linux.exit_group(0);
}
