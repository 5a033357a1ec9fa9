//! Whether an executor's thread waits for a CPU: the kernel's run delay of the thread (the
//! second field of `/proc/thread-self/schedstat`: nanoseconds spent runnable but not running),
//! sampled over windows of `config.run_delay_window_ns`.
//!
//! An executor out of work spins searching for a while before it sleeps (`Executor.search`),
//! which pays only while a CPU would otherwise stay idle (Go's rule). The scheduler sees its
//! own executors and the lanes' workers (contention/cpu_demand.zig), but not other processes. An
//! HTTP server with 2 executors on 2 cores, sharing them with its load generator, spun its
//! searches on the CPU the client needed: its threads waited for a CPU a third of the time and
//! were preempted 3,000 times a second, so a connection whose completion sat in a preempted
//! executor's ring waited a whole time slice (p99 3-4 ms against 0.3 ms with one executor).
//! Run delay measures exactly that harm, whoever causes it: while it is high the executor
//! searches once and sleeps, and it tries spinning again after a backoff that doubles while
//! the contention lasts.
//!
//! One per executor, used only by its own thread. Where the file cannot be read (a kernel
//! without schedstat, a sandbox hiding /proc) spinning stays allowed, as before.
const RunDelay = @This();

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const config = @import("../config.zig");
const os = @import("../os/linux.zig");

/// `/proc/thread-self/schedstat` of the thread that called `open`, or null.
fd: ?os.fd_t = null,
window_start_ns: u64 = 0,
/// The thread's run delay at `window_start_ns`.
window_start_delay_ns: u64 = 0,
/// Spinning is off until then.
quiet_until_ns: u64 = 0,
/// The next quiet period, if the window that ends it shows contention again.
backoff_ns: u64 = config.run_delay_backoff_ns_min,
/// Windows that found the thread waiting for a CPU (for tests and diagnostics).
contended_windows: u64 = 0,
/// The start of the run of contended windows that the last window ended, or null if it was
/// not contended: how long the contention has lasted without a break.
contended_since_ns: ?u64 = null,

/// What a contended window tells the scheduler.
pub const Contention = struct {
    /// Spinning stays off until then.
    quiet_until_ns: u64,
    /// Contended without a break since then (the start of the first contended window).
    since_ns: u64,
};

/// Opens the calling thread's schedstat: call on the executor's own thread.
pub fn open(now_ns: u64) RunDelay {
    const fd = os.openSampled("/proc/thread-self/schedstat") orelse return .{};
    var run_delay: RunDelay = .{ .fd = fd, .window_start_ns = now_ns };
    run_delay.window_start_delay_ns = run_delay.read() orelse {
        run_delay.close();
        return .{};
    };
    return run_delay;
}

pub fn close(run_delay: *RunDelay) void {
    if (run_delay.fd) |fd| os.closeFd(fd);
    run_delay.fd = null;
}

/// Ends the window if it is long enough. Returns the contention when the window was contended
/// (for the scheduler to tell every executor), else null.
pub fn sample(run_delay: *RunDelay, now_ns: u64) ?Contention {
    if (run_delay.fd == null) return null;
    if (now_ns -| run_delay.window_start_ns < config.run_delay_window_ns) return null;
    const delay_ns = run_delay.read() orelse {
        run_delay.close();
        return null;
    };
    const contended_before = run_delay.contended_windows;
    run_delay.update(now_ns, delay_ns);
    if (run_delay.contended_windows == contended_before) return null;
    return .{
        .quiet_until_ns = run_delay.quiet_until_ns,
        .since_ns = run_delay.contended_since_ns.?,
    };
}

/// Whether spinning is allowed by this thread's own measurements.
pub fn spinAllowed(run_delay: *const RunDelay, now_ns: u64) bool {
    return now_ns >= run_delay.quiet_until_ns;
}

/// Ends the window at `now_ns`, when the thread's total run delay is `delay_ns`. A window in
/// which the thread waited for a CPU more than 1/`config.run_delay_ratio_max` of the time is
/// contended: spinning stops for `backoff_ns`, doubled (up to the maximum) if spinning was
/// allowed for the whole window, that is, if spinning again brought contention back. Spinning
/// without contention for as long as the backoff resets it.
pub fn update(run_delay: *RunDelay, now_ns: u64, delay_ns: u64) void {
    assert(now_ns >= run_delay.window_start_ns);
    const elapsed_ns = now_ns - run_delay.window_start_ns;
    const waited_ns = delay_ns -| run_delay.window_start_delay_ns;
    // Spinning was allowed for the whole window: it probed whether spinning brings contention.
    const spinning = run_delay.quiet_until_ns <= run_delay.window_start_ns;
    const window_start_ns = run_delay.window_start_ns;
    run_delay.window_start_ns = now_ns;
    run_delay.window_start_delay_ns = delay_ns;
    if (waited_ns *| config.run_delay_ratio_max > elapsed_ns) {
        run_delay.contended_windows += 1;
        if (run_delay.contended_since_ns == null) run_delay.contended_since_ns = window_start_ns;
        run_delay.quiet_until_ns = @max(run_delay.quiet_until_ns, now_ns + run_delay.backoff_ns);
        if (spinning) {
            run_delay.backoff_ns = @min(2 * run_delay.backoff_ns, config.run_delay_backoff_ns_max);
        }
    } else {
        run_delay.contended_since_ns = null;
        if (spinning and now_ns - run_delay.quiet_until_ns >= run_delay.backoff_ns) {
            // As long without contention as the last quiet period lasted: the cause has gone.
            run_delay.backoff_ns = config.run_delay_backoff_ns_min;
        }
    }
}

/// The thread's run delay so far, in nanoseconds, or null if the file cannot be read.
fn read(run_delay: *RunDelay) ?u64 {
    return readAt(run_delay.fd.?);
}

/// The run delay so far of the thread whose schedstat `fd` is (`/proc/thread-self/schedstat`
/// or `/proc/self/task/TID/schedstat`, opened by `os.openSampled`), from any thread; null if
/// it cannot be read.
pub fn readAt(fd: os.fd_t) ?u64 {
    var buffer: [96]u8 = undefined;
    return parseRunDelay(os.preadStart(fd, &buffer) orelse return null);
}

/// The second of schedstat's three fields: "<on-cpu ns> <run delay ns> <timeslices>\n".
fn parseRunDelay(text: []const u8) ?u64 {
    var fields = std.mem.tokenizeAny(u8, text, " \n");
    _ = fields.next() orelse return null;
    const delay = fields.next() orelse return null;
    return std.fmt.parseInt(u64, delay, 10) catch null;
}

const testing = std.testing;
const ms = std.time.ns_per_ms;

test "RunDelay: parses schedstat" {
    try testing.expectEqual(@as(?u64, 532400612), parseRunDelay("2445073185 532400612 10197\n"));
    try testing.expectEqual(@as(?u64, null), parseRunDelay("2445073185\n"));
    try testing.expectEqual(@as(?u64, null), parseRunDelay("1 x 3\n"));
}

test "RunDelay: a window without waiting keeps spinning allowed" {
    var run_delay: RunDelay = .{ .fd = 0, .window_start_ns = 0 };
    run_delay.update(10 * ms, 0);
    run_delay.update(20 * ms, 10 * ms / config.run_delay_ratio_max); // exactly at the limit
    try testing.expect(20 * ms >= run_delay.quiet_until_ns);
    try testing.expectEqual(@as(u64, 0), run_delay.contended_windows);
}

test "RunDelay: contention stops spinning, doubling the backoff while it returns" {
    const min = config.run_delay_backoff_ns_min;
    const Clock = struct {
        run_delay: RunDelay = .{ .fd = 0, .window_start_ns = 0 },
        now_ns: u64 = 0,
        delay_ns: u64 = 0,

        /// One window of 1 ms in which the thread waited `waited_ns` for a CPU.
        fn window(clock: *@This(), waited_ns: u64) void {
            clock.now_ns += 1 * ms;
            clock.delay_ns += waited_ns;
            clock.run_delay.update(clock.now_ns, clock.delay_ns);
        }

        /// Clean windows until spinning is allowed again.
        fn waitQuietOut(clock: *@This()) void {
            while (!clock.run_delay.spinAllowed(clock.now_ns)) clock.window(0);
        }
    };
    var clock: Clock = .{};
    // Half of a window spent waiting for a CPU, with spinning allowed: quiet for the minimum.
    clock.window(ms / 2);
    try testing.expectEqual(clock.now_ns + min, clock.run_delay.quiet_until_ns);
    try testing.expectEqual(2 * min, clock.run_delay.backoff_ns);
    // Contended while quiet (the machine is busy without our spinning): the quiet period is
    // extended, but the backoff does not grow.
    clock.window(ms / 2);
    try testing.expectEqual(clock.now_ns + 2 * min, clock.run_delay.quiet_until_ns);
    try testing.expectEqual(2 * min, clock.run_delay.backoff_ns);
    // The quiet period runs out; the backoff stays.
    clock.waitQuietOut();
    try testing.expectEqual(2 * min, clock.run_delay.backoff_ns);
    // Spinning brings contention back: the backoff doubles each time, up to its maximum.
    var rounds: u32 = 0;
    while (rounds < 16) : (rounds += 1) {
        clock.window(0); // the window in which spinning was allowed throughout
        clock.window(ms / 2);
        try testing.expect(!clock.run_delay.spinAllowed(clock.now_ns));
        clock.waitQuietOut();
    }
    try testing.expectEqual(config.run_delay_backoff_ns_max, clock.run_delay.backoff_ns);
    // Spinning without contention for as long as the backoff resets it, not sooner.
    const resumed_ns = clock.now_ns;
    while (clock.now_ns - resumed_ns < config.run_delay_backoff_ns_max) {
        try testing.expectEqual(config.run_delay_backoff_ns_max, clock.run_delay.backoff_ns);
        clock.window(0);
    }
    try testing.expectEqual(min, clock.run_delay.backoff_ns);
    try testing.expect(clock.run_delay.spinAllowed(clock.now_ns));
    try testing.expectEqual(@as(u64, 18), clock.run_delay.contended_windows);
}

test "RunDelay: how long the contention lasted without a break" {
    var run_delay: RunDelay = .{ .fd = 0, .window_start_ns = 0 };
    run_delay.update(1 * ms, 0);
    try testing.expectEqual(@as(?u64, null), run_delay.contended_since_ns);
    // Three contended windows in a row date from the start of the first.
    run_delay.update(2 * ms, ms / 2);
    run_delay.update(3 * ms, ms);
    run_delay.update(5 * ms, 2 * ms);
    try testing.expectEqual(@as(?u64, 1 * ms), run_delay.contended_since_ns);
    // One clean window breaks the run; the next contended one starts another.
    run_delay.update(6 * ms, 2 * ms);
    try testing.expectEqual(@as(?u64, null), run_delay.contended_since_ns);
    run_delay.update(7 * ms, 3 * ms);
    try testing.expectEqual(@as(?u64, 6 * ms), run_delay.contended_since_ns);
}

test "RunDelay: two threads sharing one CPU see their run delay" {
    const Outcome = struct { contended_windows: u64, spin_allowed: bool };
    const Spinner = struct {
        /// Leaves `result` null where the thread cannot be pinned or schedstat is missing.
        fn run(set: *const linux.cpu_set_t, result: *?Outcome) void {
            linux.sched_setaffinity(0, set) catch return;
            const start_ns = os.monotonicNs();
            var run_delay = RunDelay.open(start_ns);
            if (run_delay.fd == null) return;
            // Busy for 60 ms of wall time while the other thread wants the same CPU.
            while (os.monotonicNs() - start_ns < 60 * ms) std.atomic.spinLoopHint();
            const now_ns = os.monotonicNs();
            _ = run_delay.sample(now_ns);
            const spin_allowed = run_delay.spinAllowed(now_ns);
            run_delay.close();
            result.* = .{
                .contended_windows = run_delay.contended_windows,
                .spin_allowed = spin_allowed,
            };
        }
    };
    // The lowest CPU this process may use, alone in the set.
    const cpus = os.allowedCpus() orelse return os.skipTest(@src(), "no CPU affinity to read");
    var results: [2]?Outcome = .{ null, null };
    var threads: [2]std.Thread = undefined;
    for (&threads, &results) |*thread, *result| {
        thread.* = try std.Thread.spawn(.{}, Spinner.run, .{ &cpus.lowest_only, result });
    }
    for (threads) |thread| thread.join();
    for (results) |result| {
        const outcome = result orelse return os.skipTest(@src(), "a thread could not pin itself");
        // Each waited for the CPU about half of the 60 ms: one contended window, no spinning.
        try testing.expectEqual(@as(u64, 1), outcome.contended_windows);
        try testing.expect(!outcome.spin_allowed);
    }
}
