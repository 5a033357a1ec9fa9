//! The runtime's watchdog: one thread that looks at every executor a few times per stall
//! threshold. It reports a task that holds an executor too long (the stall detector) and
//! prints the schedule trace (`WEFT_TRACE=sched:MS`). `Runtime.init` starts it only when
//! either is on; with both off there is no thread.
//!
//! ## Stalls
//!
//! A task that computes on an executor instead of on `rt.compute` or a `Lane` holds every
//! other task of that executor: their I/O completions and timers wait until it gives the
//! executor back. Each executor publishes `activity`, a word odd while a task runs and changed
//! whenever a run begins after the running code went back to the scheduler
//! (`Executor.beginRun`): a load and a relaxed store per switch, no clock read on the switch
//! path. The watchdog remembers when it first
//! saw each value; an odd value unchanged for `stall_threshold_ns` is a stall. Durations are
//! therefore measured by the watchdog, to within one look (`look_ns`): a stall is reported no
//! later than a quarter of the threshold after it crossed it.
//!
//! Each stall is reported once through `std.log` (scope `.weft`, level warn) when found, with
//! the stack of the stalling code, and once more when it ends, with its length (the executor
//! stamps the end at its first poll after the stall, once told a stall runs:
//! `Executor.stalled_activity`). The stack is taken
//! while the code still runs: the watchdog sends the executor's thread `SIGURG` (what Go's
//! preemption uses: ignored by default, so a stray one harms nothing), whose handler follows
//! the frame pointers from the interrupted registers (fiber/frames.zig: the stack copied with
//! `process_vm_readv`, so an unreadable address is an error, not a fault), and records the return
//! addresses; the watchdog's reporter thread names them and logs the report, so that the
//! watchdog goes on looking while the debug information loads (Reporter.zig). The handler
//! takes no lock and never waits. (Rejected: freezing the thread in the handler while the watchdog
//! unwinds its stack with std's DWARF unwinder. It gives deeper traces through frame-pointer-
//! less code such as the vDSO, but the unwinder takes std.debug's lock, which the frozen
//! thread may hold, in a panic or in the testing allocator's stack capture: a deadlock, seen
//! in the overflow tests' children.) A SIGURG weft did not ask for goes to the handler the
//! program had, if any. Not under ThreadSanitizer, which defers signals to points of its own
//! choosing: the report comes without a stack there; nor in ReleaseFast and ReleaseSmall, which
//! keep no frame pointers.
const Watchdog = @This();

const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const Mutex = @import("../os/Mutex.zig");
const Histogram = @import("../os/Histogram.zig");
const os_thread = @import("../os/thread.zig");
const Executor = @import("Executor.zig");
const Reporter = @import("Reporter.zig");
const Scheduler = @import("Scheduler.zig");
const Task = @import("Task.zig");
const frames = @import("../fiber/frames.zig");
const LiveTasks = @import("LiveTasks.zig");
const RunDelay = @import("../contention/RunDelay.zig");
const io_wait = @import("io_wait.zig");

const log = std.log.scoped(.weft);

pub const Options = struct {
    /// Report a task that runs this long on an executor without going back to the scheduler;
    /// null: no stall detector.
    stall_threshold_ns: ?u64,
    /// Print the schedule trace this often; null: no trace.
    trace_interval_ns: ?u64,
    /// Where the trace writes the lanes' queue depths (the lanes live above the scheduler).
    trace_lanes: ?LanesHook = null,
};

/// Writes the lanes' part of a trace line, such as ` lanes: blocking=0 cpu=3`.
pub const LanesHook = struct {
    context: *anyopaque,
    write: *const fn (context: *anyopaque, writer: *std.Io.Writer) std.Io.Writer.Error!void,
};

/// The value of `WEFT_TRACE`: `sched:MS`, the schedule trace's interval in milliseconds (1 ms
/// to an hour); empty means no trace. Anything else is refused.
pub fn parseTrace(value: []const u8) error{InvalidOptions}!?u64 {
    const prefix = "sched:";
    if (value.len == 0) return null;
    if (!std.mem.startsWith(u8, value, prefix)) return error.InvalidOptions;
    const ms = std.fmt.parseInt(u32, value[prefix.len..], 10) catch return error.InvalidOptions;
    if (ms < 1 or ms > std.time.ms_per_hour) return error.InvalidOptions;
    return @as(u64, ms) * std.time.ns_per_ms;
}

test "Watchdog: WEFT_TRACE values" {
    try std.testing.expectEqual(@as(?u64, 250 * std.time.ns_per_ms), try parseTrace("sched:250"));
    try std.testing.expectEqual(@as(?u64, null), try parseTrace(""));
    const bad_values = [_][]const u8{
        "sched:", "sched:0", "sched:-5", "sched:x", "gc:10", "sched:3600001",
    };
    for (bad_values) |bad| try std.testing.expectError(error.InvalidOptions, parseTrace(bad));
}

pub const stall_threshold_ns_min = config.stall_threshold_ns_min;
/// A trace interval below this is refused, for the same reason.
pub const trace_interval_ns_min = std.time.ns_per_ms;

scheduler: *Scheduler,
options: Options,
thread: ?std.Thread = null,
/// Nonzero once `stop` was called; the thread sleeps on it between looks.
stopping: std.atomic.Value(u32) = .init(0),
/// What the watchdog last saw of each executor, the spare last (its thread only).
seen: [watched_max]Seen = @splat(.{}),
/// Until then the watchdog looks every `config.held_look_ns` and counts a run as a hold once
/// it lasted that long (`holdMinNs`): set while any executor is held, and for
/// `config.held_linger_ns` after. Its thread only.
held_until_ns: u64 = 0,
/// Where the tasks of a held spare's ring go on their way to the global queue (`moveRing`).
ring_buffer: [config.run_queue_len / 2]*Task = undefined,
/// Stalls found since `Runtime.init`; written by the watchdog's thread only. Not a `Counter`:
/// off every hot path, it counts with `-Dmetrics=false` too.
stalls: std.atomic.Value(u64) = .init(0),
/// How long each stall lasted, recorded when it ends; the watchdog's thread is its writer.
stall_time: Histogram = .{},
/// Timers the watchdog fired for executors held by one task (`fireTimersOfHeld`); their
/// executors' own `timers_fired` does not count them. Each is counted before its task is
/// woken, as every count here is before the task it concerns may run: a task that reads a
/// snapshot once it runs sees itself counted. (I/O completions delivered for held executors
/// are counted where they are claimed: `Scheduler.io_rescued`.)
timers_fired: std.atomic.Value(u64) = .init(0),
/// Per executor, the longest run of one task seen (`Metrics.Executor.held_max_ns`); written
/// by the watchdog's thread only.
held_max_ns: [watched_max]std.atomic.Value(u64) = @splat(.init(0)),
/// Tasks the watchdog moved off executors held by one task (`handOverHeld`): a LIFO slot's
/// task, or the main task.
handed_over: std.atomic.Value(u64) = .init(0),
/// The trace's previous figures, for its deltas (the watchdog's thread only).
trace_last: [config.executors_max]TraceFigures = @splat(.{}),
trace_last_ns: u64 = 0,
/// Each executor thread's `/proc/self/task/TID/schedstat`, or null where it cannot be read:
/// opened by `start`, closed by `stop`.
schedstat_fds: [watched_max]?os.fd_t = @splat(null),
/// Names the stacks of the reports and logs them, on a thread of its own (Reporter.zig).
reporter: Reporter = .{},

/// Executors the watchdog may look at: every executor, and the spare.
const watched_max = config.executors_max + 1;

const Seen = struct {
    activity: u64 = 0,
    since_ns: u64 = 0,
    /// Set once the run that began at `since_ns` was reported as a stall.
    reported: bool = false,
    task_address: usize = 0,
    /// The task's id (sched/LiveTasks.zig), 0 when it could not be told.
    task_id: u64 = 0,
    /// The executor thread's run delay (time spent runnable, waiting for a CPU) at
    /// `since_ns`, or null if its schedstat cannot be read.
    run_delay_ns: ?u64 = null,
};

/// What the signal handler and the watchdog share, per executor.
pub const Sample = struct {
    /// `idle` -> `requested` (watchdog) -> `taken` (handler) -> `idle` (watchdog).
    state: std.atomic.Value(u32) = .init(idle),
    /// The interrupted program counter, then the return addresses of the frames above it.
    addresses: [frames_max]usize = undefined,
    addresses_len: usize = 0,
    /// Whether the walk reached the outermost frame.
    complete: bool = false,
    task: ?*Task = null,
    /// `Executor.activity` when the handler ran: still the stall's, or it ended meanwhile.
    activity: u64 = 0,

    const idle = 0;
    const requested = 1;
    const taken = 2;
};

/// Frames kept of a stalling stack.
const frames_max = Reporter.frames_max;
/// How long the watchdog waits for a thread to take its sampling signal.
const sample_wait_ns = 100 * std.time.ns_per_ms;

pub fn init(scheduler: *Scheduler, options: Options) Watchdog {
    assert(options.stall_threshold_ns != null or options.trace_interval_ns != null);
    if (options.stall_threshold_ns) |ns| assert(ns >= stall_threshold_ns_min);
    if (options.trace_interval_ns) |ns| assert(ns >= trace_interval_ns_min);
    return .{ .scheduler = scheduler, .options = options };
}

/// Starts the thread. The watchdog must not move until `stop`.
pub fn start(watchdog: *Watchdog) error{SystemResources}!void {
    assert(watchdog.thread == null);
    if (watchdog.options.stall_threshold_ns != null) installHandler();
    const now_ns = os.monotonicNs();
    watchdog.trace_last_ns = now_ns;
    for (watchdog.seen[0..watchdog.scheduler.executors.len]) |*seen| seen.since_ns = now_ns;
    if (watchdog.options.stall_threshold_ns != null) {
        for (watchdog.scheduler.executors, 0..) |*executor, index| {
            var path_buffer: [64]u8 = undefined;
            const tid = executor.tid.load(.monotonic);
            const format = "/proc/self/task/{d}/schedstat";
            // A tid has at most 10 digits.
            const path = std.fmt.bufPrintZ(&path_buffer, format, .{tid}) catch unreachable;
            watchdog.schedstat_fds[index] = os.openSampled(path);
        }
    }
    watchdog.thread = os_thread.spawn(
        "watchdog",
        "config.watchdog_thread_stack_size_bytes (a bug, please report it)",
        config.watchdog_thread_stack_size_bytes,
        null,
        run,
        .{watchdog},
    ) catch return error.SystemResources;
}

/// Stops the thread and waits for it. A stall still going on is reported as ended.
pub fn stop(watchdog: *Watchdog) void {
    const thread = watchdog.thread orelse return;
    watchdog.stopping.store(1, .release);
    os.futexWake(&watchdog.stopping, 1);
    thread.join();
    watchdog.thread = null;
    watchdog.reporter.stop();
    for (&watchdog.schedstat_fds) |*fd| {
        if (fd.*) |open_fd| os.closeFd(open_fd);
        fd.* = null;
    }
}

/// How often the thread looks: four times per threshold, and at every trace interval.
fn lookNs(options: Options) u64 {
    var ns: u64 = std.math.maxInt(u64);
    if (options.stall_threshold_ns) |threshold_ns| ns = @min(ns, threshold_ns / 4);
    if (options.trace_interval_ns) |interval_ns| ns = @min(ns, interval_ns);
    return ns;
}

fn run(watchdog: *Watchdog) void {
    const look_ns = lookNs(watchdog.options);
    var wait_ns = look_ns;
    while (watchdog.stopping.load(.acquire) == 0) {
        os.futexWait(&watchdog.stopping, 0, wait_ns);
        const now_ns = os.monotonicNs();
        wait_ns = look_ns;
        if (watchdog.options.stall_threshold_ns) |threshold_ns| {
            wait_ns = watchdog.lookAtAll(threshold_ns, look_ns, now_ns);
        }
        if (watchdog.options.trace_interval_ns) |interval_ns| {
            if (now_ns -| watchdog.trace_last_ns >= interval_ns) watchdog.writeTrace(now_ns);
        }
    }
}

/// One look at every executor, the spare too once its thread runs: reports stalls and moves
/// what a held executor alone would run to where the others take it. Returns how long to wait
/// for the next look.
fn lookAtAll(watchdog: *Watchdog, threshold_ns: u64, look_ns: u64, now_ns: u64) u64 {
    var wait_ns = look_ns;
    const hold_min_ns = watchdog.holdMinNs(look_ns, now_ns);
    const watched = watchdog.watchedLen();
    assert(watched <= watched_max);
    // Reports are made after every executor was helped: taking a stack waits for the
    // stalled thread's signal handler (up to `sample_wait_ns`), and the tasks held up would
    // wait for it.
    var stalled_ns: [watched_max]?u64 = @splat(null);
    var any_held = false;
    for (0..watched) |index| {
        const executor = watchdog.watchedAt(index);
        assert(executor.index == index);
        const seen = &watchdog.seen[index];
        stalled_ns[index] = watchdog.look(executor, seen, threshold_ns, now_ns);
        if (isHeld(executor, seen, hold_min_ns, now_ns)) any_held = true;
        // Back soon for the I/O of an executor held by one task.
        if (watchdog.rescueIoOfHeld(executor, seen, hold_min_ns, now_ns)) {
            wait_ns = @min(wait_ns, rescue_interval_ns);
        }
        watchdog.handOverHeld(executor, seen, hold_min_ns, now_ns);
        if (executor.isSpare() and isHeld(executor, seen, hold_min_ns, now_ns)) {
            watchdog.moveRing(executor);
        }
        // Woken in time for the next timer of an executor held by one task.
        const deadline_ns =
            watchdog.fireTimersOfHeld(executor, seen, hold_min_ns, now_ns) orelse continue;
        wait_ns = @min(wait_ns, @max(deadline_ns -| now_ns, timer_wait_ns_min));
    }
    watchdog.recallForBacklog(hold_min_ns, now_ns);
    watchdog.reviewSpare(hold_min_ns, now_ns);
    if (any_held) watchdog.held_until_ns = now_ns + config.held_linger_ns;
    if (now_ns < watchdog.held_until_ns) wait_ns = @min(wait_ns, config.held_look_ns);
    for (0..watched) |index| {
        const held_ns = stalled_ns[index] orelse continue;
        const executor = watchdog.watchedAt(index);
        watchdog.reportStall(executor, &watchdog.seen[index], held_ns, threshold_ns);
    }
    return wait_ns;
}

/// How long one run must have lasted for the watchdog to treat its executor as held: half a
/// look, or `config.held_look_ns` while holds were seen lately. A task that never parks but
/// contends with others (a lock taken in a loop) parks now and then, each time the others get
/// the lock; every new run of it would otherwise hold up the tasks it wakes, and the timers of
/// the executor it lands on, for half a look again: one round trip per look, where the same
/// program on threads makes thousands (docs/RUNTIME.md, "Progress").
fn holdMinNs(watchdog: *const Watchdog, look_ns: u64, now_ns: u64) u64 {
    if (now_ns < watchdog.held_until_ns) return @min(config.held_look_ns, look_ns / 2);
    return look_ns / 2;
}

/// How many executors the watchdog looks at: every executor, and the spare once its thread
/// started (the watchdog starts it: `Scheduler.activateSpare`).
fn watchedLen(watchdog: *const Watchdog) usize {
    const scheduler = watchdog.scheduler;
    const spare = scheduler.spare orelse return scheduler.executors.len;
    return scheduler.executors.len + @intFromBool(spare.thread != null);
}

/// Executor `index` of those `watchedLen` counts: the spare comes last, its index past the
/// others'.
fn watchedAt(watchdog: *const Watchdog, index: usize) *Executor {
    const scheduler = watchdog.scheduler;
    if (index < scheduler.executors.len) return &scheduler.executors[index];
    assert(index == scheduler.executors.len);
    return scheduler.spare.?;
}

/// Updates what the watchdog saw of `executor`. Returns how long it has been held when that
/// makes a new stall, for the caller to report.
fn look(
    watchdog: *Watchdog,
    executor: *Executor,
    seen: *Seen,
    threshold_ns: u64,
    now_ns: u64,
) ?u64 {
    const activity = executor.activity.load(.monotonic);
    if (activity != seen.activity) {
        if (seen.reported) {
            // The executor stamped the end when it went back to the scheduler; the watchdog
            // may have been busy meanwhile (waiting for a stack sample, say).
            const end_ns = executor.stall_end_ns.load(.monotonic);
            const ended_ns = if (end_ns != 0) end_ns else now_ns;
            watchdog.noteHeld(executor.index, ended_ns -| seen.since_ns);
            watchdog.reportEnd(executor.index, seen.*, ended_ns);
        }
        executor.stalled_activity.store(Executor.activity_none, .monotonic);
        seen.* = .{
            .activity = activity,
            .since_ns = now_ns,
            .run_delay_ns = watchdog.runDelayNs(executor.index),
        };
        return null;
    }
    const running = activity & 1 == 1;
    if (!running) return null;
    watchdog.noteHeld(executor.index, now_ns -| seen.since_ns);
    if (seen.reported) {
        // Still stalled: the tasks queued on its ring may run elsewhere. An idle executor is
        // woken to steal them, which the push that queued them may have skipped (it does
        // while the CPUs look contended, and a stall is not something it foresaw).
        if (executor.ring.len() > 0) watchdog.helpWithRing(now_ns);
        return null;
    }
    if (now_ns -| seen.since_ns < threshold_ns) return null;
    const held_ns = watchdog.heldNs(executor.index, seen, now_ns);
    if (held_ns < threshold_ns) return null;
    seen.reported = true;
    _ = watchdog.stalls.fetchAdd(1, .monotonic);
    executor.stall_end_ns.store(0, .monotonic);
    // Release: an executor that sees the stall sees the end cleared (`stampStallEnd`).
    executor.stalled_activity.store(activity, .release);
    if (executor.ring.len() > 0) watchdog.helpWithRing(now_ns);
    return held_ns;
}

fn noteHeld(watchdog: *Watchdog, executor_index: u32, held_ns: u64) void {
    const held_max = &watchdog.held_max_ns[executor_index];
    if (held_ns > held_max.load(.monotonic)) held_max.store(held_ns, .monotonic);
}

/// How long the run `seen` has held its executor by `now_ns`, less the time its thread
/// waited for a CPU meanwhile (schedstat's run delay): a thread the kernel left waiting on a
/// contended machine is not a task that computes. Time blocked in a system call still counts:
/// that is a stall too (a blocking call made on an executor instead of on a lane).
fn heldNs(watchdog: *const Watchdog, executor_index: u32, seen: *const Seen, now_ns: u64) u64 {
    const held_ns = now_ns -| seen.since_ns;
    const delay_since_ns = seen.run_delay_ns orelse return held_ns;
    const delay_now_ns = watchdog.runDelayNs(executor_index) orelse return held_ns;
    return held_ns -| (delay_now_ns -| delay_since_ns);
}

fn runDelayNs(watchdog: *const Watchdog, executor_index: u32) ?u64 {
    return RunDelay.readAt(watchdog.schedstat_fds[executor_index] orelse return null);
}

test "Watchdog: time an executor's thread waited for a CPU is not held time" {
    const ms = std.time.ns_per_ms;
    var watchdog: Watchdog = .init(undefined, .{
        .stall_threshold_ns = 50 * ms,
        .trace_interval_ns = null,
    });
    const rc = linux.memfd_create("schedstat", linux.MFD.CLOEXEC);
    try std.testing.expectEqual(linux.E.SUCCESS, linux.errno(rc));
    const fd: os.fd_t = @intCast(rc);
    defer os.closeFd(fd);
    const schedstat = "2445073185 30000000 10197\n"; // 30 ms waited for a CPU so far
    try std.testing.expectEqual(schedstat.len, linux.write(fd, schedstat, schedstat.len));
    watchdog.schedstat_fds[0] = fd;
    // Seen 100 ms ago, when the thread had waited 10 ms: 20 ms of the 100 were waits.
    var seen: Seen = .{ .activity = 1, .since_ns = 0, .run_delay_ns = 10 * ms };
    try std.testing.expectEqual(80 * ms, watchdog.heldNs(0, &seen, 100 * ms));
    // Without a run delay to compare with, all of it.
    seen.run_delay_ns = null;
    try std.testing.expectEqual(100 * ms, watchdog.heldNs(0, &seen, 100 * ms));
    watchdog.schedstat_fds[0] = null;
    seen.run_delay_ns = 10 * ms;
    try std.testing.expectEqual(100 * ms, watchdog.heldNs(0, &seen, 100 * ms));
}

/// Wakes an idle executor to steal from a stalled one's ring, bringing back the retired ones
/// first: they do not steal, and under the contention that retired them the stalled executor
/// may be the only one left.
fn helpWithRing(watchdog: *Watchdog, now_ns: u64) void {
    watchdog.scheduler.recallRetired(now_ns + 2 * lookNs(watchdog.options));
    watchdog.scheduler.notifyWork();
}

/// Fires the due timers of an executor that one task has held for half a look or more (a look
/// is a quarter of the stall threshold), from the watchdog's thread: the
/// tasks that sleep or wait with a deadline there would otherwise wait for the holder to let
/// go. Woken from a thread that is no executor, the tasks that may move go to the global
/// queue, where an idle executor takes them (`Scheduler.makeReady`); those bound to the held
/// executor (an I/O wait's deadline, the main task) still wait for it. The executor's own
/// polls take the same lock, so a timer fires once, from either side. Returns the earliest
/// deadline left there, for the watchdog to look again by then; null when the executor is
/// not held or has no timer.
fn fireTimersOfHeld(
    watchdog: *Watchdog,
    executor: *Executor,
    seen: *const Seen,
    hold_min_ns: u64,
    now_ns: u64,
) ?u64 {
    if (!isHeld(executor, seen, hold_min_ns, now_ns)) return null;
    executor.timers_lock.lock();
    defer executor.timers_lock.unlock();
    const deadline_ns = executor.timers.peekDeadline() orelse return null;
    if (deadline_ns > now_ns) return deadline_ns;
    // The woken tasks go to the global queue, which retired executors do not serve.
    watchdog.scheduler.recallRetired(now_ns + 2 * lookNs(watchdog.options));
    executor.timers.expireParked(now_ns, &watchdog.timers_fired);
    const next_ns = executor.timers.peekDeadline() orelse return null;
    // A timer left due belongs to the holder itself, about to park: look again in a while.
    return @max(next_ns, now_ns + timer_wait_ns_min);
}

/// Whether one task has held `executor` for `hold_min_ns` or more (`holdMinNs`): the run
/// `seen` began at least that long ago and still goes on.
fn isHeld(executor: *const Executor, seen: *const Seen, hold_min_ns: u64, now_ns: u64) bool {
    return seen.activity & 1 == 1 and now_ns -| seen.since_ns >= hold_min_ns and
        executor.activity.load(.monotonic) == seen.activity;
}

/// Delivers the I/O completions of an executor that one task has held for half a look or
/// more, as `fireTimersOfHeld` its timers: the tasks waiting for them continue on another
/// executor instead of waiting for the holder to let go. The executor's loop is reaped from
/// this thread (`Loop.rescue`); on io_uring, whose ring posts completions only when its own
/// thread asks (`DEFER_TASKRUN`), that thread is first interrupted with the sampling signal to
/// ask (`interruptHeld`). A completion whose task is bound to the executor (the main task, pinned
/// mode) or already woken stays for the executor's next poll (`io_wait.claimForRescue`).
/// Returns whether to look again within `rescue_interval_ns`: while the executor is held with
/// operations in flight.
///
/// Not with one executor and no spare, nor in pinned mode: no other executor could run what it
/// delivers.
/// Not under ThreadSanitizer on io_uring, which installs no sampling signal and cannot see the
/// ring's ordering of a completion's writes before its reaping.
fn rescueIoOfHeld(
    watchdog: *Watchdog,
    executor: *Executor,
    seen: *const Seen,
    hold_min_ns: u64,
    now_ns: u64,
) bool {
    const scheduler = watchdog.scheduler;
    if (!scheduler.canHandOver() or scheduler.pinned) return false;
    if (!isHeld(executor, seen, hold_min_ns, now_ns)) return false;
    const loop = &executor.loop;
    if (loop.pendingRescue() == 0) return false;
    if (loop.kind() == .io_uring) {
        if (builtin.sanitize_thread) return false;
        // Interrupted only when it holds something back: an idle connection's receive stays
        // in flight for the whole hold, and needs no signal every millisecond.
        const needs_post = loop.needsPost() orelse return true;
        if (needs_post and !interruptHeld(executor)) return true;
    }
    const rescue = loop.rescue(&io_wait.claimForRescue) orelse return true;
    if (rescue.claimed > 0) {
        // The claimed tasks went to the global queue, which retired executors do not serve:
        // bring them back, and wake one to run the tasks.
        scheduler.recallRetired(now_ns + 2 * lookNs(watchdog.options));
        scheduler.notifyWork();
    }
    return true;
}

/// Moves what only a held executor would run to where the others take it: the task in its
/// LIFO slot (woken by the holder, which may never park: without this it waited for the hold
/// to end, however long, while the other executors slept), and the main task, queued on a held
/// executor 0 (`Scheduler.displaceMain`). The LIFO slot is the owner's without a lock, so its
/// thread hands the task over itself, interrupted by the signal that posts its completions
/// (`Executor.surrenderHeld`). Not with one executor and no spare, nor in pinned mode: no
/// other executor could run them. Not under ThreadSanitizer, whose builds install no signal
/// handler, for the LIFO slot.
fn handOverHeld(
    watchdog: *Watchdog,
    executor: *Executor,
    seen: *const Seen,
    hold_min_ns: u64,
    now_ns: u64,
) void {
    const scheduler = watchdog.scheduler;
    if (!scheduler.canHandOver() or scheduler.pinned) return;
    const held = isHeld(executor, seen, hold_min_ns, now_ns);
    var main_task = if (held and executor.index == 0) executor.takeMainInjected() else null;
    // Taken by an earlier interruption (`rescueIoOfHeld`'s), or asked for now: the main task
    // may wait in `local`, which only the interruption looks at (at most one a look).
    var surrendered = executor.surrendered.swap(null, .acquire);
    if (main_task == null) main_task = executor.surrendered_main.swap(null, .acquire);
    if (!held and surrendered == null and main_task == null) return;
    const main_ready_here = executor.index == 0 and main_task == null and
        mainReadyOn(scheduler, executor);
    if (held and !builtin.sanitize_thread and surrendered == null and
        (executor.lifo.load(.monotonic) != null or main_ready_here) and interruptHeld(executor))
    {
        surrendered = executor.surrendered.swap(null, .acquire);
        if (executor.surrendered_main.swap(null, .acquire)) |task| main_task = task;
    }
    if (main_task == null and surrendered == null) return;
    // Counted before the tasks may run (see `timers_fired`).
    const handed_over: u64 = @as(u64, @intFromBool(main_task != null)) +
        @intFromBool(surrendered != null);
    _ = watchdog.handed_over.fetchAdd(handed_over, .monotonic);
    // Before the push, whose wake-up skips retired executors.
    scheduler.recallRetired(now_ns + held_recall_ns);
    if (main_task) |task| scheduler.displaceMain(task);
    if (surrendered) |task| {
        if (task.home == null) scheduler.pushGlobal(task) else scheduler.displaceMain(task);
    }
}

/// Moves the tasks queued in the ring of the held spare to the global queue: the executors
/// steal from each other's rings, not from the spare's (it is outside `executors`), and a
/// single executor steals from no one. A thief like any other (RunQueue.zig): the spare's
/// thread may push and pop meanwhile.
fn moveRing(watchdog: *Watchdog, spare: *Executor) void {
    assert(spare.isSpare());
    // Each steal takes half, rounded up: a bounded number of rounds empties a full ring.
    for (0..config.run_queue_len) |_| {
        const count = spare.ring.steal(&watchdog.ring_buffer);
        if (count == 0) return;
        spare.counters.stolen_by_others.add(count);
        _ = watchdog.handed_over.fetchAdd(count, .monotonic);
        watchdog.scheduler.recallRetired(os.monotonicNs() + held_recall_ns);
        watchdog.scheduler.pushGlobalBatch(watchdog.ring_buffer[0..count]);
    }
}

/// How long an executor recalled for a held one's work stays before it may retire again: the
/// watchdog may not be back in time to recall it once more, busy writing a stall report (the
/// first one loads the debug information: 100-200 ms in a Debug build).
const held_recall_ns = 500 * std.time.ns_per_ms;

/// Whether the main task may be queued, ready, on held `executor` 0: neither running (the
/// holder, as a `main` blocked in `std.Thread.join` is) nor parked waiting. It would then wait
/// in the executor's LIFO slot or its `local` queue, which only an interruption of the held
/// thread looks at. A snapshot of atomics only (`home` is the task's own to write), for
/// deciding to interrupt: a main task queued elsewhere costs one interruption that finds
/// nothing.
fn mainReadyOn(scheduler: *Scheduler, executor: *const Executor) bool {
    assert(executor.index == 0);
    const main_task = &scheduler.main_task;
    if (main_task.on_cpu.load(.monotonic)) return false;
    return switch (main_task.wait_state.load(.monotonic)) {
        .waiting, .waiting_cancelable => false,
        .running, .notified => true,
    };
}

/// Brings the retired executors back while tasks wait in the global queue and an active
/// executor is held: retired executors do not serve that queue, and the held one does not
/// either (a task that never parks, or a thread blocked outside std.Io, such as a `main` that
/// joins a thread). Without this, tasks woken or started by threads weft does not run waited
/// for the contention to pass, seconds under a busy machine.
fn recallForBacklog(watchdog: *Watchdog, hold_min_ns: u64, now_ns: u64) void {
    const scheduler = watchdog.scheduler;
    if (scheduler.retired.load(.monotonic) == 0) return;
    if (scheduler.inject_count.load(.monotonic) == 0) return;
    const active = scheduler.activeExecutors();
    for (scheduler.executors[0..active], watchdog.seen[0..active]) |*executor, *seen| {
        if (!isHeld(executor, seen, hold_min_ns, now_ns)) continue;
        scheduler.recallRetired(now_ns + held_recall_ns);
        scheduler.notifyWork();
        return;
    }
}

/// Puts the spare executor to work while every executor is held and tasks wait that they would
/// run (in the global queue, or in their rings), and takes it off as soon as one is free again
/// (Scheduler.zig, "The spare executor").
fn reviewSpare(watchdog: *Watchdog, hold_min_ns: u64, now_ns: u64) void {
    const scheduler = watchdog.scheduler;
    if (scheduler.spare == null) return;
    const count = scheduler.executors.len;
    for (scheduler.executors, watchdog.seen[0..count]) |*executor, *seen| {
        if (!isHeld(executor, seen, hold_min_ns, now_ns)) return scheduler.deactivateSpare();
    }
    if (!scheduler.hasStealableWork(null)) return;
    scheduler.activateSpare();
}

/// How often the watchdog reaps the loop of an executor held with I/O in flight: the longest
/// an operation's task waits once its executor counts as held (`isHeld`). Each reap of an
/// io_uring loop interrupts the holding thread once (a few microseconds of its time).
pub const rescue_interval_ns = std.time.ns_per_ms;

/// Interrupts `executor`'s thread to post its ring's deferred completions
/// (`Loop.postDeferred`) and hand over the task in its LIFO slot (`Executor.surrenderHeld`),
/// and waits until it did. False if it could not be signaled or did not answer within
/// `post_wait_ns` (blocked with the signal masked, or not scheduled).
fn interruptHeld(executor: *Executor) bool {
    const request = &executor.post_request;
    assert(request.load(.monotonic) == post_idle);
    request.store(post_requested, .release);
    const tid = executor.tid.load(.monotonic);
    if (os.errno(linux.tgkill(linux.getpid(), tid, linux.SIG.URG)) != .SUCCESS) {
        request.store(post_idle, .monotonic);
        return false;
    }
    const deadline_ns = os.monotonicNs() + post_wait_ns;
    while (true) {
        const state = request.load(.acquire);
        if (state == post_done) break;
        const now_ns = os.monotonicNs();
        if (state == post_requested and now_ns >= deadline_ns) {
            // Withdrawn, unless the handler took it just now.
            if (request.cmpxchgStrong(post_requested, post_idle, .acquire, .acquire) == null) {
                return false;
            }
            continue;
        }
        // Once taken, the handler is running on that thread: it is done within microseconds,
        // and what it hands over must not be left behind, so the wait goes on.
        const wait_ns = if (state == post_requested) deadline_ns - now_ns else post_wait_ns;
        os.futexWait(request, state, wait_ns);
    }
    request.store(post_idle, .monotonic);
    return true;
}

/// `Executor.post_request` (`interruptHeld`): `idle` -> `requested` (watchdog) -> `taken`
/// (handler) -> `done` (handler) -> `idle` (watchdog); or `requested` -> `idle` when the
/// watchdog withdraws a request no handler took in time.
pub const post_idle: u32 = 0;
const post_requested: u32 = 1;
const post_taken: u32 = 2;
const post_done: u32 = 3;
/// How long the watchdog waits for a held thread to post its completions.
const post_wait_ns = std.time.ns_per_ms;

/// The shortest wait for a held executor's next timer: below it, the watchdog would spin on a
/// timer that is due while the futex wait is being set up.
const timer_wait_ns_min = 100 * std.time.ns_per_us;

fn reportStall(
    watchdog: *Watchdog,
    executor: *Executor,
    seen: *Seen,
    held_ns: u64,
    threshold_ns: u64,
) void {
    var entry: Reporter.Entry = .{};
    var writer = entry.writer();
    // The stack first (it names the task), the words before it.
    var name_buffer: [LiveTasks.name_bytes_max]u8 = undefined;
    var described: ?LiveTasks.Description = null;
    var no_stack: ?[]const u8 = null;
    const tasks = &watchdog.scheduler.tasks;
    const task = sampleStack(
        executor,
        seen.activity,
        &entry,
        &no_stack,
        tasks,
        &name_buffer,
        &described,
    );
    seen.task_address = if (task) |t| @intFromPtr(t) else 0;
    seen.task_id = if (described) |d| d.id else 0;
    writer.print("stall: task 0x{x}", .{seen.task_address}) catch {};
    if (described) |d| {
        writer.print(" (id {d}", .{d.id}) catch {};
        if (d.name.len > 0) writer.print(", \"{s}\"", .{d.name}) catch {};
        writer.writeByte(')') catch {};
    }
    writer.print(" has run on executor {d} for {d} ms without going back " ++
        "to the scheduler (threshold {d} ms); every other task of that executor waits " ++
        "meanwhile. Move long computations to rt.compute (weft.CpuLane) and blocking calls to " ++
        "a weft.Lane. Its stack now:\n", .{
        executor.index,
        held_ns / std.time.ns_per_ms,
        threshold_ns / std.time.ns_per_ms,
    }) catch {}; // words too long for the entry are cut
    if (no_stack) |reason| writer.print("(no stack: {s})\n", .{reason}) catch {};
    entry.setText(&writer);
    // Named and logged by the reporter's thread: the first lookup loads the debug
    // information, and this thread must go on looking meanwhile (Reporter.zig).
    watchdog.reporter.push(&entry);
}

fn reportEnd(watchdog: *Watchdog, executor_index: u32, seen: Seen, end_ns: u64) void {
    watchdog.stall_time.record(end_ns -| seen.since_ns);
    var entry: Reporter.Entry = .{};
    var writer = entry.writer();
    writer.print(
        "stall ended: task 0x{x} (id {d}) ran on executor {d} for {d} ms in all",
        .{
            seen.task_address,
            seen.task_id,
            executor_index,
            (end_ns -| seen.since_ns) / std.time.ns_per_ms,
        },
    ) catch unreachable; // the entry fits the longest numbers
    entry.setText(&writer);
    watchdog.reporter.push(&entry);
}

/// For tests: how many reports were logged so far, and a copy of report `index` (from 0,
/// below `Reporter.kept_max`) into `buffer` if there was one.
pub fn keptReport(
    watchdog: *Watchdog,
    index: u32,
    buffer: *[Reporter.report_bytes_max]u8,
) struct { []u8, u32 } {
    return watchdog.reporter.keptReport(index, buffer);
}

/// Has `executor`'s thread record the stack of the code it runs, into `entry`'s frames, or sets
/// `no_stack` to why not. Returns the task it was running, and sets `described` to its id and
/// name (sched/LiveTasks.zig) if it still lives.
fn sampleStack(
    executor: *Executor,
    activity: u64,
    entry: *Reporter.Entry,
    no_stack: *?[]const u8,
    tasks: *LiveTasks,
    name_buffer: *[LiveTasks.name_bytes_max]u8,
    described: *?LiveTasks.Description,
) ?*Task {
    if (builtin.sanitize_thread or !std.options.allow_stack_tracing) {
        no_stack.* = "not taken in this build";
        return null;
    }
    const sample = &executor.stall_sample;
    if (takeSample(executor)) |reason| {
        no_stack.* = reason;
        return null;
    }
    if (sample.activity != activity) {
        no_stack.* = "the stall ended before it was taken";
        return null;
    }
    if (sample.task) |task| described.* = tasks.describe(@intFromPtr(task), name_buffer);
    entry.setFrames(sample.addresses[0..sample.addresses_len], !sample.complete);
    return sample.task;
}

/// Signals `executor`'s thread and waits until its handler recorded a sample. Null on
/// success, else why no sample was taken.
fn takeSample(executor: *Executor) ?[]const u8 {
    const sample = &executor.stall_sample;
    assert(sample.state.load(.monotonic) == Sample.idle);
    sample.state.store(Sample.requested, .release);
    const tid = executor.tid.load(.monotonic);
    if (os.errno(linux.tgkill(linux.getpid(), tid, linux.SIG.URG)) != .SUCCESS) {
        sample.state.store(Sample.idle, .monotonic);
        return "the thread could not be signaled";
    }
    const deadline_ns = os.monotonicNs() + sample_wait_ns;
    while (sample.state.load(.acquire) == Sample.requested) {
        const now_ns = os.monotonicNs();
        if (now_ns >= deadline_ns) {
            // The thread did not take the signal in time (blocked in the kernel, or the
            // signal masked): withdraw the request, unless the handler took it just now.
            const withdrawn =
                sample.state.cmpxchgStrong(Sample.requested, Sample.idle, .acquire, .acquire);
            if (withdrawn == null) return "the thread did not take the signal";
            break;
        }
        os.futexWait(&sample.state, Sample.requested, deadline_ns - now_ns);
    }
    assert(sample.state.load(.acquire) == Sample.taken);
    sample.state.store(Sample.idle, .monotonic);
    return null;
}

// ---------------------------------------------------------------------------------------------
// The sampling signal.

var install_lock: Mutex = .{};
var installed = false;
/// The program's SIGURG action before ours: a SIGURG weft did not ask for goes there.
var previous: linux.Sigaction = undefined;

fn installHandler() void {
    if (builtin.sanitize_thread) return;
    install_lock.lock();
    defer install_lock.unlock();
    if (installed) return;
    const action: linux.Sigaction = .{
        .handler = .{ .sigaction = &handleSample },
        .mask = linux.sigemptyset(),
        .flags = linux.SA.SIGINFO | linux.SA.ONSTACK | linux.SA.RESTART,
    };
    assert(linux.sigaction(.URG, &action, &previous) == 0);
    installed = true;
}

fn handleSample(
    signal: linux.SIG,
    info: *const linux.siginfo_t,
    ucontext: ?*anyopaque,
) callconv(.c) void {
    const executor = Executor.ofThread() orelse return forward(signal, info, ucontext);
    // One signal may carry both requests: the watchdog makes them one after the other, and
    // a signal sent while another is pending is merged with it.
    const posted = postForRescue(executor);
    const sample = &executor.stall_sample;
    if (sample.state.load(.acquire) == Sample.requested) {
        if (takeStack(executor, ucontext)) return;
    } else if (posted) {
        return;
    }
    forward(signal, info, ucontext);
}

/// The handler's answer to `interruptHeld`, if one is pending. A frame of its own, and a small
/// one: this may run on a fiber's stack (no alternate signal stack where stacks have no guard
/// page), up to once a millisecond while the executor is held.
noinline fn postForRescue(executor: *Executor) bool {
    const request = &executor.post_request;
    // Taken first: a request withdrawn meanwhile must not hand tasks over that the watchdog
    // would then not collect.
    if (request.cmpxchgStrong(post_requested, post_taken, .acquire, .monotonic) != null) {
        return false;
    }
    executor.loop.postDeferred();
    executor.surrenderHeld();
    request.store(post_done, .release);
    os.futexWake(request, 1);
    return true;
}

/// The handler's answer to `takeSample`: records the interrupted stack. False when the
/// interrupted registers cannot be read.
noinline fn takeStack(executor: *Executor, ucontext: ?*anyopaque) bool {
    const sample = &executor.stall_sample;
    const registers = std.debug.cpu_context.fromPosixSignalContext(ucontext) orelse return false;
    // A page of the interrupted stack per copy (fiber/frames.zig), on the signal stack.
    var window: [std.heap.page_size_min]u8 align(16) = undefined;
    const trace = frames.walk(
        @intCast(registers.getPc()),
        @intCast(registers.getFp()),
        &sample.addresses,
        &window,
    );
    sample.addresses_len = trace.addresses.len;
    sample.complete = trace.end == .complete;
    sample.task = executor.current;
    sample.activity = executor.activity.load(.monotonic);
    sample.state.store(Sample.taken, .release);
    os.futexWake(&sample.state, 1);
    return true;
}

fn forward(signal: linux.SIG, info: *const linux.siginfo_t, ucontext: ?*anyopaque) void {
    const handler = previous.handler;
    if (previous.flags & linux.SA.SIGINFO != 0) {
        if (handler.sigaction) |function| function(signal, info, ucontext);
        return;
    }
    const function = handler.handler orelse return;
    if (function == linux.SIG.DFL or function == linux.SIG.IGN) return; // SIGURG: ignored
    function(signal);
}

// ---------------------------------------------------------------------------------------------
// The schedule trace.

const TraceFigures = struct {
    resumed: u64 = 0,
    stolen: u64 = 0,
    sleeps: u64 = 0,
    idle_ns: u64 = 0,
};

/// Queues a trace line for the reporter to write: stderr may block (a full pipe), and the
/// watchdog must not.
fn writeTrace(watchdog: *Watchdog, now_ns: u64) void {
    const interval_ns = now_ns -| watchdog.trace_last_ns;
    watchdog.trace_last_ns = now_ns;
    var entry: Reporter.Entry = .{ .kind = .trace };
    var writer = entry.writer();
    watchdog.writeTraceLine(&writer, now_ns, interval_ns) catch {}; // a long line is cut
    if (writer.end == entry.text.len) entry.text[entry.text.len - 1] = '\n';
    entry.setText(&writer);
    watchdog.reporter.push(&entry);
}

pub fn writeTraceLine(
    watchdog: *Watchdog,
    writer: *std.Io.Writer,
    now_ns: u64,
    interval_ns: u64,
) std.Io.Writer.Error!void {
    const scheduler = watchdog.scheduler;
    try writer.print("weft sched {d}ms: executors={d} stalls={d}", .{
        (now_ns -| scheduler.started_ns) / std.time.ns_per_ms,
        scheduler.executors.len,
        watchdog.stalls.load(.monotonic),
    });
    for (scheduler.executors, 0..) |*executor, index| {
        const counters = &executor.counters;
        const figures: TraceFigures = .{
            .resumed = executor.runs(),
            .stolen = counters.stolen.read(),
            .sleeps = counters.sleeps.read(),
            .idle_ns = counters.idle_ns.read(),
        };
        const last = watchdog.trace_last[index];
        watchdog.trace_last[index] = figures;
        const idle_ns = figures.idle_ns -| last.idle_ns;
        const busy_ns = interval_ns -| @min(idle_ns, interval_ns);
        const busy_percent = if (interval_ns == 0) 0 else 100 * busy_ns / interval_ns;
        try writer.print(" [{d}: queued={d} resumed={d} stolen={d} sleeps={d} busy={d}%]", .{
            index,
            executor.ring.len() + executor.inject_count.load(.monotonic),
            figures.resumed -| last.resumed,
            figures.stolen -| last.stolen,
            figures.sleeps -| last.sleeps,
            busy_percent,
        });
    }
    if (watchdog.options.trace_lanes) |hook| try hook.write(hook.context, writer);
    try writer.writeByte('\n');
}
