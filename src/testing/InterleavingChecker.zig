//! A seeded interleaving checker for weft.sync, the lanes and the scheduler (STYLE.md habit
//! 14; after Tokio's loom, but randomised rather than exhaustive).
//!
//! Logical threads are fibers on the test's own OS thread, run one at a time. The code under
//! test reaches the checker in two ways:
//! - every atomic operation and every lock operation of weft.sync and the scheduler goes
//!   through the shim (`os/atomic.zig`), whose test-build look-alikes call `step` first: at
//!   each step the checker picks, from its seeded PRNG, which logical thread runs next
//!   (possibly the same);
//! - the code is handed the checker's own `Io`, whose futex, cancelation and clock entries
//!   the checker implements: a futex wait parks the logical thread until a matching wake, or
//!   returns early at random (a spurious wake, a cancel request, a timeout on a virtual clock
//!   that jumps to the deadline); a cancel request may also land on any thread at any step,
//!   and every request is accounted for (below).
//!
//! When no logical thread can run, the checker looks for the two failures it exists to find:
//! a thread parked on a futex word whose value already changed (nobody will wake it: a lost
//! wake-up), or, failing that and with no timed wait left to expire, a deadlock. Either ends
//! the run at once (the fibers are abandoned, not unwound). The scenario's own checks (every
//! value delivered exactly once) run after the logical threads finished.
//!
//! ## Cancel accounting
//!
//! std.Io's rule, which every primitive of weft.sync follows: a cancel request that loses the
//! race with a completion (a value or permit handed over) is re-armed (`io.recancel()`), the
//! operation returns what it was handed, and the task sees `error.Canceled` at its next
//! cancelation point. A primitive that forgets the re-arm drops the request; one that re-arms
//! and returns `error.Canceled` too delivers it twice. Neither shows in a scenario that just
//! retries on `Canceled`, so the checker follows each logical thread's request, one at a time
//! as a std.Io task has one:
//!
//!     none ──request──▶ pending ──cancelation point──▶ delivered ──task code sees it──▶ none
//!                          ▲                               │
//!                          └────────── recancel ◀──────────┘
//!
//! A request lands at a random step on any thread without one (at once delivered if the
//! thread is parked in a cancelable wait), or is made and delivered by a cancelable wait as it
//! starts. "Task code sees it" is reported by the scenario: `canceled(io)` when an operation
//! returned `error.Canceled`, and `cancelationPoint(io)`, the task's own check between two
//! operations. The run fails, naming the thread, when a request is lost (still `delivered`
//! at the task's own cancelation point or at its end: the operation returned something else
//! and did not re-arm), delivered twice (`canceled` while it is `pending` again), invented
//! (`canceled` with none), or re-armed without a delivery. A thread's end stands for its next
//! cancelation point. So at the end of every run, per thread, requests made = requests that
//! surfaced, and deliveries = requests + re-arms. Values are the scenarios' part: each checks
//! that every value was delivered exactly once, so a value kept under a re-armed request is
//! counted and one dropped with an `error.Canceled` is missed.
//!
//! What it cannot find: bugs that need weak memory ordering (the model is sequentially
//! consistent), and interleavings inside a step (between two atomic operations the code runs
//! alone; plain memory shared between threads must be under a lock, as it is in weft.sync).
//! A failing seed replays exactly: the run depends on nothing but the seed.
const Checker = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const context = @import("../fiber/context.zig");

gpa: std.mem.Allocator,
prng: std.Random.DefaultPrng = .init(0),
options: Options = .{},
threads: [threads_max]Logical = undefined,
stacks: [threads_max][]align(16) u8,
threads_len: usize = 0,
current: usize = 0,
main_context: context.Context = undefined,
/// The virtual clock (ns): only timeouts move it.
clock_ns: i96 = 0,
steps: u64 = 0,
failure: ?Failure = null,
/// The thread that was running when the run failed.
failure_thread: usize = 0,
/// Per thread index, the cancel accounting of every run since `init` (coverage: whether a
/// scenario reaches the re-arm at all).
totals: [threads_max]CancelCounts = @splat(.{}),
hooks: atomic.Checker = undefined,

pub const threads_max = 6;
const stack_size_bytes = 256 * 1024;

pub const Options = struct {
    /// One futex wait in N returns at once, as a spurious wake.
    spurious_one_in: u32 = 16,
    /// One cancelable futex wait in N is canceled when it starts; besides, at one step in
    /// 4 N a cancel request lands on a random thread (see "Cancel accounting").
    cancel_one_in: u32 = 16,
    /// One timed futex wait in N times out when it starts.
    timeout_one_in: u32 = 8,
    /// A run longer than this is a livelock.
    steps_max: u64 = 200_000,
};

pub const Failure = error{
    /// Nothing can run, and a thread is parked on a futex word that changed.
    LostWakeUp,
    /// Nothing can run, no timed wait is left, and some thread has not finished.
    Deadlock,
    /// `steps_max` steps without finishing.
    StepLimit,
    /// A cancel request was delivered into an operation (a cancelation point inside it
    /// returned `error.Canceled`), and the operation returned something else without
    /// re-arming it: the task never sees it.
    CancelLost,
    /// The task saw `error.Canceled` for a request that was re-armed too: it would see it
    /// again at its next cancelation point.
    CancelDeliveredTwice,
    /// The task saw `error.Canceled` with no request delivered.
    CancelWithoutRequest,
    /// `recancel` with no delivered request to re-arm (std.Io: "asserts that error.Canceled
    /// was returned from a prior cancelation point").
    RecancelWithoutDelivery,
};

/// One line on what `failure` means, for a failing seed's report.
pub fn explain(failure: Failure) []const u8 {
    return switch (failure) {
        error.LostWakeUp => "nothing can run, and a thread is parked on a futex word that changed",
        error.Deadlock => "nothing can run, and no timed wait is left to expire",
        error.StepLimit => "the run did not finish within steps_max steps (a livelock?)",
        error.CancelLost => "a cancel request was delivered into an operation that returned " ++
            "neither error.Canceled nor re-armed it (io.recancel): the task never sees it",
        error.CancelDeliveredTwice => "an operation returned error.Canceled and re-armed " ++
            "the request too: the task would see it twice",
        error.CancelWithoutRequest => "an operation returned error.Canceled, but no cancel " ++
            "request was delivered",
        error.RecancelWithoutDelivery => "io.recancel() with no delivered cancel request to " ++
            "re-arm",
    };
}

/// Where a logical thread's cancel request stands (see "Cancel accounting").
pub const Cancel = enum {
    none,
    /// Made or re-armed, not yet delivered: the next cancelation point returns
    /// `error.Canceled`.
    pending,
    /// A cancelation point returned `error.Canceled`; whoever got it owes the task that error
    /// or a re-arm.
    delivered,
};

/// One thread's cancel requests over a run (or, summed, over many).
pub const CancelCounts = struct {
    requested: u64 = 0,
    /// Cancelation points that returned `error.Canceled`.
    delivered: u64 = 0,
    recanceled: u64 = 0,
    /// `error.Canceled` that reached the task's own code.
    surfaced: u64 = 0,

    fn add(counts: *CancelCounts, other: CancelCounts) void {
        counts.requested += other.requested;
        counts.delivered += other.delivered;
        counts.recanceled += other.recanceled;
        counts.surfaced += other.surfaced;
    }
};

/// What a logical thread runs: `function(argument, io)`, where `io` is the checker's.
pub const Body = struct {
    function: *const fn (argument: *anyopaque, io: Io) void,
    argument: *anyopaque,
};

const Logical = struct {
    context: context.Context = undefined,
    state: State = .runnable,
    body: Body,
    /// Parked: the address (a futex word or a lock), and for a futex the value it waits on.
    address: usize = 0,
    expected: u32 = 0,
    deadline_ns: ?i96 = null,
    cancelable: bool = false,
    /// Why a parked futex wait ended.
    reason: Reason = .none,
    cancel: Cancel = .none,
    cancels: CancelCounts = .{},
    protection: Io.CancelProtection = .unblocked,

    const State = enum { runnable, lock_parked, futex_parked, finished };
    const Reason = enum { none, woken, timed_out, canceled };

    /// A cancelation point returns `error.Canceled` for the pending request.
    fn deliver(thread: *Logical) void {
        assert(thread.cancel == .pending);
        thread.cancel = .delivered;
        thread.cancels.delivered += 1;
    }
};

pub fn init(gpa: std.mem.Allocator) std.mem.Allocator.Error!Checker {
    var checker: Checker = .{ .gpa = gpa, .stacks = undefined };
    var allocated: usize = 0;
    errdefer for (checker.stacks[0..allocated]) |stack| gpa.free(stack);
    for (&checker.stacks) |*stack| {
        stack.* = try gpa.alignedAlloc(u8, .@"16", stack_size_bytes);
        allocated += 1;
    }
    return checker;
}

pub fn deinit(checker: *Checker) void {
    for (checker.stacks) |stack| checker.gpa.free(stack);
    checker.* = undefined;
}

/// Runs `bodies` as logical threads, interleaved by `seed`, until all finished or the run
/// failed. The checker must not move while it runs.
pub fn run(checker: *Checker, seed: u64, options: Options, bodies: []const Body) Failure!void {
    assert(bodies.len >= 1);
    assert(bodies.len <= threads_max);
    assert(atomic.checker == null); // not nested
    checker.prng = .init(seed);
    checker.options = options;
    checker.threads_len = bodies.len;
    checker.clock_ns = 0;
    checker.steps = 0;
    checker.failure = null;
    checker.failure_thread = 0;
    checker.hooks = .{
        .context = checker,
        .step = stepHook,
        .block = blockHook,
        .unblock = unblockHook,
    };
    for (bodies, 0..) |body, index| {
        const thread = &checker.threads[index];
        thread.* = .{ .body = body };
        const stack = checker.stacks[index];
        context.prepare(&thread.context, @intFromPtr(stack.ptr) + stack.len, fiberMain, checker);
    }
    // Every logical thread is over (finished, or abandoned when the run failed).
    defer for (checker.stacks[0..bodies.len]) |stack| {
        context.finish(@intFromPtr(stack.ptr) + stack.len);
    };
    atomic.checker = &checker.hooks;
    defer atomic.checker = null;
    checker.current = checker.randomRunnable().?;
    context.switchTo(&checker.main_context, &checker.threads[checker.current].context);
    if (checker.failure) |failure| return failure;
    for (checker.threads[0..checker.threads_len], 0..) |thread, index| {
        assert(thread.state == .finished);
        // Every request surfaced exactly once, every re-arm was delivered again: what the
        // state machine enforces step by step (a violation failed the run above).
        assert(thread.cancel == .none);
        assert(thread.cancels.surfaced == thread.cancels.requested);
        assert(thread.cancels.delivered == thread.cancels.requested + thread.cancels.recanceled);
        checker.totals[index].add(thread.cancels);
    }
}

/// The cancel accounting of thread `index` in the last run (for a failure's report).
pub fn cancelsOf(checker: *const Checker, index: usize) CancelCounts {
    assert(index < checker.threads_len);
    return checker.threads[index].cancels;
}

/// For scenario code: an operation returned `error.Canceled` to the task.
pub fn canceled(io_: Io) void {
    checkerOfIo(io_).surface();
}

/// For scenario code: the task's own cancelation point between two operations, where std
/// code would `try io.checkCancel()`. A request delivered into the operation before, and
/// neither returned by it nor re-armed, is lost: the run fails here.
pub fn cancelationPoint(io_: Io) void {
    const checker = checkerOfIo(io_);
    if (checker.currentThread().cancel == .delivered) checker.fail(error.CancelLost);
    io_.checkCancel() catch checker.surface();
}

/// The `Io` whose futex, cancelation and clock entries the checker implements; every other
/// entry fails as `std.Io.failing` does.
pub fn io(checker: *Checker) Io {
    return .{ .userdata = checker, .vtable = &vtable };
}

/// The logical thread running now.
fn currentThread(checker: *Checker) *Logical {
    return &checker.threads[checker.current];
}

fn fiberMain(argument: *anyopaque) callconv(.c) noreturn {
    const checker: *Checker = @ptrCast(@alignCast(argument));
    const thread = checker.currentThread();
    thread.body.function(thread.body.argument, checker.io());
    // The end stands for the thread's next cancelation point: a request made (or re-armed)
    // after its last one surfaces here.
    assert(thread.protection == .unblocked);
    switch (thread.cancel) {
        .none => {},
        .pending => {
            thread.deliver();
            checker.surface();
        },
        .delivered => checker.fail(error.CancelLost),
    }
    thread.state = .finished;
    checker.park();
    unreachable; // a finished thread is never resumed
}

fn oneIn(checker: *Checker, n: u32) bool {
    return n != 0 and checker.prng.random().uintLessThan(u32, n) == 0;
}

fn randomRunnable(checker: *Checker) ?usize {
    var runnable: [threads_max]usize = undefined;
    var count: usize = 0;
    for (checker.threads[0..checker.threads_len], 0..) |thread, index| {
        if (thread.state == .runnable) {
            runnable[count] = index;
            count += 1;
        }
    }
    if (count == 0) return null;
    return runnable[checker.prng.random().uintLessThan(usize, count)];
}

fn switchTo(checker: *Checker, next: usize) void {
    const previous = checker.current;
    if (next == previous) return;
    assert(checker.threads[next].state == .runnable);
    checker.current = next;
    context.switchTo(&checker.threads[previous].context, &checker.threads[next].context);
}

/// Ends the run: back to `run` on the test's stack, never to return here.
fn fail(checker: *Checker, failure: Failure) noreturn {
    checker.failure = failure;
    checker.failure_thread = checker.current;
    context.switchTo(&checker.threads[checker.current].context, &checker.main_context);
    unreachable; // an abandoned fiber is never resumed
}

/// A scheduling point: maybe a cancel request lands, then a random runnable thread goes on.
fn step(checker: *Checker) void {
    checker.steps += 1;
    if (checker.steps > checker.options.steps_max) checker.fail(error.StepLimit);
    if (checker.oneIn(checker.options.cancel_one_in *| 4)) checker.requestCancel();
    checker.switchTo(checker.randomRunnable().?); // the current thread is runnable
}

/// A cancel request lands on a random thread that has none: delivered at once if the thread
/// is parked in a cancelable wait (which it ends), else pending until a cancelation point.
fn requestCancel(checker: *Checker) void {
    var candidates: [threads_max]usize = undefined;
    var count: usize = 0;
    for (checker.threads[0..checker.threads_len], 0..) |thread, index| {
        if (thread.state == .finished or thread.cancel != .none) continue;
        candidates[count] = index;
        count += 1;
    }
    if (count == 0) return;
    const thread = &checker.threads[candidates[checker.prng.random().uintLessThan(usize, count)]];
    thread.cancels.requested += 1;
    thread.cancel = .pending;
    // `cancelable` is false for a wait that started under protection.
    if (thread.state == .futex_parked and thread.cancelable) {
        thread.deliver();
        thread.state = .runnable;
        thread.reason = .canceled;
    }
}

/// `error.Canceled` reached the current thread's own code.
fn surface(checker: *Checker) void {
    const thread = checker.currentThread();
    switch (thread.cancel) {
        .delivered => {},
        .pending => checker.fail(error.CancelDeliveredTwice),
        .none => checker.fail(error.CancelWithoutRequest),
    }
    thread.cancel = .none;
    thread.cancels.surfaced += 1;
}

/// The current thread cannot go on (parked or finished): runs another. When none can run,
/// checks for a lost wake-up, else expires the earliest timed wait, else fails.
fn park(checker: *Checker) void {
    const me = checker.current;
    while (true) {
        if (checker.randomRunnable()) |next| {
            if (next == me) return; // woken before anyone else ran (e.g. a timeout)
            checker.switchTo(next);
            assert(checker.threads[me].state == .runnable);
            return;
        }
        var all_finished = true;
        var earliest: ?usize = null;
        for (checker.threads[0..checker.threads_len], 0..) |*thread, index| {
            if (thread.state != .finished) all_finished = false;
            if (thread.state != .futex_parked) continue;
            const word: *const u32 = @ptrFromInt(thread.address);
            if (word.* != thread.expected) checker.fail(error.LostWakeUp);
            const deadline = thread.deadline_ns orelse continue;
            if (earliest == null or deadline < checker.threads[earliest.?].deadline_ns.?) {
                earliest = index;
            }
        }
        if (all_finished) {
            context.switchTo(&checker.threads[me].context, &checker.main_context);
            unreachable; // the run is over
        }
        const index = earliest orelse checker.fail(error.Deadlock);
        const thread = &checker.threads[index];
        checker.clock_ns = @max(checker.clock_ns, thread.deadline_ns.?);
        thread.state = .runnable;
        thread.reason = .timed_out;
    }
}

fn stepHook(argument: *anyopaque) void {
    const checker: *Checker = @ptrCast(@alignCast(argument));
    checker.step();
}

fn blockHook(argument: *anyopaque, address: usize) void {
    const checker: *Checker = @ptrCast(@alignCast(argument));
    const thread = checker.currentThread();
    thread.state = .lock_parked;
    thread.address = address;
    checker.park();
}

fn unblockHook(argument: *anyopaque, address: usize) void {
    const checker: *Checker = @ptrCast(@alignCast(argument));
    for (checker.threads[0..checker.threads_len]) |*thread| {
        if (thread.state == .lock_parked and thread.address == address) thread.state = .runnable;
    }
}

// ------------------------------------------------------------------------ the checker's Io

const vtable: Io.VTable = blk: {
    var table = Io.failing.vtable.*;
    table.futexWait = futexWait;
    table.futexWaitUncancelable = futexWaitUncancelable;
    table.futexWake = futexWake;
    table.recancel = recancel;
    table.checkCancel = checkCancel;
    table.swapCancelProtection = swapCancelProtection;
    table.now = now;
    break :blk table;
};

fn checkerOf(userdata: ?*anyopaque) *Checker {
    return @ptrCast(@alignCast(userdata.?));
}

fn checkerOfIo(io_: Io) *Checker {
    assert(io_.vtable == &vtable); // scenario code runs on the checker's Io
    return checkerOf(io_.userdata);
}

fn futexWait(
    userdata: ?*anyopaque,
    ptr: *const u32,
    expected: u32,
    timeout: Io.Timeout,
) Io.Cancelable!void {
    const checker = checkerOf(userdata);
    const deadline_ns: ?i96 = switch (timeout) {
        .none => null,
        .duration => |d| checker.clock_ns + d.raw.nanoseconds,
        .deadline => |d| d.raw.nanoseconds,
    };
    return checker.wait(ptr, expected, deadline_ns, true);
}

fn futexWaitUncancelable(userdata: ?*anyopaque, ptr: *const u32, expected: u32) void {
    checkerOf(userdata).wait(ptr, expected, null, false) catch unreachable; // uncancelable
}

fn wait(
    checker: *Checker,
    ptr: *const u32,
    expected: u32,
    deadline_ns: ?i96,
    cancelable: bool,
) Io.Cancelable!void {
    checker.step();
    const thread = checker.currentThread();
    const can_cancel = cancelable and thread.protection == .unblocked;
    if (can_cancel and thread.cancel == .pending) {
        thread.deliver();
        return error.Canceled;
    }
    if (@atomicLoad(u32, ptr, .seq_cst) != expected) return;
    if (checker.oneIn(checker.options.spurious_one_in)) return;
    if (can_cancel and thread.cancel == .none and checker.oneIn(checker.options.cancel_one_in)) {
        // A request made as the wait starts, delivered by it.
        thread.cancels.requested += 1;
        thread.cancel = .pending;
        thread.deliver();
        return error.Canceled;
    }
    if (deadline_ns) |deadline| if (checker.oneIn(checker.options.timeout_one_in)) {
        checker.clock_ns = @max(checker.clock_ns, deadline);
        return;
    };
    thread.state = .futex_parked;
    thread.address = @intFromPtr(ptr);
    thread.expected = expected;
    thread.deadline_ns = deadline_ns;
    thread.cancelable = can_cancel;
    thread.reason = .none;
    checker.park();
    switch (thread.reason) {
        .woken, .timed_out => return,
        .canceled => return error.Canceled,
        .none => unreachable, // made runnable without a reason
    }
}

fn futexWake(userdata: ?*anyopaque, ptr: *const u32, waiters_max: u32) void {
    const checker = checkerOf(userdata);
    checker.step();
    var woken: u32 = 0;
    for (checker.threads[0..checker.threads_len]) |*thread| {
        if (woken == waiters_max) break;
        if (thread.state != .futex_parked or thread.address != @intFromPtr(ptr)) continue;
        thread.state = .runnable;
        thread.reason = .woken;
        woken += 1;
    }
}

fn recancel(userdata: ?*anyopaque) void {
    const checker = checkerOf(userdata);
    const thread = checker.currentThread();
    if (thread.cancel != .delivered) checker.fail(error.RecancelWithoutDelivery);
    thread.cancel = .pending;
    thread.cancels.recanceled += 1;
}

fn checkCancel(userdata: ?*anyopaque) Io.Cancelable!void {
    const checker = checkerOf(userdata);
    const thread = checker.currentThread();
    if (thread.protection == .blocked or thread.cancel != .pending) return;
    thread.deliver();
    return error.Canceled;
}

fn swapCancelProtection(userdata: ?*anyopaque, new: Io.CancelProtection) Io.CancelProtection {
    const thread = checkerOf(userdata).currentThread();
    const previous = thread.protection;
    thread.protection = new;
    return previous;
}

fn now(userdata: ?*anyopaque, clock: Io.Clock) Io.Timestamp {
    _ = clock; // one virtual clock for all
    return .{ .nanoseconds = checkerOf(userdata).clock_ns };
}

// ------------------------------------------------------------------------------ scenarios

const WaitQueue = @import("../sync/WaitQueue.zig");
const Channel = @import("../sync/channel.zig").Channel;
const select_mod = @import("../sync/select.zig");
const RwLock = @import("../sync/RwLock.zig");
const Semaphore = @import("../sync/Semaphore.zig");
const Notify = @import("../sync/Notify.zig");
const Registry = @import("../sync/Registry.zig").Registry;
const Oneshot = @import("../sync/oneshot.zig").Oneshot;
const Barrier = @import("../sync/Barrier.zig");

const seeds = 1000;

/// Runs `Scenario` over `seeds` seeds and reports the first failing seed. A scenario has
/// `init(seed)`, `bodies()` (the logical threads), `check()` (run after they all finished)
/// and `rearming_threads`: the threads whose operations can lose the race of a cancel request
/// with a hand-off, so that each must re-arm a request on some seed (else the scenario no
/// longer tests the re-arm, and fails).
pub fn checkSeeds(comptime Scenario: type) !void {
    const name = @typeName(Scenario);
    var checker: Checker = try .init(std.testing.allocator);
    defer checker.deinit();
    for (0..seeds) |seed| {
        var scenario: Scenario = .init(seed);
        const bodies = scenario.bodies();
        checker.run(seed, .{}, &bodies) catch |err| {
            const thread = checker.failure_thread;
            const cancels = checker.cancelsOf(thread);
            std.debug.print("{s}: seed {d}: {s}: {s}; in thread {d} after {d} steps (its cancel " ++
                "requests: {d} made, {d} delivered, {d} re-armed, {d} seen by its code)\n", .{
                name,
                seed,
                @errorName(err),
                explain(err),
                thread,
                checker.steps,
                cancels.requested,
                cancels.delivered,
                cancels.recanceled,
                cancels.surfaced,
            });
            return err;
        };
        scenario.check() catch |err| {
            std.debug.print("{s}: seed {d}: {s}\n", .{ name, seed, @errorName(err) });
            return err;
        };
    }
    for (Scenario.rearming_threads) |thread| {
        const totals = checker.totals[thread];
        if (totals.recanceled > 0) continue;
        std.debug.print("{s}: thread {d} never re-armed a cancel request ({d} made over " ++
            "{d} seeds): its race of a cancel request with a hand-off is not reached\n", .{
            name,
            thread,
            totals.requested,
            seeds,
        });
        return error.RecancelNeverReached;
    }
}

/// For scenario code: an operation failed, so it took and gave nothing; an `error.Canceled`
/// is accounted for (see `canceled`).
pub fn noteError(io_: Io, err: anyerror) void {
    if (err == error.Canceled) canceled(io_);
}

pub fn bodyOf(comptime function: anytype, argument: anytype) Body {
    const Argument = @TypeOf(argument);
    return .{
        .function = struct {
            fn call(erased: *anyopaque, io_: Io) void {
                function(@as(Argument, @ptrCast(@alignCast(erased))), io_);
            }
        }.call,
        .argument = argument,
    };
}

/// A deadline for the virtual clock, or none: timed and untimed waits both get exercised.
pub fn maybeDeadline(io_: Io, random: std.Random) ?Io.Clock.Timestamp {
    if (random.boolean()) return null;
    return Io.Clock.Timestamp.fromNow(io_, .{ .raw = .fromNanoseconds(1000), .clock = .awake });
}

/// A hand-off of tokens through a bare `WaitQueue` (the protocol every primitive follows):
/// two releasers hand out four tokens, two acquirers each want two, and their waits are
/// canceled, time out or wake spuriously at random. A token handed to a waiter that then
/// reported an error would be lost (a deadlock); one counted twice shows in the check.
const TokenScenario = struct {
    lock: WaitQueue.Lock = .{},
    queue: WaitQueue = .empty,
    free: u32 = 0,
    acquired: [2]u32 = .{ 0, 0 },
    prng: std.Random.DefaultPrng,

    const tokens_per_acquirer = 2;
    const handed: u32 = 1;
    const rearming_threads = [_]usize{ 0, 1 }; // the acquirers

    fn init(seed: u64) TokenScenario {
        return .{ .prng = .init(seed ^ 0x70cc) };
    }

    fn bodies(scenario: *TokenScenario) [4]Body {
        return .{
            bodyOf(acquirer0, scenario),
            bodyOf(acquirer1, scenario),
            bodyOf(releaser, scenario),
            bodyOf(releaser, scenario),
        };
    }

    fn release(scenario: *TokenScenario, io_: Io) void {
        scenario.lock.lock();
        if (scenario.queue.pop()) |node| {
            const word = node.tryComplete(handed).?; // plain nodes are never dead
            scenario.lock.unlock();
            WaitQueue.wakeWord(io_, word);
            return;
        }
        scenario.free += 1;
        scenario.lock.unlock();
    }

    fn acquire(scenario: *TokenScenario, io_: Io) WaitQueue.WaitError!void {
        scenario.lock.lock();
        if (scenario.free > 0) {
            scenario.free -= 1;
            scenario.lock.unlock();
            return;
        }
        var node: WaitQueue.Node = .{};
        scenario.queue.push(&node);
        scenario.lock.unlock();
        const deadline = maybeDeadline(io_, scenario.prng.random());
        const code = try scenario.queue.wait(&scenario.lock, io_, &node, deadline);
        assert(code == handed);
    }

    fn acquireAll(scenario: *TokenScenario, io_: Io, index: usize) void {
        while (scenario.acquired[index] < tokens_per_acquirer) {
            scenario.acquire(io_) catch |err| {
                noteError(io_, err);
                continue; // took nothing: try again
            };
            scenario.acquired[index] += 1;
            cancelationPoint(io_); // a re-armed request surfaces here
        }
    }

    fn acquirer0(scenario: *TokenScenario, io_: Io) void {
        scenario.acquireAll(io_, 0);
    }

    fn acquirer1(scenario: *TokenScenario, io_: Io) void {
        scenario.acquireAll(io_, 1);
    }

    fn releaser(scenario: *TokenScenario, io_: Io) void {
        for (0..tokens_per_acquirer) |_| scenario.release(io_);
    }

    fn check(scenario: *TokenScenario) !void {
        try std.testing.expectEqual(@as(u32, 0), scenario.free);
        try std.testing.expect(scenario.queue.isEmpty());
        for (scenario.acquired) |count| try std.testing.expectEqual(tokens_per_acquirer, count);
    }
};

test "interleave: WaitQueue hand-off, 1000 seeds: no lost wake-up, no token lost or doubled" {
    try checkSeeds(TokenScenario);
}

/// Two producers send three values each (retrying a send that was canceled or timed out,
/// which delivered nothing); the last one closes. Two consumers receive until closed. The
/// capacity (0, 1 or 2) comes from the seed.
const ChannelScenario = struct {
    buffer: [2]u32 = undefined,
    channel: Channel(u32),
    prng: std.Random.DefaultPrng,
    producers_left: u32 = 2,
    /// How many times each value was sent (send returned success) and received.
    sent: [values_max]u8 = @splat(0),
    received: [values_max]u8 = @splat(0),
    /// Per consumer, the last sequence number seen of each producer (FIFO check).
    last: [2][2]?u32 = @splat(@splat(null)),
    order_broken: bool = false,

    const per_producer = 3;
    const values_max = 2 * per_producer;
    const rearming_threads = [_]usize{ 0, 1, 2, 3 };

    fn init(seed: u64) ChannelScenario {
        var scenario: ChannelScenario = .{ .channel = undefined, .prng = .init(seed ^ 0xc4a2) };
        const capacity = scenario.prng.random().uintAtMost(usize, 2);
        scenario.channel = .init(scenario.buffer[0..capacity]);
        return scenario;
    }

    fn bodies(scenario: *ChannelScenario) [4]Body {
        return .{
            bodyOf(producer0, scenario),
            bodyOf(producer1, scenario),
            bodyOf(consumer0, scenario),
            bodyOf(consumer1, scenario),
        };
    }

    fn produce(scenario: *ChannelScenario, io_: Io, producer: u32) void {
        for (0..per_producer) |sequence| {
            const value: u32 = producer * per_producer + @as(u32, @intCast(sequence));
            while (true) {
                const deadline = maybeDeadline(io_, scenario.prng.random());
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                scenario.channel.sendTimeout(io_, value, timeout) catch |err| switch (err) {
                    error.Canceled, error.Timeout => {
                        noteError(io_, err);
                        continue; // not delivered
                    },
                    error.Closed => unreachable, // closed after both producers
                };
                break;
            }
            scenario.sent[value] += 1;
            cancelationPoint(io_);
        }
        scenario.producers_left -= 1;
        if (scenario.producers_left == 0) scenario.channel.close(io_);
    }

    fn consume(scenario: *ChannelScenario, io_: Io, consumer: usize) void {
        while (true) {
            const deadline = maybeDeadline(io_, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            const value = scenario.channel.recvTimeout(io_, timeout) catch |err| switch (err) {
                error.Canceled, error.Timeout => {
                    noteError(io_, err);
                    continue; // took nothing
                },
                error.Closed => return,
            };
            scenario.note(consumer, value);
            cancelationPoint(io_);
        }
    }

    fn note(scenario: *ChannelScenario, consumer: usize, value: u32) void {
        scenario.received[value] += 1;
        const producer = value / per_producer;
        const sequence = value % per_producer;
        const last = &scenario.last[consumer][producer];
        if (last.*) |previous| if (sequence <= previous) {
            scenario.order_broken = true;
        };
        last.* = sequence;
    }

    fn producer0(scenario: *ChannelScenario, io_: Io) void {
        scenario.produce(io_, 0);
    }

    fn producer1(scenario: *ChannelScenario, io_: Io) void {
        scenario.produce(io_, 1);
    }

    fn consumer0(scenario: *ChannelScenario, io_: Io) void {
        scenario.consume(io_, 0);
    }

    fn consumer1(scenario: *ChannelScenario, io_: Io) void {
        scenario.consume(io_, 1);
    }

    fn check(scenario: *ChannelScenario) !void {
        try std.testing.expect(!scenario.order_broken);
        for (scenario.sent, scenario.received) |sent, received| {
            try std.testing.expectEqual(@as(u8, 1), sent);
            try std.testing.expectEqual(@as(u8, 1), received);
        }
        const waiting = scenario.channel.waiting();
        try std.testing.expectEqual(@as(u32, 0), waiting.senders + waiting.receivers);
    }
};

test "interleave: Channel, 1000 seeds: every value once, in order, no lost wake-up" {
    try checkSeeds(ChannelScenario);
}

/// Select on both sides: a producer sends each value to whichever of two channels takes it
/// first, another sends plainly to `a`; one consumer selects over both channels (dropping
/// an arm once its channel is closed), one receives plainly from `b`. Selects are canceled,
/// time out and wake spuriously at random. `b` is a rendezvous channel, so a select sender
/// meets a select receiver directly.
const SelectScenario = struct {
    a_buffer: [1]u32 = undefined,
    a: Channel(u32) = undefined,
    b: Channel(u32) = .init(&.{}),
    prng: std.Random.DefaultPrng,
    producers_left: u32 = 2,
    sent: [values_max]u8 = @splat(0),
    received: [values_max]u8 = @splat(0),

    const per_producer = 3;
    const values_max = 2 * per_producer;
    /// The select producer and the select consumer: they block in select only.
    const rearming_threads = [_]usize{ 0, 2 };

    fn init(seed: u64) SelectScenario {
        return .{ .prng = .init(seed ^ 0x5e1e) };
    }

    fn bodies(scenario: *SelectScenario) [4]Body {
        scenario.a = .init(&scenario.a_buffer);
        return .{
            bodyOf(selectProducer, scenario),
            bodyOf(plainProducer, scenario),
            bodyOf(selectConsumer, scenario),
            bodyOf(plainConsumer, scenario),
        };
    }

    fn options(scenario: *SelectScenario, io_: Io) select_mod.Options {
        const deadline = maybeDeadline(io_, scenario.prng.random());
        return .{
            .timeout = if (deadline) |d| .{ .deadline = d } else .none,
            .order = if (scenario.prng.random().boolean()) .random else .in_order,
        };
    }

    fn finishProducer(scenario: *SelectScenario, io_: Io) void {
        scenario.producers_left -= 1;
        if (scenario.producers_left > 0) return;
        scenario.a.close(io_);
        scenario.b.close(io_);
    }

    fn selectProducer(scenario: *SelectScenario, io_: Io) void {
        for (0..per_producer) |value| {
            while (true) {
                const result = select_mod.selectWith(io_, .{
                    .a = .{ .send = .{ &scenario.a, @as(u32, @intCast(value)) } },
                    .b = .{ .send = .{ &scenario.b, @as(u32, @intCast(value)) } },
                }, scenario.options(io_)) catch |err| {
                    noteError(io_, err);
                    continue; // not sent
                };
                switch (result) {
                    inline else => |sent| sent catch unreachable, // closed after producers
                }
                break;
            }
            scenario.sent[value] += 1;
            cancelationPoint(io_);
        }
        scenario.finishProducer(io_);
    }

    fn plainProducer(scenario: *SelectScenario, io_: Io) void {
        for (per_producer..values_max) |value| {
            while (true) {
                scenario.a.send(io_, @intCast(value)) catch |err| switch (err) {
                    error.Canceled => {
                        canceled(io_);
                        continue;
                    },
                    error.Closed => unreachable,
                };
                break;
            }
            scenario.sent[value] += 1;
            cancelationPoint(io_);
        }
        scenario.finishProducer(io_);
    }

    fn selectConsumer(scenario: *SelectScenario, io_: Io) void {
        var a: ?*Channel(u32) = &scenario.a;
        var b: ?*Channel(u32) = &scenario.b;
        while (a != null or b != null) {
            const result = select_mod.selectWith(io_, .{
                .a = .{ .recv = a },
                .b = .{ .recv = b },
            }, scenario.options(io_)) catch |err| {
                noteError(io_, err);
                continue; // took nothing
            };
            const value = switch (result) {
                .a => |received| received catch {
                    a = null;
                    continue;
                },
                .b => |received| received catch {
                    b = null;
                    continue;
                },
            };
            scenario.received[value] += 1;
            cancelationPoint(io_);
        }
    }

    fn plainConsumer(scenario: *SelectScenario, io_: Io) void {
        while (true) {
            const value = scenario.b.recv(io_) catch |err| switch (err) {
                error.Canceled => {
                    canceled(io_);
                    continue;
                },
                error.Closed => return,
            };
            scenario.received[value] += 1;
            cancelationPoint(io_);
        }
    }

    fn check(scenario: *SelectScenario) !void {
        for (scenario.sent, scenario.received) |sent, received| {
            try std.testing.expectEqual(@as(u8, 1), sent);
            try std.testing.expectEqual(@as(u8, 1), received);
        }
        for ([_]*Channel(u32){ &scenario.a, &scenario.b }) |channel| {
            const waiting = channel.waiting();
            try std.testing.expectEqual(@as(u32, 0), waiting.senders + waiting.receivers);
            try std.testing.expectEqual(@as(usize, 0), channel.count());
        }
    }
};

test "interleave: select over channels, 1000 seeds: every value once, no lost wake-up" {
    try checkSeeds(SelectScenario);
}

/// An executor's run queue (sched/RunQueue.zig) with a capacity of 4, so that twelve items
/// wrap around it three times and fill it: the owner pushes them (moving the older half out
/// with `popHalf` when the ring is full) and pops one now and then; two thieves steal until
/// the owner is done and the ring is empty. Every item must be taken exactly once, and since
/// everyone takes from the head, each taker must see its items in push order. With
/// `with_front`, a third of the pushes go to the front (as a task displaced from the LIFO slot
/// does), racing the thieves' steals from the same end; order then is not checked.
fn RunQueueScenarioOf(comptime with_front: bool) type {
    return struct {
        queue: RunQueue = .{},
        items: [items_len]Item = undefined,
        prng: std.Random.DefaultPrng,
        owner_done: atomic.Value(bool) = .init(false),
        taken: [items_len]u8 = @splat(0),
        /// Per taker (owner, thief 0, thief 1), the last item it took.
        last: [3]?u32 = @splat(null),
        order_broken: bool = false,

        const Item = struct { value: u32 };
        const RunQueue = @import("../sched/RunQueue.zig").RunQueue(Item, 4);
        const items_len = 12;
        const rearming_threads = [_]usize{}; // no blocking operation

        const Scenario = @This();

        fn init(seed: u64) Scenario {
            var scenario: Scenario = .{ .prng = .init(seed ^ 0x7a5c) };
            for (&scenario.items, 0..) |*item, i| item.* = .{ .value = @intCast(i) };
            return scenario;
        }

        fn bodies(scenario: *Scenario) [3]Body {
            return .{ bodyOf(owner, scenario), bodyOf(thief0, scenario), bodyOf(thief1, scenario) };
        }

        fn take(scenario: *Scenario, taker: usize, item: *Item) void {
            scenario.taken[item.value] += 1;
            if (scenario.last[taker]) |previous| if (item.value <= previous) {
                scenario.order_broken = true;
            };
            scenario.last[taker] = item.value;
        }

        fn owner(scenario: *Scenario, io_: Io) void {
            _ = io_;
            var half: [RunQueue.len_max / 2]*Item = undefined;
            for (&scenario.items) |*item| {
                const front = with_front and scenario.prng.random().uintLessThan(u32, 3) == 0;
                while (!(if (front) scenario.queue.pushFront(item) else scenario.queue.push(item))) {
                    const count = scenario.queue.popHalf(&half);
                    for (half[0..count]) |moved| scenario.take(0, moved);
                }
                if (scenario.prng.random().uintLessThan(u32, 3) == 0) {
                    if (scenario.queue.pop()) |popped| scenario.take(0, popped);
                }
            }
            while (scenario.queue.pop()) |popped| scenario.take(0, popped);
            scenario.owner_done.store(true, .release);
        }

        fn thief(scenario: *Scenario, taker: usize) void {
            var out: [RunQueue.len_max / 2]*Item = undefined;
            while (true) {
                const count = scenario.queue.steal(&out);
                for (out[0..count]) |item| scenario.take(taker, item);
                if (count == 0 and scenario.owner_done.load(.acquire)) return;
            }
        }

        fn thief0(scenario: *Scenario, io_: Io) void {
            _ = io_;
            scenario.thief(1);
        }

        fn thief1(scenario: *Scenario, io_: Io) void {
            _ = io_;
            scenario.thief(2);
        }

        fn check(scenario: *Scenario) !void {
            if (!with_front) try std.testing.expect(!scenario.order_broken);
            for (scenario.taken) |count| try std.testing.expectEqual(@as(u8, 1), count);
            try std.testing.expect(scenario.queue.isEmpty());
        }
    };
}

const RunQueueScenario = RunQueueScenarioOf(false);
const RunQueueFrontScenario = RunQueueScenarioOf(true);

test "interleave: RunQueue owner and two thieves, 1000 seeds: every item taken once, in order" {
    try checkSeeds(RunQueueScenario);
}

test "interleave: RunQueue pushFront against two thieves, 1000 seeds: every item taken once" {
    try checkSeeds(RunQueueFrontScenario);
}

/// Two writers and two readers take an `RwLock` twice each, the readers mixing in the
/// uncancelable variant; locks are canceled, time out and wake spuriously at random (a
/// failed lock holds nothing and is retried). Inside, each holder checks the exclusion with
/// atomic counters, whose steps let the others run in the middle of a critical section. A
/// hand-off lost to a withdrawal shows as a deadlock or a lost wake-up; a lock held twice or
/// by a writer among readers shows in the check.
const RwLockScenario = struct {
    lock: RwLock = .init,
    prng: std.Random.DefaultPrng,
    readers_inside: atomic.Value(u32) = .init(0),
    writers_inside: atomic.Value(u32) = .init(0),
    /// Held together by more than one reader at least once (the batch path ran).
    readers_together: bool = false,
    exclusion_broken: bool = false,
    writes: u32 = 0,
    reads: u32 = 0,

    const ops_per_thread = 2;
    const rearming_threads = [_]usize{ 0, 1, 2, 3 };

    fn init(seed: u64) RwLockScenario {
        return .{ .prng = .init(seed ^ 0x2710c) };
    }

    fn bodies(scenario: *RwLockScenario) [4]Body {
        return .{
            bodyOf(writer, scenario),
            bodyOf(writer, scenario),
            bodyOf(reader, scenario),
            bodyOf(reader, scenario),
        };
    }

    fn timeout(scenario: *RwLockScenario, io_: Io) Io.Timeout {
        const deadline = maybeDeadline(io_, scenario.prng.random());
        return if (deadline) |d| .{ .deadline = d } else .none;
    }

    fn writer(scenario: *RwLockScenario, io_: Io) void {
        for (0..ops_per_thread) |_| {
            while (true) {
                scenario.lock.lockTimeout(io_, scenario.timeout(io_)) catch |err| {
                    noteError(io_, err);
                    continue;
                };
                break;
            }
            if (scenario.writers_inside.fetchAdd(1, .monotonic) != 0) {
                scenario.exclusion_broken = true;
            }
            if (scenario.readers_inside.load(.monotonic) != 0) scenario.exclusion_broken = true;
            scenario.writes += 1;
            _ = scenario.writers_inside.fetchSub(1, .monotonic);
            scenario.lock.unlock(io_);
            cancelationPoint(io_);
        }
    }

    fn reader(scenario: *RwLockScenario, io_: Io) void {
        for (0..ops_per_thread) |_| {
            if (scenario.prng.random().boolean()) {
                scenario.lock.lockSharedUncancelable(io_);
            } else while (true) {
                scenario.lock.lockSharedTimeout(io_, scenario.timeout(io_)) catch |err| {
                    noteError(io_, err);
                    continue;
                };
                break;
            }
            if (scenario.readers_inside.fetchAdd(1, .monotonic) != 0) {
                scenario.readers_together = true;
            }
            if (scenario.writers_inside.load(.monotonic) != 0) scenario.exclusion_broken = true;
            scenario.reads += 1;
            _ = scenario.readers_inside.fetchSub(1, .monotonic);
            scenario.lock.unlockShared(io_);
            cancelationPoint(io_);
        }
    }

    fn check(scenario: *RwLockScenario) !void {
        try std.testing.expect(!scenario.exclusion_broken);
        try std.testing.expectEqual(@as(u32, 2 * ops_per_thread), scenario.writes);
        try std.testing.expectEqual(@as(u32, 2 * ops_per_thread), scenario.reads);
        try std.testing.expectEqual(@as(u32, 0), scenario.lock.state.load(.monotonic));
        try std.testing.expect(scenario.lock.waiters.isEmpty());
    }
};

test "interleave: RwLock, 1000 seeds: exclusion holds, no hand-off lost, nothing left held" {
    try checkSeeds(RwLockScenario);
}

/// Four tasks take one of a `Semaphore`'s two permits twice each, now and then uncancelably;
/// their acquires are canceled, time out and wake spuriously at random (a failed acquire holds
/// nothing and is retried). The task's own cancelation point comes while it holds the permit,
/// where a request re-armed by the acquire surfaces. A permit handed to a waiter that then
/// reported an error would be lost (a deadlock, or fewer permits at the end); one taken twice
/// shows as a third holder.
const SemaphoreScenario = struct {
    semaphore: Semaphore = .init(permits),
    prng: std.Random.DefaultPrng,
    holders: atomic.Value(u32) = .init(0),
    over_capacity: bool = false,
    acquired: [takers]u32 = @splat(0),

    const permits = 2;
    const takers = 4;
    const rounds = 2;
    const rearming_threads = [_]usize{ 0, 1, 2, 3 };

    fn init(seed: u64) SemaphoreScenario {
        return .{ .prng = .init(seed ^ 0x5e4a) };
    }

    fn bodies(scenario: *SemaphoreScenario) [takers]Body {
        return .{
            bodyOf(taker0, scenario),
            bodyOf(taker1, scenario),
            bodyOf(taker2, scenario),
            bodyOf(taker3, scenario),
        };
    }

    fn take(scenario: *SemaphoreScenario, io_: Io, index: usize) void {
        for (0..rounds) |_| {
            if (scenario.prng.random().uintLessThan(u32, 4) == 0) {
                scenario.semaphore.acquireUncancelable(io_);
            } else while (true) {
                const deadline = maybeDeadline(io_, scenario.prng.random());
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                scenario.semaphore.acquireTimeout(io_, timeout) catch |err| {
                    noteError(io_, err);
                    continue; // holds nothing
                };
                break;
            }
            if (scenario.holders.fetchAdd(1, .monotonic) >= permits) {
                scenario.over_capacity = true;
            }
            scenario.acquired[index] += 1;
            cancelationPoint(io_);
            _ = scenario.holders.fetchSub(1, .monotonic);
            scenario.semaphore.release(io_);
        }
    }

    fn taker0(scenario: *SemaphoreScenario, io_: Io) void {
        scenario.take(io_, 0);
    }

    fn taker1(scenario: *SemaphoreScenario, io_: Io) void {
        scenario.take(io_, 1);
    }

    fn taker2(scenario: *SemaphoreScenario, io_: Io) void {
        scenario.take(io_, 2);
    }

    fn taker3(scenario: *SemaphoreScenario, io_: Io) void {
        scenario.take(io_, 3);
    }

    fn check(scenario: *SemaphoreScenario) !void {
        try std.testing.expect(!scenario.over_capacity);
        for (scenario.acquired) |count| try std.testing.expectEqual(@as(u32, rounds), count);
        try std.testing.expectEqual(@as(u32, permits), scenario.semaphore.available());
        try std.testing.expect(scenario.semaphore.waiters.isEmpty());
    }
};

test "interleave: Semaphore, 1000 seeds: no permit lost or doubled, every cancel seen once" {
    try checkSeeds(SemaphoreScenario);
}

/// A notifier sends `notifications` notifications through a `Notify`, each only once the one
/// before was consumed (so none is folded into a stored permit), then one more per waiter,
/// which tells it to stop. Two waiters wait for them, now and then uncancelably; their waits
/// are canceled, time out and wake spuriously at random. Each notification must be consumed by
/// exactly one wait: one handed to a waiter that then reported an error leaves the notifier
/// waiting (a deadlock), one consumed twice shows in the count.
const NotifyScenario = struct {
    notify: Notify = .init,
    prng: std.Random.DefaultPrng,
    /// Notifications consumed: the futex word the notifier waits on.
    consumed: atomic.Value(u32) = .init(0),

    const notifications = 4;
    const waiters = 2;
    const rearming_threads = [_]usize{ 1, 2 }; // the waiters

    fn init(seed: u64) NotifyScenario {
        return .{ .prng = .init(seed ^ 0x40f1) };
    }

    fn bodies(scenario: *NotifyScenario) [1 + waiters]Body {
        return .{
            bodyOf(notifier, scenario),
            bodyOf(waiter, scenario),
            bodyOf(waiter, scenario),
        };
    }

    fn notifier(scenario: *NotifyScenario, io_: Io) void {
        for (0..notifications + waiters) |sent| {
            scenario.notify.notifyOne(io_);
            const before: u32 = @intCast(sent);
            while (scenario.consumed.load(.acquire) == before) {
                io_.futexWaitUncancelable(u32, &scenario.consumed.raw, before);
            }
        }
    }

    fn waiter(scenario: *NotifyScenario, io_: Io) void {
        while (true) {
            if (scenario.prng.random().uintLessThan(u32, 4) == 0) {
                scenario.notify.waitUncancelable(io_);
            } else while (true) {
                const deadline = maybeDeadline(io_, scenario.prng.random());
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                scenario.notify.waitTimeout(io_, timeout) catch |err| {
                    noteError(io_, err);
                    continue; // consumed nothing
                };
                break;
            }
            const index = scenario.consumed.fetchAdd(1, .acq_rel);
            io_.futexWake(u32, &scenario.consumed.raw, 1);
            cancelationPoint(io_);
            if (index >= notifications) return; // a stop
        }
    }

    fn check(scenario: *NotifyScenario) !void {
        const consumed = scenario.consumed.load(.monotonic);
        try std.testing.expectEqual(@as(u32, notifications + waiters), consumed);
        try std.testing.expect(!scenario.notify.tryWait()); // no permit left behind
        try std.testing.expect(scenario.notify.waiters.isEmpty());
    }
};

test "interleave: Notify, 1000 seeds: each notification consumed once, every cancel seen once" {
    try checkSeeds(NotifyScenario);
}

/// Three callers run two transactions each on one `Registry` resource, with a deadline now and
/// then; their waits in the resource's line are canceled, time out and wake spuriously at
/// random (a failed transaction never ran its function, and is retried). Inside, an atomic
/// counter checks the exclusion, its steps letting the others run meanwhile. A resource
/// handed to a waiter that was canceled in the same instant must pass on to the next one
/// (the registry delivers the re-armed request before the function starts): one lost is a
/// deadlock, a function that ran for a failed transaction shows in the counts.
const RegistryScenario = struct {
    /// The registry's table, allocated here so that an abandoned (failed) run leaks nothing.
    memory: [4096]u8 = undefined,
    allocator: std.heap.FixedBufferAllocator = undefined,
    registry: *Resources = undefined,
    id: Resources.Id = undefined,
    prng: std.Random.DefaultPrng,
    inside: atomic.Value(u32) = .init(0),
    exclusion_broken: bool = false,
    /// Per caller: functions run, and transactions that returned success.
    ran: [callers]u32 = @splat(0),
    succeeded: [callers]u32 = @splat(0),
    torn_down: u32 = 0,

    const Resources = Registry(Resource);
    const Resource = struct { scenario: *RegistryScenario };
    const callers = 3;
    const transactions = 2;
    const rearming_threads = [_]usize{ 0, 1, 2 };

    fn init(seed: u64) RegistryScenario {
        return .{ .prng = .init(seed ^ 0x4e61) };
    }

    fn bodies(scenario: *RegistryScenario) [callers]Body {
        scenario.allocator = .init(&scenario.memory);
        scenario.registry = Resources.init(scenario.allocator.allocator(), .{
            .resources_max = 1,
            .teardown = tearDown,
        }) catch unreachable; // sized for one slot
        scenario.id = scenario.registry.register(.{ .scenario = scenario }) catch unreachable;
        return .{
            bodyOf(caller0, scenario),
            bodyOf(caller1, scenario),
            bodyOf(caller2, scenario),
        };
    }

    fn tearDown(io_: Io, resource: *Resource) void {
        _ = io_;
        resource.scenario.torn_down += 1;
    }

    fn work(resource: *Resource, caller: usize) void {
        const scenario = resource.scenario;
        if (scenario.inside.fetchAdd(1, .monotonic) != 0) scenario.exclusion_broken = true;
        scenario.ran[caller] += 1;
        _ = scenario.inside.fetchSub(1, .monotonic);
    }

    fn call(scenario: *RegistryScenario, io_: Io, index: usize) void {
        while (scenario.succeeded[index] < transactions) {
            const deadline = maybeDeadline(io_, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            const registry = scenario.registry;
            registry.transactionTimeout(io_, scenario.id, timeout, work, .{index}) catch |err|
                switch (err) {
                    error.Canceled, error.DeadlineExceeded => {
                        noteError(io_, err);
                        continue; // `work` never ran
                    },
                    else => unreachable, // a live id, a short line, no shutdown, not nested
                };
            scenario.succeeded[index] += 1;
            cancelationPoint(io_);
        }
    }

    fn caller0(scenario: *RegistryScenario, io_: Io) void {
        scenario.call(io_, 0);
    }

    fn caller1(scenario: *RegistryScenario, io_: Io) void {
        scenario.call(io_, 1);
    }

    fn caller2(scenario: *RegistryScenario, io_: Io) void {
        scenario.call(io_, 2);
    }

    fn check(scenario: *RegistryScenario) !void {
        try std.testing.expect(!scenario.exclusion_broken);
        for (scenario.ran, scenario.succeeded) |ran, succeeded| {
            try std.testing.expectEqual(@as(u32, transactions), succeeded);
            try std.testing.expectEqual(succeeded, ran);
        }
        try std.testing.expectEqual(@as(u32, 0), scenario.registry.waiting(scenario.id));
        // Off the checker, on std's Io: nothing is held, so nothing waits.
        scenario.registry.deinit(std.testing.io);
        try std.testing.expectEqual(@as(u32, 1), scenario.torn_down);
    }
};

test "interleave: Registry, 1000 seeds: exclusive, nothing lost, every cancel seen once" {
    try checkSeeds(RegistryScenario);
}

/// A sender fills four oneshots in turn (closing one of them instead, on some seeds) while a
/// receiver takes them in turn; its receives are canceled, time out and wake spuriously at
/// random (the value then stays for the next try). `Oneshot` has its own re-arm, apart from
/// `WaitQueue`'s: after a value (or the close) that won the race, and in its withdrawal.
const OneshotScenario = struct {
    oneshots: [count]Oneshot(u32) = @splat(.init),
    prng: std.Random.DefaultPrng,
    /// The oneshot closed instead of sent, if any.
    closed: ?usize,
    received: [count]?u32 = @splat(null),
    closed_seen: [count]bool = @splat(false),

    const count = 4;
    const rearming_threads = [_]usize{1}; // the receiver

    fn init(seed: u64) OneshotScenario {
        var prng: std.Random.DefaultPrng = .init(seed ^ 0x0e5e);
        const closed = prng.random().uintLessThan(usize, 2 * count);
        return .{ .prng = prng, .closed = if (closed < count) closed else null };
    }

    fn bodies(scenario: *OneshotScenario) [2]Body {
        return .{ bodyOf(sender, scenario), bodyOf(receiver, scenario) };
    }

    fn sender(scenario: *OneshotScenario, io_: Io) void {
        for (&scenario.oneshots, 0..) |*oneshot, index| {
            if (scenario.closed == index) {
                oneshot.close(io_);
            } else {
                oneshot.send(io_, @intCast(index));
            }
        }
    }

    fn receiver(scenario: *OneshotScenario, io_: Io) void {
        for (&scenario.oneshots, 0..) |*oneshot, index| {
            while (true) {
                const deadline = maybeDeadline(io_, scenario.prng.random());
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                const value = oneshot.recvTimeout(io_, timeout) catch |err| switch (err) {
                    error.Canceled, error.Timeout => {
                        noteError(io_, err);
                        continue; // the value, if it comes, stays
                    },
                    error.Closed => {
                        scenario.closed_seen[index] = true;
                        break;
                    },
                };
                scenario.received[index] = value;
                break;
            }
            cancelationPoint(io_);
        }
    }

    fn check(scenario: *OneshotScenario) !void {
        for (scenario.received, scenario.closed_seen, 0..) |received, closed_seen, index| {
            try std.testing.expectEqual(scenario.closed == index, closed_seen);
            const expected: ?u32 = if (closed_seen) null else @intCast(index);
            try std.testing.expectEqual(expected, received);
        }
    }
};

test "interleave: Oneshot, 1000 seeds: each value received once, every cancel seen once" {
    try checkSeeds(OneshotScenario);
}

/// Three parties pass a `Barrier` twice, now and then uncancelably; their waits are canceled
/// and wake spuriously at random (a canceled party takes its arrival back and arrives again).
/// `Barrier` has its own re-arm: a party canceled after its generation opened passes and
/// re-arms the request. Each generation must have exactly one leader and let every party
/// through once.
const BarrierScenario = struct {
    barrier: Barrier = .init(parties),
    prng: std.Random.DefaultPrng,
    passed: [parties]u32 = @splat(0),
    leaders: u32 = 0,

    const parties = 3;
    const rounds = 2;
    const rearming_threads = [_]usize{ 0, 1, 2 };

    fn init(seed: u64) BarrierScenario {
        return .{ .prng = .init(seed ^ 0xba77) };
    }

    fn bodies(scenario: *BarrierScenario) [parties]Body {
        return .{
            bodyOf(party0, scenario),
            bodyOf(party1, scenario),
            bodyOf(party2, scenario),
        };
    }

    fn pass(scenario: *BarrierScenario, io_: Io, index: usize) void {
        for (0..rounds) |_| {
            const leader = if (scenario.prng.random().uintLessThan(u32, 4) == 0)
                scenario.barrier.waitUncancelable(io_)
            else while (true) {
                break scenario.barrier.wait(io_) catch |err| {
                    noteError(io_, err);
                    continue; // arrival taken back
                };
            };
            if (leader) scenario.leaders += 1;
            scenario.passed[index] += 1;
            cancelationPoint(io_);
        }
    }

    fn party0(scenario: *BarrierScenario, io_: Io) void {
        scenario.pass(io_, 0);
    }

    fn party1(scenario: *BarrierScenario, io_: Io) void {
        scenario.pass(io_, 1);
    }

    fn party2(scenario: *BarrierScenario, io_: Io) void {
        scenario.pass(io_, 2);
    }

    fn check(scenario: *BarrierScenario) !void {
        for (scenario.passed) |passed| try std.testing.expectEqual(@as(u32, rounds), passed);
        try std.testing.expectEqual(@as(u32, rounds), scenario.leaders);
        const state = scenario.barrier.state.load(.monotonic);
        try std.testing.expectEqual(@as(u16, 0), state.arrived);
        try std.testing.expectEqual(@as(u16, rounds), state.generation);
    }
};

test "interleave: Barrier, 1000 seeds: one leader per generation, every cancel seen once" {
    try checkSeeds(BarrierScenario);
}

test "interleave: the checker finds a cancel request lost, and one delivered twice" {
    // Deliberately broken timed waits on a word nobody changes: after `error.Canceled`, one
    // returns normally without re-arming the request, the other (`double`) re-arms it and
    // returns `error.Canceled` as well.
    const Broken = struct {
        word: u32 = 0,
        double: bool,

        const timeout: Io.Timeout = .{ .duration = .{
            .raw = .fromNanoseconds(1000),
            .clock = .awake,
        } };

        fn waitOnce(broken: *@This(), io_: Io) error{Canceled}!void {
            io_.futexWaitTimeout(u32, &broken.word, 0, timeout) catch |err| switch (err) {
                error.Canceled => {
                    if (broken.double) io_.recancel();
                    if (broken.double) return error.Canceled;
                },
            };
        }

        fn waiter(broken: *@This(), io_: Io) void {
            for (0..8) |_| {
                broken.waitOnce(io_) catch |err| noteError(io_, err);
                cancelationPoint(io_);
            }
        }
    };
    var checker: Checker = try .init(std.testing.allocator);
    defer checker.deinit();
    for ([_]bool{ false, true }) |double| {
        var found: u32 = 0;
        for (0..50) |seed| {
            var broken: Broken = .{ .double = double };
            const bodies = [_]Body{bodyOf(Broken.waiter, &broken)};
            checker.run(seed, .{ .cancel_one_in = 2 }, &bodies) catch |err| {
                const expected: Failure =
                    if (double) error.CancelDeliveredTwice else error.CancelLost;
                try std.testing.expectEqual(expected, err);
                found += 1;
            };
        }
        try std.testing.expect(found > 0);
    }
}

test "interleave: the checker finds a lost wake-up" {
    // A deliberately broken hand-off: the waker changes the word but never wakes.
    const Broken = struct {
        word: atomic.Value(u32) = .init(0),

        fn waiter(broken: *@This(), io_: Io) void {
            while (broken.word.load(.acquire) == 0) {
                io_.futexWaitUncancelable(u32, &broken.word.raw, 0);
            }
        }

        fn setter(broken: *@This(), io_: Io) void {
            _ = io_;
            broken.word.store(1, .release); // and no futexWake
        }
    };
    var checker: Checker = try .init(std.testing.allocator);
    defer checker.deinit();
    var found: u32 = 0;
    for (0..50) |seed| {
        var broken: Broken = .{};
        const bodies = [_]Body{ bodyOf(Broken.waiter, &broken), bodyOf(Broken.setter, &broken) };
        checker.run(seed, .{ .spurious_one_in = 0 }, &bodies) catch |err| {
            try std.testing.expectEqual(error.LostWakeUp, err);
            found += 1;
        };
    }
    try std.testing.expect(found > 0); // some seeds park the waiter before the store
}
