//! One executor: an OS thread that runs fibers and drives one loop. A runtime has one or more;
//! `Scheduler` holds what they share.
//!
//! ## Switching
//!
//! A task that parks picks the next ready task itself and switches straight to it: a hand-off
//! between two tasks is one context switch (a scheduler fiber would double it; measured as the
//! main cost of ping-pong). Only when nothing is ready does the executor switch to its *idle
//! context* (the worker thread's own stack; a small fiber on executor 0, whose thread's stack is
//! the main task's), which searches other executors for work and blocks in the loop. Polling
//! there and not on the parking task's stack matters with more than one executor: a parked task
//! may be woken and resumed by another executor at any moment, which it could not be while this
//! executor still stood on its stack.
//!
//! ## `on_cpu`, the stack hand-off rule
//!
//! A task can be woken, and popped by another executor, before the executor it runs on has
//! finished switching away from it. `Task.on_cpu` is set by the executor that resumes a task and
//! cleared, with release, by the executor that switched away from it, in the first code that runs
//! after the switch (`landed`). An executor that pops a task still on a CPU does not resume it
//! from a task's stack (two executors could each wait for the other's task): it switches to its
//! idle context, which holds no task, and waits there until the flag clears.
//!
//! ## Queues, in the order `findReady` looks at them
//!
//! 1. every `dispatches_per_poll` dispatches: the loop and the timers (non-blocking), then the
//!    injection queues, so that a stream of local work cannot starve I/O or remote wake-ups;
//! 2. `lifo`: the task this executor woke last, at most `lifo_streak_max` times in a row;
//! 3. `local`: tasks bound to this executor (`Task.home`), FIFO, never stolen;
//! 4. `ring`: the stealable FIFO ring (sched/RunQueue.zig), except that the ring tasks queued
//!    before a bound task went to the back of `local` run before it (`ring_ahead`);
//! 5. `inject`: bound tasks woken by other threads, then the scheduler's global queue.
//!
//! A retired executor (Scheduler.zig, "Retiring executors") looks only at its loop, `local`
//! and its own `inject`, and moves what `lifo` and `ring` hold to the global queue
//! (`findReadyRetired`).
//!
//! ## Thread-locals across migration
//!
//! A task may resume on another thread than the one it parked on. Code after a switch must not
//! reuse a thread-local's address computed before it: `landedHere` reads the executor through a
//! function the optimiser cannot merge across the switch.
const Executor = @This();

const std = @import("std");
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const SpinLock = @import("../os/SpinLock.zig");
const Loop = @import("../loop/Loop.zig");
const context = @import("../fiber/context.zig");
const stack_mod = @import("../fiber/stack.zig");
const Task = @import("Task.zig");
const Timers = @import("Timers.zig");
const overflow = @import("overflow.zig");
const Scheduler = @import("Scheduler.zig");
const RunDelay = @import("../contention/RunDelay.zig");
const RunnableCount = @import("../contention/RunnableCount.zig");
const RunQueue = @import("RunQueue.zig").RunQueue(Task, config.run_queue_len);

const TaskQueue = @import("../intrusive.zig").Queue(Task);
const Counter = @import("../os/Counter.zig");
const Watchdog = @import("Watchdog.zig");
const ThreadWaiter = @import("Waiter.zig").ThreadWaiter;
const os_thread = @import("../os/thread.zig");
const log = std.log.scoped(.weft);

scheduler: *Scheduler,
index: u32,
loop: Loop,
stacks: stack_mod.Pool,
ring: RunQueue = .{},
/// The task this executor woke last: runs next. Not stealable: written by the owner, which
/// brackets each move in or out with `queues_guard`, and emptied only by the watchdog's
/// signal handler on the owner's own thread while one task holds the executor
/// (`surrenderHeld`). Atomic for the watchdog's look from its thread; the owner's loads and
/// stores are relaxed, plain moves on every target.
lifo: std.atomic.Value(?*Task) = .init(null),
/// Set while the owner moves a task in or out of `lifo` or `local`: the signal handler, which
/// may interrupt the owner's thread between a load and a store, leaves them alone then.
queues_guard: bool = false,
/// The tasks the signal handler took from `lifo` and, the main task, from `local`, for the
/// watchdog to queue where another executor runs them (`Watchdog.handOverHeld`).
surrendered: std.atomic.Value(?*Task) = .init(null),
surrendered_main: std.atomic.Value(?*Task) = .init(null),
/// Tasks taken from `lifo` in a row; capped so that two tasks waking each other cannot
/// starve the ring.
lifo_streak: u32 = 0,
/// Ready tasks bound to this executor. Owner only.
local: TaskQueue = .{},
/// Ring tasks that run before `local` is looked at again: the ring's length when a bound task
/// last went to the back of `local` (a yield, or the LIFO cap). Without it a bound task that
/// keeps yielding (the main task, on the thread's own stack) would run ahead of the ring for
/// ever, since `local` is looked at first. Stealing may empty the ring sooner; then it is reset.
ring_ahead: u32 = 0,
/// Bound tasks woken by other threads.
inject_lock: SpinLock = .{},
inject: TaskQueue = .{},
inject_count: std.atomic.Value(usize) = .init(0),
/// Timers of tasks that parked here. Locked: a task that resumes elsewhere stops its timer
/// from there.
timers_lock: SpinLock = .{},
timers: Timers,
/// The task running on this executor; null while the idle context runs.
current: ?*Task = null,
idle_context: context.Context = undefined,
/// Executor 0's idle context runs on this mapping (a worker's runs on its thread's stack).
idle_stack: ?[]align(std.heap.page_size_min) u8 = null,
/// The alternate signal stack `start` mapped for this executor's thread, which had none (see
/// sched/overflow.zig); null when the thread has std's, or stacks are unguarded.
signal_stack: ?[]align(std.heap.page_size_min) u8 = null,
/// Where a finished task's registers go when it switches away for the last time.
dead_context: context.Context = undefined,
/// The task this executor switched away from; its `on_cpu` is cleared once we landed.
switched_from: ?*Task = null,
/// The stack of the task that finished last, released once we are off it.
zombie_stack: ?stack_mod.Stack = null,
/// A task popped while still on another executor's CPU, for the idle context to resume.
handoff: ?*Task = null,
dispatches: u32 = 0,
/// True while the executor polls its loop and timers (see `pushWoken`).
polling: bool = false,
/// Set when a poll queued stealable work: `pollIo` decides once, after the whole batch, whether
/// to tell idle executors (see `notifyAfterPoll`).
poll_queued: bool = false,
/// Whether this executor holds one count of `Scheduler.searching`.
searching: bool = false,
/// Guarded by `Scheduler.idle_lock`.
idle_listed: bool = false,
woken_to_search: bool = false,
/// How long this executor's thread waits for a CPU; opened by `start` on that thread.
run_delay: RunDelay = .{},
/// Whether another thread wants a CPU machine-wide; opened for executor 0 only, and sampled
/// while it polls alone (`searchAlone`).
runnable_count: RunnableCount = .{},
/// Polls allowed to block in the kernel (the executor found nothing to run); read by tests.
polls_blocked: u64 = 0,
/// Polls of `searchAlone`'s spin; read by tests.
polls_alone: u64 = 0,
/// Picks steal victims (xorshift); any sequence that visits every executor will do.
random_state: u32,
thread: ?std.Thread = null,
/// Whether `start` created the loop.
started: bool = false,
steal_buffer: [RunQueue.len_max / 2]*Task = undefined,
/// For `weft.Metrics`; the loop counts its operations (`Loop.Counters`).
counters: Counters = .{},
/// `os.monotonicCoarseNs` as of this executor's last poll of its loop (at least every
/// `config.dispatches_per_poll` dispatches, and after every sleep): the birth time of the
/// tasks created here (sched/LiveTasks.zig), without a clock read per spawn. Own thread only.
/// Late by the time since that poll, which a task that runs long without switching stretches.
clock_coarse_ns: u64 = 0,
/// When this executor next sweeps its stack pool (`sweepStacks`), on the coarse clock.
sweep_due_ns: u64 = 0,
/// For the stall detector (sched/Watchdog.zig) and `Metrics`: twice the runs begun here, plus
/// one while a run goes on (`beginRun`), so it changes with each run. Written by this
/// executor's thread only; not at all with `-Dmetrics=false`, which turns the stall detector
/// off with the counters.
activity: std.atomic.Value(u64) = .init(0),
/// The `activity` the watchdog found stalled, until it saw the stall end: the executor then
/// stamps `stall_end_ns` at its next poll (`stampStallEnd`; two loads per poll otherwise).
stalled_activity: std.atomic.Value(u64) = .init(activity_none),
stall_end_ns: std.atomic.Value(u64) = .init(0),
/// The id of this executor's thread, for the watchdog's sampling signal; set by `start`.
tid: std.atomic.Value(i32) = .init(0),
/// Where this executor's thread leaves its registers when the watchdog samples its stack.
stall_sample: Watchdog.Sample = .{},
/// The watchdog's request that this thread, held by one task, post its ring's deferred
/// completions for a rescue and hand over its LIFO task (`Watchdog.interruptHeld`).
post_request: std.atomic.Value(u32) = .init(Watchdog.post_idle),

/// What an executor counts (os/Counter.zig): written by its own thread unless marked shared.
pub const Counters = struct {
    /// Tasks started by code running on this executor.
    spawned: Counter = .{},
    /// Tasks this executor took from other executors' run queues.
    stolen: Counter = .{},
    /// Tasks other executors took from this one's run queue.
    stolen_by_others: Counter.Shared = .{},
    /// Times the next task came from the LIFO slot (a task woken by the one before it).
    lifo_hits: Counter = .{},
    /// Times the thread slept in the kernel, out of work (blocking polls).
    sleeps: Counter = .{},
    /// Time spent in those sleeps.
    idle_ns: Counter = .{},
    /// Timers started here, and those that went off (the rest were stopped first).
    timers_armed: Counter = .{},
    timers_fired: Counter = .{},
};

pub const Hooks = struct {
    /// Runs the task's function and ends the task (`exitCurrent`); called on its own stack.
    run: *const fn (hooks_context: *anyopaque, task: *Task) noreturn,
};

threadlocal var current_executor: ?*Executor = null;

pub const InitError = Loop.InitError || std.mem.Allocator.Error || os.MapError;

pub const Options = struct {
    loop: Loop.Choice,
    stack_size_bytes: usize,
    stack_guard: stack_mod.Guard,
    /// Stacks per slab of the executor's pool (`stack_mod.Pool.slab_stacks`).
    slab_stacks: usize = config.slab_stacks,
};

/// Initialises executor `index` of `scheduler` in place. Call `start` on the thread that will
/// run it (the loop's ring belongs to the thread that creates it).
pub fn init(executor: *Executor, scheduler: *Scheduler, index: u32, options: Options) void {
    executor.* = .{
        .scheduler = scheduler,
        .index = index,
        .loop = undefined,
        .stacks = .init(
            scheduler.gpa,
            options.stack_size_bytes,
            options.stack_guard,
            &scheduler.stacks_shared,
        ),
        .timers = .{ .gpa = scheduler.gpa },
        .random_state = index *% 0x9E3779B9 +% 1,
    };
    executor.stacks.slab_stacks = options.slab_stacks;
}

/// On the executor's own thread: creates its loop and makes the thread run this executor.
/// Executor 0 also adopts the thread's current code as the main task.
pub fn start(executor: *Executor, loop_choice: Loop.Choice) InitError!void {
    assert(current_executor == null); // one executor per thread
    if (executor.stacks.guard == .page) {
        // A fault on a guard page is named (sched/overflow.zig), from this thread's alternate
        // signal stack: the faulting fiber's own is spent.
        executor.signal_stack = try overflow.ensureSignalStack();
        overflow.install();
    }
    errdefer if (executor.signal_stack) |memory| {
        overflow.releaseSignalStack(memory, true);
        executor.signal_stack = null;
    };
    try executor.loop.init(loop_choice);
    errdefer executor.loop.deinit();
    executor.started = true;
    errdefer executor.started = false;
    // Run delay where executors can hand work to each other (see `search`); the runnable
    // count for a lone executor's poll (see `searchAlone`), which only executor 0 can be:
    // alone in its runtime, or the one left when the others retire (it never does).
    if (executor.scheduler.executors.len > 1) executor.run_delay = .open(os.monotonicNs());
    if (executor.index == 0) executor.runnable_count = .open(executor.scheduler.cpus);
    executor.clock_coarse_ns = os.monotonicCoarseNs();
    errdefer executor.run_delay.close();
    errdefer executor.runnable_count.close();
    if (executor.index == 0) {
        // Its own mapping, not a pool stack: it is not a task's, and its size is the
        // executor's need (callbacks, timers), not the tasks' configured one.
        const len = config.executor_thread_stack_size_bytes;
        const idle_stack = (try os.mapAnonymous(len))[0..len];
        executor.idle_stack = idle_stack;
        context.prepare(&executor.idle_context, idle_stack, &idleEntry, executor);
        const main_task = &executor.scheduler.main_task;
        main_task.on_cpu.store(true, .monotonic);
        executor.current = main_task;
        executor.activity.store(1, .monotonic); // the main task runs
    }
    executor.tid.store(os.currentTid(), .monotonic);
    current_executor = executor;
}

pub const StartError = InitError || error{SystemResources};

/// Starts a thread that runs this executor (a worker, or the spare) and waits until its loop
/// exists, or failed to.
pub fn startThread(executor: *Executor, loop_choice: Loop.Choice) StartError!void {
    assert(executor.index != 0);
    assert(executor.thread == null);
    const Startup = struct {
        waiter: ThreadWaiter = .{},
        result: InitError!void = {},

        fn main(startup: *@This(), worker: *Executor, choice: Loop.Choice) void {
            worker.start(choice) catch |err| {
                startup.result = err;
                startup.waiter.wake(); // our last touch of `startup`
                return;
            };
            startup.waiter.wake();
            worker.runWorker();
        }
    };
    var startup: Startup = .{};
    const thread = os_thread.spawn(
        "executor",
        "config.executor_thread_stack_size_bytes (weft's own frames: a bug, please report it)",
        config.executor_thread_stack_size_bytes,
        null,
        Startup.main,
        .{ &startup, executor, loop_choice },
    ) catch return error.SystemResources; // logged with the sizes by `spawn`
    _ = startup.waiter.wait(null);
    startup.result catch |err| {
        thread.join();
        return err;
    };
    executor.thread = thread;
}

/// Whether this is its scheduler's spare executor (Scheduler.zig, "The spare executor").
pub fn isSpare(executor: *const Executor) bool {
    return executor.index >= executor.scheduler.executors.len;
}

/// Releases what `init` and `start` took. The executor's thread has stopped (or, for executor
/// 0, is the caller). Every pool of the runtime must be done: see `stack.Pool.deinit`.
pub fn deinit(executor: *Executor) void {
    executor.releaseZombie();
    assert(executor.lifo.load(.monotonic) == null);
    assert(executor.surrendered.load(.monotonic) == null);
    assert(executor.surrendered_main.load(.monotonic) == null);
    assert(executor.local.isEmpty());
    assert(executor.ring.isEmpty());
    assert(executor.inject.isEmpty());
    if (executor.signal_stack) |memory| {
        overflow.releaseSignalStack(memory, current_executor == executor);
    }
    if (current_executor == executor) current_executor = null;
    executor.run_delay.close();
    executor.runnable_count.close();
    if (executor.started) executor.loop.deinit();
    if (executor.idle_stack) |idle_stack| {
        context.finish(@intFromPtr(idle_stack.ptr) + idle_stack.len);
        os.unmap(idle_stack);
    }
    executor.timers.deinit();
    executor.stacks.deinit();
    executor.* = undefined;
}

/// The executor of the calling thread, or null on a thread weft does not run.
///
/// Never inlined, like every read of `current_executor`: code that runs before and after a
/// context switch may run on two threads, and an inlined read could reuse the thread-local's
/// address computed before the switch (the optimiser treats it as constant within a function).
pub noinline fn ofThread() ?*Executor {
    return current_executor;
}

fn ofThreadAfterSwitch() *Executor {
    return ofThread().?;
}

/// The task running on the calling thread, or null on a thread weft does not run (or in an
/// executor's idle context, where no task runs).
pub fn currentTask() ?*Task {
    const executor = ofThread() orelse return null;
    return executor.current;
}

/// Who calls, as a number that two callers running at once never share: the running task's
/// address or, on a thread weft does not run (whose blocking calls block the thread, and which
/// never migrates), the address of a thread-local, unique per thread and never a task's.
/// Never 0.
pub fn callerId() usize {
    if (currentTask()) |task| return @intFromPtr(task);
    const Marker = struct {
        threadlocal var byte: u8 = 0;
    };
    return @intFromPtr(&Marker.byte);
}

/// Whether a task about to park for a hand-off from another task should spin for it first:
/// the calling thread is an executor with nothing else to run, and another executor is awake,
/// so the task that will hand over can be running right now. A hand-off that lands within the
/// spin saves the park, the wake and two context switches; with one executor (or all others
/// asleep) nobody can hand over while we spin, so it would only delay the tasks queued here.
/// Go's sync.Mutex spins under the same conditions (`sync_runtime_canSpin`).
pub fn spinWorthwhile() bool {
    const executor = ofThread() orelse return false;
    const scheduler = executor.scheduler;
    if (scheduler.executors.len < 2) return false;
    if (executor.lifo.load(.monotonic) != null or !executor.ring.isEmpty()) return false;
    return scheduler.sleeping.load(.monotonic) + 1 < scheduler.executors.len;
}

// ---------------------------------------------------------------------------------------------
// Queueing.

/// Owner only: a task woken on this executor by a running task runs next; the one it
/// displaces is queued. Tasks woken by the executor's own poll (I/O completions, timers) are
/// queued in order instead: a batch of expired timers runs earliest deadline first, and a
/// burst of completions is served first come, first served.
pub fn pushWoken(executor: *Executor, task: *Task) void {
    assert(ofThread() == executor);
    assert(task.home == null or task.home == executor);
    if (executor.polling) return executor.enqueue(task);
    executor.guardQueues(true);
    const displaced = executor.lifo.load(.monotonic);
    executor.lifo.store(task, .monotonic);
    executor.guardQueues(false);
    // The displaced task was next in line: it stays at the front. In fork-join code (a task
    // spawning children and awaiting them) this keeps the traversal depth-first, so the tasks
    // alive at once stay in the tree's depth instead of its width. The LIFO cap still sends a
    // task that keeps coming back to the back of the queue.
    if (displaced) |previous| executor.enqueueAt(previous, .front);
}

/// Owner only: empties the LIFO slot.
fn takeLifo(executor: *Executor) ?*Task {
    executor.guardQueues(true);
    defer executor.guardQueues(false);
    const task = executor.lifo.load(.monotonic) orelse return null;
    executor.lifo.store(null, .monotonic);
    return task;
}

/// Owner only: raises or lowers `queues_guard`. The handler that reads it runs on this
/// thread, so only the compiler could reorder the flag and the queues' accesses: a compiler
/// barrier after the raise and before the lowering keeps the flag around them, with no
/// instruction on the CPU.
inline fn guardQueues(executor: *Executor, on: bool) void {
    if (on) {
        executor.queues_guard = true;
        asm volatile ("" ::: .{ .memory = true });
    } else {
        asm volatile ("" ::: .{ .memory = true });
        executor.queues_guard = false;
    }
}

/// Owner only: queues a task bound here at the back of `local`, under `queues_guard`, without
/// the bookkeeping of `enqueue` (for `Scheduler.makeReady`, which queues a woken bound task).
pub fn pushLocal(executor: *Executor, task: *Task) void {
    assert(ofThread() == executor);
    assert(task.home == executor);
    executor.guardQueues(true);
    defer executor.guardQueues(false);
    executor.local.push(task);
}

/// Owner only: pops `local` under `queues_guard`.
fn popLocal(executor: *Executor) ?*Task {
    executor.guardQueues(true);
    defer executor.guardQueues(false);
    return executor.local.pop();
}

/// From the watchdog's signal handler, on this executor's thread, while one task holds the
/// executor: moves the task in the LIFO slot to `surrendered`, and the main task from `local`
/// to `surrendered_main`, where the watchdog takes them and queues them for another executor.
/// Nothing while the owner is moving a task in or out of those queues (the watchdog asks again
/// at its next look), nor into a slot the watchdog has not emptied yet. A task bound here stays
/// (its I/O is on this executor's ring), except the main task, which the watchdog displaces
/// (`Scheduler.displaceMain`).
pub fn surrenderHeld(executor: *Executor) void {
    if (executor.queues_guard) return;
    const scheduler = executor.scheduler;
    if (executor.surrendered.load(.monotonic) == null) {
        if (executor.lifo.load(.monotonic)) |task| {
            if (task.home == null or scheduler.mainDisplaceable(task)) {
                executor.lifo.store(null, .monotonic);
                executor.surrendered.store(task, .release);
            }
        }
    }
    const main_task = &scheduler.main_task;
    if (executor.surrendered_main.load(.monotonic) != null) return;
    // A short scan: `local` holds the tasks bound here, few but for pinned mode (never here).
    // Only a queued main task's fields are read: it may run on another executor otherwise.
    if (!executor.local.contains(main_task)) return;
    if (!scheduler.mainDisplaceable(main_task)) return;
    const removed = executor.local.remove(main_task);
    assert(removed);
    executor.surrendered_main.store(main_task, .release);
}

/// Owner only: queues `task` at the back: `local` when it is bound here, else the ring
/// (moving half of a full ring to the global queue), then tells idle executors.
pub fn enqueue(executor: *Executor, task: *Task) void {
    executor.enqueueAt(task, .back);
}

const End = enum { back, front };

/// `enqueue`, at either end of the queue.
fn enqueueAt(executor: *Executor, task: *Task, end: End) void {
    assert(ofThread() == executor);
    if (task.home) |home| {
        assert(home == executor);
        switch (end) {
            .back => {
                executor.guardQueues(true);
                executor.local.push(task);
                executor.guardQueues(false);
                executor.ring_ahead = executor.ring.len();
            },
            .front => {
                executor.guardQueues(true);
                executor.local.pushFront(task);
                executor.guardQueues(false);
            },
        }
        return;
    }
    while (!switch (end) {
        .back => executor.ring.push(task),
        .front => executor.ring.pushFront(task),
    }) {
        const count = executor.ring.popHalf(&executor.steal_buffer);
        executor.scheduler.pushGlobalBatch(executor.steal_buffer[0..count]);
    }
    if (executor.polling) {
        executor.poll_queued = true;
    } else {
        executor.notifyAfterPush();
    }
}

/// After a running task queued stealable work here: wakes an idle executor
/// (`Scheduler.notifyWork`), unless, as after a poll (`notifyAfterPoll`), the CPUs are
/// contended (`Scheduler.cpusContended`), or the task is the only one queued here and no CPU
/// is likely spare (`spareCpuLikely`): this executor, awake, runs it as soon as the running
/// task blocks or yields. Measured with `ab` (a connection per request) on 2 executors sharing
/// 2 cores with it: the accept loop, queued here alone each time a connection's task started,
/// woke the sleeping executor a few hundred times over 5,000 requests, onto the CPU that `ab`
/// needed (run delay did not see it: executor 0, on its own core, waited for none). Work
/// queued behind other work still wakes an executor whatever the runnable count, a sample up
/// to a window old that may still count an executor gone to sleep since (checking it on every
/// push made the yield storm on 2 executors look slower, 9.4-16 against 7.9-15 ns per yield,
/// within this VM's noise; the lone-task rule is level: medians 9.05 and 8.9 ns over 12 runs
/// each). The clock is read only when someone would be woken.
fn notifyAfterPush(executor: *Executor) void {
    const scheduler = executor.scheduler;
    if (scheduler.executors.len > 1 and scheduler.wouldWake()) {
        const now_ns = os.monotonicNs();
        if (scheduler.cpusContended(now_ns)) return;
        const alone_queued = executor.ring.len() == 1 and executor.lifo.load(.monotonic) == null and
            executor.local.isEmpty();
        if (alone_queued and !executor.spareCpuLikely(now_ns)) return;
    }
    scheduler.notifyWork();
}

/// Whether a thread woken now would likely find a CPU of its own (`RunnableCount.spareCpuLikely`),
/// on executor 0, which samples the machine's runnable count; true elsewhere, and under
/// `cpu_contention = .ignore`.
fn spareCpuLikely(executor: *Executor, now_ns: u64) bool {
    if (executor.runnable_count.fd == null) return true;
    if (executor.scheduler.contention_policy != .adapt) return true;
    return executor.runnable_count.spareCpuLikely(now_ns);
}

/// Thread-safe: queues a task bound to this executor from another thread.
pub fn pushInject(executor: *Executor, task: *Task) void {
    assert(task.home == executor);
    executor.inject_lock.lock();
    executor.inject.push(task);
    _ = executor.inject_count.fetchAdd(1, .seq_cst);
    executor.inject_lock.unlock();
    executor.loop.notify();
}

/// Thread-safe: takes the main task out of this executor's injection queue, where wakers put
/// it while it is bound here; null when it is not there. For the watchdog, which displaces it
/// while another task holds this executor (`Scheduler.displaceMain`).
pub fn takeMainInjected(executor: *Executor) ?*Task {
    const main_task = &executor.scheduler.main_task;
    if (executor.inject_count.load(.acquire) == 0) return null;
    executor.inject_lock.lock();
    defer executor.inject_lock.unlock();
    // Queued, its fields are still (ordered by the lock): only then are they read.
    if (!executor.inject.contains(main_task)) return null;
    if (!executor.scheduler.mainDisplaceable(main_task)) return null;
    const removed = executor.inject.remove(main_task);
    assert(removed);
    _ = executor.inject_count.fetchSub(1, .monotonic);
    return main_task;
}

fn takeInjected(executor: *Executor) ?*Task {
    if (executor.takeInjectedBound()) |task| return task;
    // Take no more than the ring has room for, plus the one we run now.
    const room = RunQueue.len_max - executor.ring.len();
    const take_max = @min(executor.steal_buffer.len, room + 1);
    const count = executor.scheduler.popGlobal(executor.steal_buffer[0..take_max]);
    if (count == 0) return null;
    executor.keepTaken(count);
    if (count > 1) executor.scheduler.notifyWork();
    return executor.steal_buffer[0];
}

/// Moves the bound tasks other threads woke to `local`, and takes the first.
fn takeInjectedBound(executor: *Executor) ?*Task {
    if (executor.inject_count.load(.acquire) == 0) return null;
    executor.inject_lock.lock();
    const count = executor.inject.count;
    executor.guardQueues(true);
    executor.local.pushAll(&executor.inject);
    executor.guardQueues(false);
    _ = executor.inject_count.fetchSub(count, .monotonic);
    executor.inject_lock.unlock();
    return executor.popLocal();
}

/// Looks at every queue of this executor, without blocking; see the order at the top.
fn findReady(executor: *Executor) ?*Task {
    if (executor.scheduler.isRetired(executor)) return executor.findReadyRetired();
    executor.dispatches +%= 1;
    if (executor.dispatches % config.dispatches_per_poll == 0) {
        executor.pollIo(false);
        if (executor.takeInjected()) |task| return task;
    }
    if (executor.takeLifo()) |task| {
        // The cap is there for the queued tasks: with none queued, moving the task through
        // the ring would only show it to thieves (and wake one) for nothing.
        const others_queued = !executor.local.isEmpty() or !executor.ring.isEmpty();
        if (executor.lifo_streak < config.lifo_streak_max or !others_queued) {
            executor.lifo_streak += 1;
            executor.counters.lifo_hits.increment();
            return task;
        }
        executor.enqueue(task);
    }
    executor.lifo_streak = 0;
    if (executor.ring_ahead > 0) {
        if (executor.ring.pop()) |task| {
            executor.ring_ahead -= 1;
            return task;
        }
        executor.ring_ahead = 0;
    }
    if (executor.popLocal()) |task| return task;
    if (executor.ring.pop()) |task| return task;
    return executor.takeInjected();
}

/// `findReady` of a retired executor (see Scheduler.zig, "Retiring executors"): hands every
/// ready task that may move to the global queue, and runs only those bound here.
fn findReadyRetired(executor: *Executor) ?*Task {
    const scheduler = executor.scheduler;
    // Bound tasks may keep `local` busy: their completions and timers still need a poll now
    // and then (the tasks it wakes that may move are handed on below).
    executor.dispatches +%= 1;
    if (executor.dispatches % config.dispatches_per_poll == 0) executor.pollIo(false);
    var count: usize = 0;
    if (executor.takeLifo()) |task| {
        if (task.home == executor) {
            executor.enqueueAt(task, .front);
        } else {
            executor.steal_buffer[0] = task;
            count = 1;
        }
    }
    while (executor.ring.pop()) |task| {
        if (count == executor.steal_buffer.len) {
            scheduler.pushGlobalBatch(executor.steal_buffer[0..count]);
            count = 0;
        }
        executor.steal_buffer[count] = task;
        count += 1;
    }
    if (count > 0) scheduler.pushGlobalBatch(executor.steal_buffer[0..count]);
    if (executor.popLocal()) |task| return task;
    return executor.takeInjectedBound();
}

/// `findReady`, and gives a task that never ran its stack. Null when nothing is ready.
fn nextRunnable(executor: *Executor) ?*Task {
    while (executor.findReady()) |task| {
        if (executor.readyToRun(task)) return task;
    }
    return null;
}

/// Makes a task that never ran runnable here: its stack (taken now, or reserved at spawn) and
/// its start context. False when no stack can be had: the task then waits with the scheduler's
/// starved tasks.
fn readyToRun(executor: *Executor, task: *Task) bool {
    if (task.context_ready or task == &executor.scheduler.main_task) return true;
    if (task.stack == null) return executor.prepareStart(task);
    executor.prepareContext(task);
    return true;
}

/// Queues all but the first of the `count` tasks just taken into `steal_buffer` on our ring;
/// the caller made sure they fit and runs the first itself.
fn keepTaken(executor: *Executor, count: usize) void {
    assert(count >= 1);
    assert(count - 1 <= RunQueue.len_max - executor.ring.len());
    for (executor.steal_buffer[1..count]) |task| {
        const pushed = executor.ring.push(task);
        assert(pushed);
    }
}

/// Takes half of another executor's ring, starting from a random victim.
fn steal(executor: *Executor) ?*Task {
    const executors = executor.scheduler.executors;
    executor.random_state ^= executor.random_state << 13;
    executor.random_state ^= executor.random_state >> 17;
    executor.random_state ^= executor.random_state << 5;
    const first = executor.random_state % executors.len;
    for (0..executors.len) |offset| {
        const victim = &executors[(first + offset) % executors.len];
        if (victim == executor) continue;
        const count = victim.ring.steal(&executor.steal_buffer);
        if (count == 0) continue;
        // Our ring is empty (we only steal when out of work), so half a ring fits.
        assert(executor.ring.isEmpty());
        executor.counters.stolen.add(count);
        victim.counters.stolen_by_others.add(count);
        executor.keepTaken(count);
        return executor.steal_buffer[0];
    }
    return null;
}

// ---------------------------------------------------------------------------------------------
// Running tasks.

/// Switches away from `task` (the running task) until it is made ready again, possibly on
/// another executor. The caller must have called `task.prepareWait` (or queued the task
/// itself, to yield).
pub fn park(task: *Task) void {
    const executor = task.executor;
    assert(ofThread() == executor);
    assert(executor.current == task);
    const next = executor.nextRunnable();
    if (next != task) {
        executor.switched_from = task;
        executor.resumeFrom(&task.context, task.stack, next);
        landedHere();
    } else {
        // No switch, so no `enter`: the task went back to the scheduler all the same.
        executor.beginRun();
    }
    assert(task.executor == ofThread());
    assert(task.executor.current == task);
    if (task.wait_state.load(.acquire) == .notified) task.wait_state.store(.running, .monotonic);
    // The main task, displaced by the watchdog (`Scheduler.displaceMain`), is bound again once
    // it runs on executor 0 (one compare for every other task).
    if (task.kind == .main and task.home == null and task.executor.index == 0) {
        task.home = task.executor;
    }
}

/// Moves the running main task back to executor 0, the thread that called `Runtime.init`, if
/// the watchdog displaced it (`Scheduler.displaceMain`), and binds it there: for code that
/// must run on that thread (`Runtime.deinit`).
pub fn returnHome(task: *Task) void {
    assert(task.kind == .main);
    assert(task.executor.current == task);
    const home = &task.executor.scheduler.executors[0];
    if (task.executor == home) {
        task.home = home;
        return;
    }
    assert(task.home == null);
    task.home = home;
    home.pushInject(task);
    park(task);
    assert(task.executor == home);
}

/// Runs `child`, a task that never ran, right now on this executor; the running task continues
/// as soon as `child` blocks, yields or ends: it waits in the LIFO slot, not at the back of a
/// queue. Child first, because the child's task memory and stack are hot in the cache at the
/// moment it is spawned: spawning a million short tasks then reuses one stack and one task
/// allocation instead of touching a million of each, and a spawned sleeper starts its sleep
/// when it is spawned rather than after the whole spawning loop. The alternative, queueing the
/// child behind every ready task (Tokio, and Go outside its `runnext` slot), was measured
/// slower here on both counts. Another executor may take the spawner meanwhile only once it
/// was displaced from the LIFO slot into the ring.
pub fn runFirst(executor: *Executor, child: *Task) void {
    assert(ofThread() == executor);
    const me = executor.current.?;
    assert(me != child);
    assert(me.wait_state.load(.monotonic) == .running);
    executor.pushWoken(me);
    if (!executor.readyToRun(child)) {
        // No stack for the child yet (it waits with the scheduler's starved tasks): continue
        // ourselves.
        park(me);
        return;
    }
    executor.switched_from = me;
    executor.resumeFrom(&me.context, me.stack, child);
    landedHere();
    assert(me.executor.current == me);
}

/// Lets the other ready tasks run, then continues (here or on another executor).
pub fn yield(task: *Task) void {
    task.executor.enqueue(task);
    park(task);
}

/// Counts one call of the running `task` that returned without waiting (a cancelation point
/// checked, a file operation answered from the kernel's caches) and yields after every
/// `config.calls_per_yield` of them; returns whether it yielded. Such calls never go back to
/// the scheduler on their own, so a loop of them would hold the executor as a computation
/// does (and be reported as a stall), the other tasks waiting meanwhile.
pub fn cooperate(task: *Task) bool {
    assert(task.executor.current == task);
    task.calls_since_yield += 1;
    if (task.calls_since_yield < config.calls_per_yield) return false;
    task.calls_since_yield = 0;
    // Such a yield counts as one dispatch, and the loop is polled once every
    // `config.dispatches_per_poll` of them: tasks that loop over cached calls would hold this
    // executor's I/O completions and timers for some 4,000 calls (20 ms here). The next look
    // at the queues polls instead (no syscall while nothing is in flight).
    task.executor.pollAtNextDispatch();
    yield(task);
    return true;
}

/// Makes the next `findReady` poll the loop and the timers, as every
/// `config.dispatches_per_poll`-th does.
fn pollAtNextDispatch(executor: *Executor) void {
    const period = config.dispatches_per_poll;
    // Where the counter wraps, the poll may come up to a period later, as it may there anyway.
    executor.dispatches +%= period - 1 - executor.dispatches % period;
}

/// Moves the running `task` to the global queue, for an executor that is not retired to
/// continue, when its own executor retired (Scheduler.zig, "Retiring executors") and nothing
/// binds it here. Called between two I/O operations: the completion of one wakes the task
/// where it was submitted, and without this the next would be submitted there again, the
/// connection never leaving. One load when not retired.
pub fn leaveIfRetired(task: *Task) void {
    const executor = task.executor;
    assert(executor.current == task);
    if (task.home != null) return;
    if (!executor.scheduler.isRetired(executor)) return;
    yield(task);
}

/// Ends the running task: its stack is released once we have switched away from it. Called
/// on the task's own stack, after its last touch of its `Task` (which may be freed already).
pub fn exitCurrent(stack: stack_mod.Stack) noreturn {
    const executor = ofThreadAfterSwitch();
    assert(executor.zombie_stack == null);
    executor.zombie_stack = stack;
    executor.switched_from = null; // the task is gone: no `on_cpu` to clear
    executor.current = null;
    const next = executor.nextRunnable();
    executor.resumeFrom(&executor.dead_context, stack, next);
    unreachable; // nothing resumes a finished task
}

/// Saves the running code into `old` and resumes `next`, or the idle context when `next` is
/// null or still on another executor's CPU.
inline fn resumeFrom(
    executor: *Executor,
    old: *context.Context,
    old_stack: ?stack_mod.Stack,
    next: ?*Task,
) void {
    if (old_stack) |stack| stack_mod.checkDepth(stack, executor.stacks.guard, @frameAddress());
    if (next) |task| {
        // Acquire: pairs with the release in `landed` on the executor that switched away.
        if (!task.on_cpu.load(.acquire)) {
            executor.enter(task);
            context.switchTo(old, &task.context);
            return;
        }
        executor.handoff = task;
    }
    executor.current = null;
    context.switchTo(old, &executor.idle_context);
}

fn enter(executor: *Executor, task: *Task) void {
    assert(!task.on_cpu.load(.monotonic));
    assert(task.home == null or task.home == executor);
    task.on_cpu.store(true, .monotonic);
    // Atomic (a plain store on every target): a task dump reads it from another thread.
    @atomicStore(*Executor, &task.executor, executor, .monotonic);
    executor.current = task;
    executor.beginRun();
}

/// A run begins: a task (the one that ran last, or another) runs after the code that ran went
/// back to the scheduler. `activity` counts the runs in its upper bits and is odd while one
/// goes on: `(activity | 1) + 2` adds a run and sets the bit, from idle (even) or from the
/// run before (odd). So each run is a new value to the watchdog, and the count is
/// `Metrics`' tasks resumed, without a counter of its own. A plain store (this thread is the
/// only writer); the watchdog and `Metrics` read it. Called where a run begins (`enter`, or
/// `park` continuing the same task) rather than on every look at the queues (`findReady`,
/// also called in loops while searching): one update per switch.
fn beginRun(executor: *Executor) void {
    if (!Counter.enabled) return;
    executor.activity.store((executor.activity.load(.monotonic) | 1) +% 2, .monotonic);
}

/// Runs begun on this executor so far (`beginRun`): tasks started or resumed, counting a task
/// that yielded and was the only one ready as resumed again. Zero with `-Dmetrics=false`.
pub fn runs(executor: *const Executor) u64 {
    return executor.activity.load(.monotonic) >> 1;
}

/// Stamps the end of a stall the watchdog found here, once. Called from `pollIo`, which only
/// scheduler code calls, between runs: the stalled run has ended by then, and the executor
/// polls within `config.dispatches_per_poll` runs of it, or at once when it runs out of work
/// (`search`). Not on every switch, where the check would cost the switch path its loads.
fn stampStallEnd(executor: *Executor) void {
    if (!Counter.enabled) return;
    // Acquire: pairs with the watchdog's release, which cleared `stall_end_ns` first.
    if (executor.stalled_activity.load(.acquire) == activity_none) return;
    if (executor.stall_end_ns.load(.monotonic) != 0) return;
    executor.stall_end_ns.store(os.monotonicNs(), .monotonic);
}

/// `stalled_activity` when no stall is known: even, so never a running task's `activity`.
pub const activity_none: u64 = std.math.maxInt(u64) - 1;

/// No task runs: the idle context searches, sleeps or polls.
fn noteIdle(executor: *Executor) void {
    if (!Counter.enabled) return;
    executor.activity.store(executor.activity.load(.monotonic) & ~@as(u64, 1), .monotonic);
}

/// The first code after a switch, on whatever thread resumed us.
fn landedHere() void {
    ofThreadAfterSwitch().landed();
}

fn landed(executor: *Executor) void {
    assert(ofThread() == executor);
    if (executor.switched_from) |task| {
        executor.switched_from = null;
        // Release: our last writes to the task's stack and context happen before any other
        // executor resumes it.
        task.on_cpu.store(false, .release);
    }
    executor.releaseZombie();
}

fn releaseZombie(executor: *Executor) void {
    const stack = executor.zombie_stack orelse return;
    executor.zombie_stack = null;
    context.finish(stack.top());
    executor.stacks.release(stack);
    // A task that found no stack takes the one just freed, here.
    if (executor.scheduler.popStarved()) |task| executor.scheduler.makeReady(task);
}

/// Gives a task that never ran its stack; false (and the task parked with the scheduler's
/// starved tasks, until some executor frees a stack) when no
/// stack can be mapped right now.
fn prepareStart(executor: *Executor, task: *Task) bool {
    assert(task.stack == null);
    const stack = executor.stacks.acquire() catch {
        executor.scheduler.pushStarved(task);
        return false;
    };
    task.stack = stack;
    executor.prepareContext(task);
    return true;
}

fn prepareContext(executor: *Executor, task: *Task) void {
    _ = executor;
    assert(!task.context_ready);
    context.prepare(&task.context, task.stack.?.memory, &taskEntry, task);
    // Release: a task dump that sees it reads the registers just prepared (task_dump.zig).
    @atomicStore(bool, &task.context_ready, true, .release);
}

/// Acquires a stack now, for `concurrent`, which must fail rather than wait for one. Its memory
/// is not touched here: the executor that first runs the task prepares it (`readyToRun`).
pub fn reserveStack(executor: *Executor, task: *Task) error{SystemResources}!void {
    assert(ofThread() == executor);
    assert(task.stack == null);
    task.stack = try executor.stacks.acquire();
}

/// Gives back a stack `reserveStack` took for a task that will never run.
pub fn releaseReservedStack(executor: *Executor, task: *Task) void {
    assert(ofThread() == executor);
    assert(!task.context_ready);
    executor.stacks.release(task.stack.?);
    task.stack = null;
}

fn taskEntry(argument: *anyopaque) callconv(.c) noreturn {
    const task: *Task = @ptrCast(@alignCast(argument));
    const executor = ofThreadAfterSwitch();
    executor.landed();
    const scheduler = executor.scheduler;
    scheduler.hooks.run(scheduler.hooks_context, task);
}

// ---------------------------------------------------------------------------------------------
// The idle context.

fn idleEntry(argument: *anyopaque) callconv(.c) noreturn {
    const executor: *Executor = @ptrCast(@alignCast(argument));
    executor.idleLoop();
    // Executor 0 stops only from `Runtime.deinit`, which its main task runs: its idle context
    // is never resumed once the runtime is stopping.
    unreachable;
}

/// Runs on a worker thread's own stack until the runtime stops.
pub fn runWorker(executor: *Executor) void {
    assert(executor.index != 0);
    executor.idleLoop();
    assert(executor.current == null);
    current_executor = null;
}

/// Finds the next task and resumes it; searches and sleeps in between. Returns when the
/// runtime stops and no work is left.
fn idleLoop(executor: *Executor) void {
    while (true) {
        executor.landed();
        assert(executor.current == null);
        executor.noteIdle();
        const task = executor.handoff orelse executor.nextRunnable() orelse
            executor.searchOrSleep() orelse return;
        executor.handoff = null;
        waitOffCpu(task);
        executor.enter(task);
        context.switchTo(&executor.idle_context, &task.context);
    }
}

/// Waits until the executor that ran `task` has left its stack. Safe only in an idle context,
/// which holds no task that anyone waits for. The other executor is a few instructions from
/// clearing the flag, unless the kernel preempted it right there: then give it our CPU.
fn waitOffCpu(task: *Task) void {
    var spins: u32 = 0;
    while (task.on_cpu.load(.acquire)) : (spins += 1) {
        if (spins < config.spin_before_yield_max) {
            std.atomic.spinLoopHint();
        } else {
            os.yieldThread();
            spins = 0;
        }
    }
}

/// Null once the runtime is stopping and nothing is left to run.
fn searchOrSleep(executor: *Executor) ?*Task {
    const scheduler = executor.scheduler;
    while (true) {
        if (executor.search()) |task| return task;
        if (scheduler.stopping.load(.acquire)) return null;
        // An executor never sleeps on a ready task of its own: the search took what its LIFO
        // slot and `local` held (a task left there while its executor was held by one task
        // once waited 29.5 s; the watchdog hands such tasks over now, `surrenderHeld`).
        assert(executor.lifo.load(.monotonic) == null);
        assert(executor.local.isEmpty());
        // The spare is on no idle list: the watchdog wakes it while it is needed.
        if (scheduler.executors.len == 1 or executor.isSpare()) {
            executor.pollIo(true);
        } else {
            scheduler.announceIdle(executor);
            // Retired while it searched (another executor retires it at any time), this
            // executor may hold work a producer left to its search, in queues it no longer
            // takes from: an active executor must take it.
            if (scheduler.isRetired(executor)) scheduler.passOnStealableWork();
            if (!scheduler.hasWorkFor(executor) and !scheduler.stopping.load(.acquire)) {
                executor.pollIo(true);
            }
            executor.searching = scheduler.leaveIdle(executor);
        }
        if (executor.nextRunnable()) |task| {
            executor.stopSearching(true);
            return task;
        }
    }
}

/// Steals and polls for up to `config.executor_search_ns`, if few enough executors search
/// already and a CPU is likely idle: lane workers leave one (`Scheduler.searchMaySpin`) and
/// this thread has not been waiting for a CPU lately (`RunDelay`, which sees other processes).
/// Else looks once. A single executor has nothing to steal and polls its ring instead
/// (`searchAlone`).
fn search(executor: *Executor) ?*Task {
    const scheduler = executor.scheduler;
    executor.pollIo(false);
    if (executor.nextRunnable()) |task| {
        executor.stopSearching(true);
        return task;
    }
    if (executor.isSpare()) return executor.searchSpare();
    if (scheduler.executors.len == 1) return executor.searchAlone();
    const now_ns = os.monotonicNs();
    if (scheduler.contention_policy == .adapt) {
        if (executor.run_delay.sample(now_ns)) |contention| {
            if (scheduler.noteContention(now_ns, contention)) {
                scheduler.considerRetiring(now_ns, os.processCpuNs());
            }
        }
    }
    scheduler.reviewRetired(now_ns);
    if (scheduler.isRetired(executor)) {
        executor.stopSearchingRetired();
        return null;
    }
    if (executor.index == 0 and scheduler.aloneAwake(executor)) {
        // The others retired or sleep: nothing to steal from them, and this executor is alone.
        // Its search spinning under run delay's rule instead sent it to sleep ~3,000 times a
        // second under `wrk` on the other core (a VM counts every wake-up of a sleeping thread
        // as run delay, which stops the spin), where one executor polls and never sleeps.
        // Executor 0 only: it alone samples the runnable count that `searchAlone` needs (the
        // one executor never retired, so with the others retired this is executor 0 anyway).
        const task = executor.searchAlone();
        executor.stopSearching(task != null);
        return task;
    }
    if (!executor.searching) {
        const searchers = scheduler.searching.load(.monotonic);
        if (2 * searchers >= scheduler.executors.len) return null;
        _ = scheduler.searching.fetchAdd(1, .seq_cst);
        executor.searching = true;
    }
    // At least one round; more only if a CPU is likely idle.
    const spin = scheduler.searchMaySpin() and executor.run_delay.spinAllowed(now_ns) and
        !scheduler.cpusContended(now_ns);
    const spin_ns: u64 = if (spin) config.executor_search_ns else 0;
    const deadline_ns = now_ns + spin_ns;
    var rounds: u32 = 0;
    while (true) : (rounds += 1) {
        if (executor.steal()) |task| {
            // A task that never ran finds its stack here; one that found none waits with the
            // starved tasks, and we search on.
            if (executor.readyToRun(task)) {
                executor.stopSearching(true);
                return task;
            }
        }
        if (rounds % 8 == 7) executor.pollIo(false);
        if (executor.nextRunnable()) |task| {
            executor.stopSearching(true);
            return task;
        }
        if (scheduler.isRetired(executor)) {
            executor.stopSearchingRetired();
            return null;
        }
        if (os.monotonicNs() >= deadline_ns) break;
        std.atomic.spinLoopHint();
    }
    executor.stopSearching(false);
    return null;
}

/// The spare's search while at work: one round of stealing from the held executors' rings
/// (the global queue was looked at already). It neither spins nor counts as searching: it
/// works only while every other executor is held, and the watchdog wakes it each look.
fn searchSpare(executor: *Executor) ?*Task {
    if (executor.scheduler.isRetired(executor)) return null;
    const task = executor.steal() orelse return null;
    return if (executor.readyToRun(task)) task else null;
}

/// The search of a runtime's only executor, or of the only one awake (`Scheduler.aloneAwake`:
/// executor 0 while the others give way, as with a load generator on the same cores, or sleep
/// for want of work): nothing to steal, but an I/O completion or a wake from another thread (a
/// lane job done, a futex wake) may be microseconds away. Polls the ring without blocking for
/// up to `config.executor_search_ns`, while a CPU is likely idle: busy lane workers leave one
/// (`Scheduler.searchMaySpin`) and no more threads machine-wide are runnable than the process
/// has CPUs (`RunnableCount`; `cpu_contention = .ignore` skips this look).
///
/// Why: a completion that lands while the thread sleeps in the kernel costs the thread that
/// caused it a wake-up of ours. On loopback that is the peer process, whose write completes our
/// read and pays `try_to_wake_up` (an IPI on a VM); for `ab`, a connection per request, that
/// was 15 % of its CPU per request (docs/BENCHMARKS.md, "One executor polls before it sleeps").
///
/// Unlike `search` it does not back off on run delay: on a VM that reads every wake-up of a
/// sleeping thread as contention, which turned the poll off while `ab` ran on the other core
/// (ab 8-10 % slower than without the poll). Without any check, two single-executor runtimes
/// and `wrk` on 2 cores lost 30 % of their requests to each other's polls.
fn searchAlone(executor: *Executor) ?*Task {
    const scheduler = executor.scheduler;
    // Not asserted alone: a retired executor may bring the others back at any moment (then
    // the poll ends and the next search steals again).
    if (!scheduler.searchMaySpin()) return null;
    const now_ns = os.monotonicNs();
    if (scheduler.contention_policy == .adapt and !executor.runnable_count.idleCpuLikely(now_ns)) {
        return null;
    }
    const deadline_ns = now_ns + config.executor_search_ns;
    while (true) {
        executor.polls_alone += 1;
        executor.pollIo(false);
        if (executor.nextRunnable()) |task| return task;
        if (scheduler.stopping.load(.acquire)) return null;
        if (!scheduler.aloneAwake(executor)) return null;
        if (os.monotonicNs() >= deadline_ns) return null;
        std.atomic.spinLoopHint();
    }
}

/// `stopSearching(false)` on an executor that retired: it does not steal. While it held a
/// count of `searching`, producers woke no one else, and their work waits in queues it no
/// longer takes from (its idle check skips them too): pass the search on to an active
/// executor, or that work could sit there with every active executor asleep.
fn stopSearchingRetired(executor: *Executor) void {
    const held = executor.searching;
    executor.stopSearching(false);
    if (held) executor.scheduler.notifyWork();
}

/// Gives up this executor's count of `searching`, if it holds one. The last searcher to find
/// work wakes another, in case there is more (Go's rule).
fn stopSearching(executor: *Executor, found: bool) void {
    if (!executor.searching) return;
    executor.searching = false;
    const scheduler = executor.scheduler;
    const previous = scheduler.searching.fetchSub(1, .seq_cst);
    assert(previous > 0);
    if (found and previous == 1) scheduler.notifyWork();
}

// ---------------------------------------------------------------------------------------------
// The loop and the timers.

fn pollIo(executor: *Executor, block: bool) void {
    var timeout_ns: ?u64 = 0;
    if (block) {
        timeout_ns = null;
        if (executor.wakeDeadline()) |deadline_ns| {
            const now_ns = os.monotonicNs();
            const slack_ns = config.timer_slack_ns;
            const wake_ns = (deadline_ns +| (slack_ns - 1)) / slack_ns * slack_ns;
            assert(wake_ns >= deadline_ns or deadline_ns > std.math.maxInt(u64) - slack_ns);
            timeout_ns = if (deadline_ns > now_ns) wake_ns - now_ns else 0;
        }
        // Announce the sleep, then look once more: a waker either sees `sleeping` or its
        // task is in an injection queue by now (seq_cst on both sides).
        executor.loop.sleeping.store(true, .seq_cst);
        const global_count = executor.scheduler.inject_count.load(.seq_cst);
        if (executor.inject_count.load(.seq_cst) > 0 or
            (global_count > 0 and !executor.scheduler.isRetired(executor))) timeout_ns = 0;
    }
    // A non-blocking poll with nothing in flight cannot reap anything: skip the syscall on the
    // all-CPU path (timers still fire below).
    assert(!executor.polling);
    executor.polling = true;
    defer executor.polling = false;
    if (block) {
        executor.polls_blocked += 1;
        executor.counters.sleeps.increment();
        const start_ns = if (Counter.enabled) os.monotonicNs() else 0;
        _ = executor.loop.poll(timeout_ns);
        if (Counter.enabled) executor.counters.idle_ns.add(os.monotonicNs() -| start_ns);
    } else if (executor.loop.inFlight() > 0) {
        _ = executor.loop.poll(timeout_ns);
    }
    if (block) executor.loop.sleeping.store(false, .monotonic);
    executor.stampStallEnd();
    executor.clock_coarse_ns = os.monotonicCoarseNs();
    if (executor.clock_coarse_ns >= executor.sweep_due_ns) executor.sweepStacks();
    executor.expireTimers();
    executor.notifyAfterPoll();
}

/// After a poll that queued stealable tasks (completions, expired timers): wakes an idle executor
/// unless the ring holds just one task and nothing else would run before it here (no task in the
/// LIFO slot or the bound queue), that is, the task this executor runs next. A single completion is
/// the common case of latency-bound work (a request, its reply); waking a sleeping executor for it
/// costs a syscall and a CPU that spins searching, on a machine whose other cores often run the
/// very clients of that work (measured on echo with 2 executors), while this executor runs the task
/// within the next few dispatches. Nor while the CPUs are contended (`Scheduler.cpusContended`):
/// the woken executor would find no idle CPU to run on. The work is visible before this check, so
/// no wake-up is lost: either another executor finds it, or it runs here.
fn notifyAfterPoll(executor: *Executor) void {
    if (!executor.poll_queued) return;
    executor.poll_queued = false;
    const runs_next_here = executor.ring.len() == 1 and executor.lifo.load(.monotonic) == null and
        executor.local.isEmpty();
    if (runs_next_here) return;
    const scheduler = executor.scheduler;
    const now_ns = os.monotonicNs();
    if (scheduler.cpusContended(now_ns)) return;
    scheduler.reviewRetired(now_ns);
    scheduler.notifyWork();
}

/// Gives the pages of stacks idle for a period back to the kernel (`stack_mod.Pool.trim`), and
/// sets when to look again: a period on, or at once after a sweep cut short. Here, in the
/// poll, and not where a stack is released or acquired: a spawn pays one compare per poll for
/// it, and a task never waits behind a sweep it did not cause. Rejected: the watchdog's thread
/// (the pools are their executors' own, and a runtime may run without a watchdog), and a
/// timer of the executor's heap (a task-less timer would need a kind of its own there).
fn sweepStacks(executor: *Executor) void {
    const now_ns = executor.clock_coarse_ns;
    const trimmed = executor.stacks.trim(now_ns);
    const retry_ns = config.stack_trim_retry_ns;
    const wait_ns: u64 = if (trimmed.cut_short) retry_ns else config.stack_idle_ns;
    executor.sweep_due_ns = now_ns + wait_ns;
    assert(executor.sweep_due_ns > now_ns);
}

/// When a blocking poll must return: the next timer's deadline, or the next sweep's while the
/// pool may have stacks to give back (an idle runtime otherwise sleeps through it, holding a
/// spike's memory until the next I/O).
fn wakeDeadline(executor: *Executor) ?u64 {
    const timer_ns = executor.peekDeadline();
    if (!executor.stacks.mayTrim()) return timer_ns;
    // The sweep is due on the coarse clock, which lags the precise one by up to a tick.
    const sweep_ns = executor.sweep_due_ns + config.coarse_clock_tick_ns;
    return if (timer_ns) |ns| @min(ns, sweep_ns) else sweep_ns;
}

fn peekDeadline(executor: *Executor) ?u64 {
    executor.timers_lock.lock();
    defer executor.timers_lock.unlock();
    return executor.timers.peekDeadline();
}

fn expireTimers(executor: *Executor) void {
    executor.timers_lock.lock();
    defer executor.timers_lock.unlock();
    if (executor.timers.isEmpty()) return;
    executor.counters.timers_fired.add(executor.timers.expire(os.monotonicNs()));
}

/// Starts a timer for the running task on this executor; `Task.timerFired` tells whether it
/// went off. Stop it with `stopTimer`, from whichever executor the task runs on by then.
pub fn startTimer(task: *Task, deadline_ns: u64) std.mem.Allocator.Error!void {
    const executor = task.executor;
    assert(executor.current == task);
    assert(task.timer_owner == null);
    executor.timers_lock.lock();
    defer executor.timers_lock.unlock();
    task.timer_fired.store(false, .monotonic);
    try executor.timers.insert(task, deadline_ns);
    task.timer_owner = executor;
    executor.counters.timers_armed.increment();
}

pub fn stopTimer(task: *Task) void {
    const owner = task.timer_owner orelse return;
    owner.timers_lock.lock();
    if (task.timer_place != .none) owner.timers.remove(task);
    owner.timers_lock.unlock();
    task.timer_owner = null;
}
