//! The CPU lane: computation (hashing, compression, parsing a large document, image work) on
//! a pool of about one thread per CPU, apart from the executors, so that a 6 ms job inside a
//! request handler neither stalls the executor's other connections nor waits behind them.
//!
//! ```
//! const digest = try rt.compute(io, sha256, .{body}); // the runtime's own CPU lane
//! ```
//!
//! **Rule of thumb.** I/O on the executors (sockets, files, timers: they park, never block);
//! blocking syscalls and C calls that block on a `weft.Lane`; computation that takes more
//! than about 100 µs on the CPU lane. A fiber that computes on an executor holds every other
//! fiber of that executor for as long as it computes (weft's scheduling is cooperative).
//!
//! `CpuLane` is a `weft.Lane` with presets, started on first use:
//! - `threads`: the CPUs this process may use (`cpusAvailable`: the affinity mask, capped by
//!   a cgroup CPU quota), unless set;
//! - admission `.wait`: a burst of jobs queues its callers in a FIFO line (`waiters_max`)
//!   instead of failing, which is what computation wants (backpressure, not errors);
//! - no polling: idle workers park at once and callers park at once (`idle_spin_ns` and
//!   `caller_spin_ns` 0), since a job takes milliseconds and a poll would only take CPU from
//!   the executors;
//! - `nice`: the workers' OS priority is lowered by this much (default
//!   `config.cpu_lane_nice_default`), so when the executors and the lane want the same CPU,
//!   the executors win and I/O stays responsive; alone, the lane still uses every CPU.
//! - `slice_ns`: the workers' time slice in the kernel's scheduler (default
//!   `config.cpu_lane_slice_ns_default`, 100 µs). A lower priority alone does not make the
//!   kernel hand the CPU to a woken executor at once: under EEVDF (Linux 6.6 on) a running
//!   thread keeps the CPU until its slice runs out (1.4 ms by default on this 2-CPU machine).
//!   With a 100 µs slice an executor woken by I/O while every core computes gets a core within
//!   about 0.1 ms; the lane keeps its share of the CPU. Measured (bench/cpu_isolation.sh, 2
//!   cores): `/light` p99 1.1-1.4 ms with it, 1.9-2.9 ms without. Kernels before 6.12 ignore
//!   it. The rejected alternative, `SCHED_IDLE` workers, gave `/light` p99 0.3-0.7 ms but
//!   slowed `/heavy` to 1.14-1.17× its direct time (the lane then runs only when nothing else
//!   wants the CPU).
//!
//! The contract is `Lane.run`'s: the job's own error set is kept and the lane's added, a job
//! canceled before acceptance never runs, and once accepted it runs to completion while its
//! caller waits (it borrows the caller's memory). Starting the threads can fail (a thread
//! limit, memory): that call returns `error.ConcurrencyUnavailable` and a later call retries.
//!
//! A CPU lane of the user's own (`CpuLane.init`) given `Options.name` is reported by
//! `weft.Metrics` as a named `weft.Lane` is, from `init` on (zeros until its first call).
//!
//! Thread-safety: `run`, `runTimeout` from any fiber or thread at once; `shutdown` once;
//! `deinit` once, after every `run` returned.
const CpuLane = @This();

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const Io = std.Io;
const config = @import("../config.zig");
const atomic = @import("../os/atomic.zig");
// Through the shim, so that the interleaving checker schedules them (see the scenario).
const Lock = atomic.Mutex;
const os = @import("../os/host.zig");
// cgroups' files: read on Linux only (`cgroupCpuLimit`).
const linux = @import("../os/linux.zig");
const Lane = @import("Lane.zig");
const named = @import("named.zig");

gpa: std.mem.Allocator,
options: Options,
/// Set once, under `start_lock`, by the first call (release; read with acquire).
lane: atomic.Value(?*Lane) = .init(null),
start_lock: Lock = .{},
/// `shutdown` ran: a lane not started by then never starts.
closed: bool = false,
/// `Options.name`; empty when unnamed.
name: named.Name = .{},
/// Its place in the process's list of named lanes (`named.zig`), which it leaves in `deinit`;
/// null when unnamed.
listed: ?u32 = null,

pub const Options = @import("../options.zig").CpuLane;

pub const InitError = error{
    /// `Options.name` is empty, or off Linux `nice` or `slice_ns` is set.
    InvalidOptions,
} || named.ClaimError;

/// The lane's errors, and `ConcurrencyUnavailable` when its threads could not be started.
pub const Error = Lane.Error || error{ConcurrencyUnavailable};

/// `f`'s return type with `Error` added; its own error set is kept.
pub fn Result(comptime function: anytype) type {
    return Lane.ResultWith(function, Error);
}

/// A lane that starts its threads on first use. Never spawns; fails only on its name (an
/// unnamed lane never fails on Linux), which it takes here, so that a name in use is refused at
/// once; off Linux also on a `nice` or `slice_ns`, which only Linux sets per thread.
pub fn init(gpa: std.mem.Allocator, options: Options) InitError!CpuLane {
    if (!os.thread_tuning_supported and (options.nice != 0 or options.slice_ns != null)) {
        return error.InvalidOptions;
    }
    var cpu: CpuLane = .{ .gpa = gpa, .options = options };
    // The lane keeps its own copy: the caller's bytes may go.
    cpu.options.name = null;
    const text = options.name orelse return cpu;
    if (text.len == 0) return error.InvalidOptions;
    cpu.name = .init(text);
    const place = try named.claim(&cpu.name);
    named.listUnstarted(place);
    cpu.listed = place;
    assert(cpu.name.len > 0);
    return cpu;
}

/// Stops the lane if it started (accepted jobs run first) and joins its threads. Every `run`
/// must have returned.
pub fn deinit(cpu: *CpuLane, io: Io) void {
    // First: once off the list no snapshot reads the lane, which is about to be freed.
    if (cpu.listed) |place| named.release(place);
    if (cpu.lane.load(.acquire)) |lane| lane.deinit(io);
    cpu.* = undefined;
}

/// Runs `function(args...)` on a CPU lane thread and returns its result; the caller parks
/// meanwhile. See `Lane.runTimeout` for cancelation and the deadline (which bounds the wait
/// for acceptance only).
pub fn run(
    cpu: *CpuLane,
    io: Io,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Result(function) {
    return cpu.runTimeout(io, .none, function, args);
}

/// `run` giving up with `error.DeadlineExceeded` if the job is not accepted by `timeout`.
pub fn runTimeout(
    cpu: *CpuLane,
    io: Io,
    timeout: Io.Timeout,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Result(function) {
    const lane = try cpu.started();
    var call: Lane.Call(function) = .init(io, args);
    try lane.execute(io, &call.job, timeout.toTimestamp(io));
    return call.result;
}

/// The started lane, starting it on the first call.
fn started(cpu: *CpuLane) error{ ConcurrencyUnavailable, ShutdownInProgress }!*Lane {
    // Acquire: pairs with the release store below, so the lane's fields are visible.
    if (cpu.lane.load(.acquire)) |lane| return lane;
    cpu.start_lock.lock();
    defer cpu.start_lock.unlock();
    if (cpu.lane.load(.acquire)) |lane| return lane;
    if (cpu.closed) return error.ShutdownInProgress;
    // Metered under its name, or the one the runtime's `weft.Metrics` reports its CPU lane by
    // (an unnamed CPU lane of the user's own is timed too, and not reported: its jobs take
    // milliseconds).
    const options = cpu.laneOptions();
    const name = if (cpu.listed != null) cpu.name.slice() else named.cpu_name;
    const lane = Lane.initOwned(cpu.gpa, options, name) catch |err| switch (err) {
        error.InvalidOptions => unreachable, // `laneOptions` clamps them
        else => return error.ConcurrencyUnavailable, // memory or a thread limit
    };
    // Listed from now on in its place, where it was reported with zeros until now.
    if (cpu.listed) |place| named.publish(place, .{ .lane = lane });
    cpu.lane.store(lane, .release);
    return lane;
}

comptime {
    if (config.cpu_lane_slice_ns_default) |slice_ns| {
        assert(slice_ns >= os.thread_slice_ns_min and slice_ns <= os.thread_slice_ns_max);
    }
}

fn laneOptions(cpu: *const CpuLane) Lane.Options {
    const threads_wanted = cpu.options.threads orelse cpusAvailable();
    const options: Lane.Options = .{
        .threads = @max(1, @min(threads_wanted, config.lane_threads_max)),
        .queue_limit = @max(1, cpu.options.queue_limit),
        .admission = .wait,
        .waiters_max = @max(1, cpu.options.waiters_max),
        .idle_spin_ns = 0,
        .caller_spin_ns = 0,
        .stack_size_bytes = cpu.options.stack_size_bytes,
        .nice = @min(cpu.options.nice, config.nice_max),
        .slice_ns = if (cpu.options.slice_ns) |slice_ns|
            std.math.clamp(slice_ns, os.thread_slice_ns_min, os.thread_slice_ns_max)
        else
            null,
    };
    assert(options.threads > 0 and options.threads <= config.lane_threads_max);
    assert(options.queue_limit > 0 and options.waiters_max > 0);
    return options;
}

/// `Lane.shutdown` of the lane if it started; afterwards `run` fails with
/// `error.ShutdownInProgress`. Call once.
pub fn shutdown(cpu: *CpuLane, io: Io, options: Lane.ShutdownOptions) Lane.Report {
    cpu.start_lock.lock();
    assert(!cpu.closed);
    cpu.closed = true;
    const lane = cpu.lane.load(.acquire);
    cpu.start_lock.unlock();
    if (lane) |started_lane| return started_lane.shutdown(io, options);
    return .{ .jobs_run = 0, .jobs_failed = 0, .waiters_failed = 0, .jobs_left = 0 };
}

/// The lane's counters (zero before it started).
pub fn stats(cpu: *CpuLane) Lane.Stats {
    const lane = cpu.lane.load(.acquire) orelse return .{};
    return lane.stats();
}

/// What `weft.Metrics` reports of the lane (zeros before it started).
pub fn figures(cpu: *CpuLane) Lane.Figures {
    const lane = cpu.lane.load(.acquire) orelse return .{};
    return lane.figures();
}

/// Worker threads the lane has, or would start with.
pub fn threads(cpu: *const CpuLane) u32 {
    return cpu.laneOptions().threads;
}

/// CPUs this process may use: the CPUs of its affinity mask (`taskset`, cpusets), capped by
/// its cgroup's CPU quota rounded up (`docker --cpus`, a Kubernetes CPU limit). At least 1.
pub fn cpusAvailable() u32 {
    const affinity: u32 = @intCast(std.Thread.getCpuCount() catch 1);
    const quota = cgroupCpuLimit() orelse return @max(1, affinity);
    return @max(1, @min(affinity, quota));
}

/// The CPU quota of this process's cgroup, in whole CPUs rounded up; null when unlimited or
/// unknown. Reads cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us`, at the
/// usual mount points (under `/sys/fs/cgroup`), at the process's own cgroup path and at the
/// mount's root (what a container with its own cgroup namespace sees).
fn cgroupCpuLimit() ?u32 {
    if (builtin.os.tag != .linux) return null; // cgroups are Linux's
    var membership_buffer: [4096]u8 = undefined;
    const membership = linux.readFile("/proc/self/cgroup", &membership_buffer) orelse return null;
    var lines = std.mem.tokenizeScalar(u8, membership, '\n');
    while (lines.next()) |line| {
        // hierarchy-id:controllers:path
        var fields = std.mem.splitScalar(u8, line, ':');
        const hierarchy = fields.next() orelse continue;
        const controllers = fields.next() orelse continue;
        const path = fields.rest();
        if (std.mem.eql(u8, hierarchy, "0") and controllers.len == 0) {
            if (limitV2(path)) |limit| return limit;
        } else if (hasController(controllers, "cpu")) {
            if (limitV1(path)) |limit| return limit;
        }
    }
    return null;
}

fn hasController(controllers: []const u8, name: []const u8) bool {
    var names = std.mem.splitScalar(u8, controllers, ',');
    while (names.next()) |controller| if (std.mem.eql(u8, controller, name)) return true;
    return false;
}

fn limitV2(path: []const u8) ?u32 {
    for ([_][]const u8{ path, "" }) |prefix| {
        var text_buffer: [128]u8 = undefined;
        const text = readCgroupFile("/sys/fs/cgroup", prefix, "cpu.max", &text_buffer) orelse
            continue;
        return parseCpuMax(text);
    }
    return null;
}

fn limitV1(path: []const u8) ?u32 {
    for ([_][]const u8{ "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct" }) |mount| {
        for ([_][]const u8{ path, "" }) |prefix| {
            var quota_buffer: [64]u8 = undefined;
            var period_buffer: [64]u8 = undefined;
            const quota = readCgroupFile(mount, prefix, "cpu.cfs_quota_us", &quota_buffer) orelse
                continue;
            const period = readCgroupFile(mount, prefix, "cpu.cfs_period_us", &period_buffer) orelse
                continue;
            return parseQuota(quota, period);
        }
    }
    return null;
}

fn readCgroupFile(mount: []const u8, path: []const u8, name: []const u8, buffer: []u8) ?[]u8 {
    var path_buffer: [std.fs.max_path_bytes]u8 = undefined;
    const trimmed = std.mem.trimEnd(u8, path, "/");
    const full = std.fmt.bufPrintZ(&path_buffer, "{s}{s}/{s}", .{ mount, trimmed, name }) catch
        return null;
    return linux.readFile(full, buffer);
}

/// cgroup v2 `cpu.max`: "max 100000" (no limit) or "<quota> <period>".
fn parseCpuMax(text: []const u8) ?u32 {
    var fields = std.mem.tokenizeAny(u8, text, " \n");
    const quota = fields.next() orelse return null;
    const period = fields.next() orelse return null;
    if (std.mem.eql(u8, quota, "max")) return null;
    return parseQuota(quota, period);
}

/// A CFS quota and period in microseconds, as whole CPUs rounded up; null when unlimited
/// (a negative quota) or unreadable.
fn parseQuota(quota_text: []const u8, period_text: []const u8) ?u32 {
    const quota = std.fmt.parseInt(i64, std.mem.trim(u8, quota_text, " \n"), 10) catch
        return null;
    const period = std.fmt.parseInt(i64, std.mem.trim(u8, period_text, " \n"), 10) catch
        return null;
    if (quota <= 0 or period <= 0) return null;
    const cpus = std.math.divCeil(i64, quota, period) catch return null;
    return @intCast(@min(cpus, std.math.maxInt(u32)));
}

test "CpuLane: cgroup quotas are whole CPUs rounded up; unlimited is null" {
    try std.testing.expectEqual(@as(?u32, null), parseCpuMax("max 100000\n"));
    try std.testing.expectEqual(@as(?u32, 2), parseCpuMax("200000 100000\n"));
    try std.testing.expectEqual(@as(?u32, 2), parseCpuMax("150000 100000"));
    try std.testing.expectEqual(@as(?u32, 1), parseCpuMax("50000 100000"));
    try std.testing.expectEqual(@as(?u32, null), parseQuota("-1\n", "100000\n"));
    try std.testing.expectEqual(@as(?u32, 3), parseQuota("250000\n", "100000\n"));
    try std.testing.expectEqual(@as(?u32, null), parseQuota("garbage", "100000"));
    try std.testing.expect(hasController("cpu,cpuacct", "cpu"));
    try std.testing.expect(!hasController("cpuacct,cpuset", "cpu"));
}

test "CpuLane: cpusAvailable is within the affinity mask" {
    const available = cpusAvailable();
    try std.testing.expect(available >= 1);
    try std.testing.expect(available <= try std.Thread.getCpuCount());
}

const Checker = @import("../testing/InterleavingChecker.zig");

test "interleave: CpuLane callers and parking workers, 1000 seeds: each job once, cancels once" {
    CpuScenario.workers_woken_total = 0;
    try Checker.checkSeeds(CpuScenario);
    // With no poller, every job that finds the queue empty wakes a parked worker.
    try std.testing.expect(CpuScenario.workers_woken_total > 0);
}

/// Four callers run two jobs each through a `CpuLane` whose lane, of two workers, is built by
/// hand from the CPU lane's own presets (`laneOptions`: admission `.wait`, no polling on
/// either side) with a queue of one, and published as `started` would: the workers are logical
/// threads of the interleaving checker running the lane's worker loop, which park at once when
/// the queue is empty and are woken by each job that finds it so. Callers wait in the
/// admission line and for their jobs, with cancels, timeouts and spurious wakes at random; the
/// last one shuts the CPU lane down. A caller canceled after its job was accepted waits for
/// it, returns its result and re-arms the request (the checker fails a request dropped or
/// delivered twice); a job whose worker was never woken leaves its caller waiting forever.
const CpuScenario = struct {
    cpu: CpuLane,
    lane: Lane = undefined,
    workers: [workers_count]Lane.by_hand.LaneWorker = undefined,
    prng: std.Random.DefaultPrng,
    callers_left: atomic.Value(u32) = .init(callers),
    /// Per caller: jobs run, and calls that returned the job's result.
    ran: [callers]u32 = @splat(0),
    succeeded: [callers]u32 = @splat(0),
    report: ?Lane.Report = null,

    const callers = 4;
    const jobs = 2;
    const workers_count = 2;
    pub const rearming_threads = [_]usize{ 0, 1, 2, 3 };
    /// `Stats.workers_woken` summed over the seeds of a test.
    var workers_woken_total: u64 = 0;

    pub fn init(seed: u64) CpuScenario {
        return .{
            .cpu = .{
                .gpa = std.testing.allocator,
                .options = .{
                    .threads = workers_count,
                    .queue_limit = 1,
                    .waiters_max = callers,
                    // The checker's logical threads are the test's own OS thread: keep its
                    // priority and time slice.
                    .nice = 0,
                    .slice_ns = null,
                },
            },
            .prng = .init(seed ^ 0xc9a1),
        };
    }

    /// Builds the lane and publishes it, now that the scenario no longer moves.
    pub fn bodies(scenario: *CpuScenario) [callers + workers_count]Checker.Body {
        const cpu = &scenario.cpu;
        // Unused: nothing to allocate without threads.
        scenario.lane = .{ .gpa = cpu.gpa, .options = cpu.laneOptions(), .workers = &.{} };
        assert(scenario.lane.options.idle_spin_ns == 0 and scenario.lane.options.nice == 0);
        Lane.by_hand.wire(&scenario.lane, &scenario.workers);
        cpu.lane.store(&scenario.lane, .release);
        return .{
            Checker.bodyAt(call, scenario, 0),
            Checker.bodyAt(call, scenario, 1),
            Checker.bodyAt(call, scenario, 2),
            Checker.bodyAt(call, scenario, 3),
            Checker.bodyOf(worker0, scenario),
            Checker.bodyOf(worker1, scenario),
        };
    }

    fn work(scenario: *CpuScenario, caller: usize) void {
        scenario.ran[caller] += 1;
    }

    fn call(scenario: *CpuScenario, io: Io, index: usize) void {
        while (scenario.succeeded[index] < jobs) {
            const deadline = Checker.maybeDeadline(io, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            scenario.cpu.runTimeout(io, timeout, work, .{ scenario, index }) catch |err|
                switch (err) {
                    error.Canceled, error.DeadlineExceeded => {
                        Checker.noteError(io, err);
                        continue; // the job never ran
                    },
                    // The line holds every caller, the lane is started, shutdown comes last.
                    error.QueueFull,
                    error.Overloaded,
                    error.ConcurrencyUnavailable,
                    error.ShutdownInProgress,
                    => unreachable,
                };
            scenario.succeeded[index] += 1;
            Checker.cancelationPoint(io);
        }
        if (scenario.callers_left.fetchSub(1, .acq_rel) == 1) {
            scenario.report = scenario.cpu.shutdown(io, .{});
        }
    }

    fn worker0(scenario: *CpuScenario, io: Io) void {
        _ = io; // a worker has no `Io`
        Lane.by_hand.run(&scenario.workers[0]);
    }

    fn worker1(scenario: *CpuScenario, io: Io) void {
        _ = io;
        Lane.by_hand.run(&scenario.workers[1]);
    }

    pub fn check(scenario: *CpuScenario) !void {
        for (scenario.ran, scenario.succeeded) |ran, succeeded| {
            try std.testing.expectEqual(@as(u32, jobs), succeeded);
            try std.testing.expectEqual(succeeded, ran);
        }
        const report = scenario.report.?;
        try std.testing.expectEqual(@as(u64, callers * jobs), report.jobs_run);
        try std.testing.expectEqual(@as(u64, 0), report.jobs_left);
        try std.testing.expect(scenario.cpu.closed);
        const counts = scenario.cpu.stats();
        try std.testing.expectEqual(@as(u64, callers * jobs), counts.jobs_run);
        workers_woken_total += counts.workers_woken;
    }
};
