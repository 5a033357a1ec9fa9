//! The executors of one runtime and what they share: the global injection queue, the list of
//! idle executors, and the rule that decides who runs a task that was just woken.
//!
//! ## Where a woken task goes (`makeReady`)
//!
//! - A task with a `home` (the main task, a task waiting for an I/O operation submitted on its
//!   executor's ring, every task in pinned mode) runs only there: its home's private `local`
//!   queue when the waker is that executor, else its home's `inject` queue and a loop wake-up.
//! - Any other task woken on an executor goes to that executor's LIFO slot (it runs next,
//!   while what the waker touched is still in the cache: Tokio's and Go's choice); the task
//!   it displaces goes to the back of the executor's stealable ring.
//! - Any other task woken on a thread weft does not run goes to the global injection queue.
//!
//! ## Idle executors (Go's spinning rule)
//!
//! An executor out of work first *searches*: it steals from the other executors' rings and looks at
//! the injection queues for up to `config.executor_search_ns`. At most half of the executors search
//! at once, and the search does not spin past its first round while busy lane workers want every
//! CPU (`searchMaySpin`). One that finds nothing puts itself on the idle list and blocks in its
//! loop (its own I/O and timers still wake it). Whoever makes stealable work available calls
//! `notifyWork`, which wakes an idle executor only when no executor is searching (the searcher will
//! find the work) and some executor is idle: the waker claims the search on the sleeper's behalf
//! first, so a burst of work wakes one executor, not all. A searcher that finds work while it was
//! the last searcher calls `notifyWork` in turn, so that more work, if any, keeps one executor
//! looking. Wake-heavy work where the woken task runs on the waker's executor (the LIFO slot)
//! notifies no one and pays no syscall.
//!
//! ## Retiring executors
//!
//! An executor's thread that waits for a CPU more than a sixteenth of the time
//! (contention/RunDelay.zig) makes the CPUs count as contended for a while (`cpusContended`):
//! other threads, of this process or another, want every CPU. Then no executor spins in its
//! search nor is woken to share a poll's completions, and, once the contention has lasted
//! `config.retire_contention_ns_min`, the executors retire one by one from the highest index,
//! at most one per `config.run_delay_backoff_ns_min`, as long as the process uses less CPU
//! time than the executors left but one could (`noteContention`, `considerRetiring`).
//! A retired executor runs only the tasks bound to it (their I/O is on its ring); it hands
//! every other task it finds ready (woken by its completions or timers) to the global queue,
//! does not steal, and is not woken for stealable work. Its connections move to the executors
//! still active, one I/O operation at a time, and it sleeps. Measured with HTTP on 2 executors
//! sharing 2 cores with wrk: 3 threads wanting 2 CPUs took turns, and a reply whose completion
//! sat with a preempted executor waited out its time slice. Executor 0 never retires. Once the
//! contention has passed, the first executor that notices (`reviewRetired`, called where the
//! clock is read anyway, and by `notifyWork` before it would find only retired executors idle)
//! brings them all back; if they bring the contention back too, each quiet period is longer.
//! Executors retire only where the watchdog watches for held ones (`may_retire`): it alone
//! recalls them while the contention lasts, when work waits behind a held executor.
//!
//! ## The spare executor
//!
//! A task that never parks holds its executor, and so does a thread blocked outside std.Io (a
//! `main` joining a thread holds executor 0). The watchdog moves what such an executor holds
//! back to where others take it (sched/Watchdog.zig, `handOverHeld`), and brings retired
//! executors back for it; but when *every* executor is held, no one is left to take it: with
//! one executor, a `main` that joins threads whose tasks need it never ends. Then the watchdog
//! puts the spare to work: one more executor, outside `executors`, whose thread starts the
//! first time it is needed (Go's runtime hands a blocked thread's work to another the same
//! way). It takes from the global queue and steals from the held executors' rings; once any
//! executor is free again it stops taking work and behaves as a retired executor: it hands
//! what is ready to the global queue, finishes the tasks whose I/O is on its ring, and sleeps.
//! Off with `Runtime.Options.spare_executor = false`, in pinned mode, and without a watchdog.
//!
//! No wake-up is lost: an executor announces itself idle (a seq_cst increment of `sleeping`)
//! *before* it looks at every queue one last time, and a producer makes its work visible
//! before it reads `searching` and `sleeping` (seq_cst): either the executor sees the work,
//! or the producer sees the executor and wakes it.
const Scheduler = @This();

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const atomic = @import("../os/atomic.zig");
const Counter = @import("../os/Counter.zig");
const Executor = @import("Executor.zig");
const RunDelay = @import("../contention/RunDelay.zig");
const Task = @import("Task.zig");
const LiveTasks = @import("LiveTasks.zig");
const cpu_demand = @import("../contention/cpu_demand.zig");
const stack_mod = @import("../fiber/stack.zig");
const log = std.log.scoped(.weft);

const TaskQueue = @import("../intrusive.zig").Queue(Task);

gpa: std.mem.Allocator,
executors: []Executor,
/// Free stacks the executors' pools share (fiber/stack.zig, `Shared`).
stacks_shared: stack_mod.Shared = .{},
/// Tasks made ready by threads weft does not run, and the overflow of full rings.
inject_lock: atomic.Lock = .{},
inject: TaskQueue = .{},
inject_count: atomic.Value(usize) = .init(0),
/// Tasks that never ran and found no stack (the kernel refused a new slab): the next stack
/// freed on any executor goes to the oldest. Runtime-wide, since a freed stack joins the pool of
/// whichever executor freed it.
starved_lock: atomic.Lock = .{},
starved: TaskQueue = .{},
starved_count: atomic.Value(usize) = .init(0),
/// Executors searching for work right now (see the rule above).
searching: atomic.Value(u32) = .init(0),
/// Executors on the idle list.
sleeping: atomic.Value(u32) = .init(0),
/// CPUs this process may use (`CpuLane.cpusAvailable` at init), for `searchMaySpin`.
cpus: u32,
/// Until then (CLOCK_MONOTONIC ns) the CPUs count as contended: an executor's thread waited
/// for one lately (contention/RunDelay.zig). See `cpusContended`.
contended_until_ns: atomic.Value(u64) = .init(0),
/// Whether executors measure their run delay at all (`Runtime.Options.cpu_contention`).
contention_policy: ContentionPolicy = .adapt,
/// The last `retired` executors (by index) are retired: see "Retiring executors" above.
retired: atomic.Value(u32) = .init(0),
/// Whether executors may retire at all: only where the watchdog looks for held executors (the
/// stall detector on), since it alone recalls a retired executor, whatever the contention,
/// for work that waits while every active executor is held (a `main` joining a thread holds
/// executor 0). Without it such work would wait for a timer or for the contention to pass.
/// Set by `Runtime.init` before any executor runs.
may_retire: bool = true,
/// No further executor retires before then: one per `config.run_delay_backoff_ns_min`.
retire_next_ns: atomic.Value(u64) = .init(0),
/// When `considerRetiring` last looked at the process's CPU time, and that time
/// (`os.processCpuNs`): the usage since then decides whether one more executor retires.
usage_mark_ns: atomic.Value(u64) = .init(0),
usage_mark_cpu_ns: atomic.Value(u64) = .init(0),
idle_lock: atomic.Lock = .{},
/// The idle list: indices into `executors`, the most recently idle last.
idle: std.ArrayList(u32) = .empty,
/// Set by `Runtime.deinit`: idle executors leave their loops instead of sleeping.
stopping: atomic.Value(bool) = .init(false),
/// The spare executor (see "The spare executor" above), if this runtime has one: not in
/// `executors`, its thread started by the watchdog the first time it is needed.
spare: ?*Executor = null,
/// Whether the spare takes any ready task now (`isRetired` is false for it only then).
spare_active: atomic.Value(bool) = .init(false),
/// Set once the spare's thread failed to start: not tried again.
spare_failed: bool = false,
/// The loop the spare's thread creates.
spare_loop: @FieldType(Executor.Options, "loop") = .auto,
/// I/O completions the watchdog delivered for executors held by one task, for `weft.Metrics`:
/// counted by `io_wait.claimForRescue` before it queues the task, so that the task, running
/// at once elsewhere, sees itself counted.
io_rescued: atomic.Value(u64) = .init(0),
/// Times the watchdog put the spare to work, for `weft.Metrics`.
spare_activations: atomic.Value(u64) = .init(0),
/// Tasks never migrate: each is given a home executor when it is spawned.
pinned: bool,
/// Round-robin cursor for pinned mode's placement.
placement_next: atomic.Value(u32) = .init(0),
/// For `weft.Metrics`: tasks started from threads that are not this scheduler's executors
/// (each executor counts its own, `Executor.Counters.spawned`).
spawned_elsewhere: Counter.Shared = .{},
/// When the scheduler started (`os.monotonicNs`), for uptime and busy time.
started_ns: u64 = 0,
/// The thread that called `Runtime.init`, adopted as a task of executor 0.
main_task: Task,
/// Every live task, the main one included: ids, names, birth times (see LiveTasks.zig).
tasks: LiveTasks,
hooks: *const Executor.Hooks,
hooks_context: *anyopaque,

/// The executor running the calling thread if it belongs to this scheduler.
pub fn executorOfThread(scheduler: *Scheduler) ?*Executor {
    const executor = Executor.ofThread() orelse return null;
    return if (executor.scheduler == scheduler) executor else null;
}

/// Thread-safe: queues `task`, which was woken (its wait state is now `notified`) or is new.
pub fn makeReady(scheduler: *Scheduler, task: *Task) void {
    const here = scheduler.executorOfThread();
    if (task.home) |home| {
        assert(home.scheduler == scheduler);
        if (here == home) home.pushLocal(task) else home.pushInject(task);
        return;
    }
    if (here) |executor| {
        executor.pushWoken(task);
    } else {
        scheduler.pushGlobal(task);
    }
}

/// How `start` places a new task spawned by a task.
pub const Placement = enum {
    /// The child runs at once; the spawner waits in the LIFO slot (`Executor.runFirst`).
    child_first,
    /// As `child_first`, except while another executor is out of work (searching or idle) and
    /// the spawner's ring is empty: then the child goes to the ring, where that executor takes
    /// it, and the spawner goes on. For `concurrent`, whose tasks usually stay alive (a
    /// connection, a sleeper): a burst of them spreads over the executors from the start, and
    /// so does the first touch of their stacks, a page fault each, which serialised a million
    /// spawns on one core. `async` keeps `child_first`: its tasks are often short, and running
    /// them in place reuses one hot stack.
    spread,
};

/// Starts a task that never ran. On an executor of this scheduler, see `Placement`; elsewhere
/// it is queued.
pub fn start(scheduler: *Scheduler, task: *Task, placement: Placement) void {
    assert(task.wait_state.load(.monotonic) == .running);
    const here = scheduler.executorOfThread();
    if (here) |executor| {
        executor.counters.spawned.increment();
    } else {
        scheduler.spawned_elsewhere.increment();
    }
    if (scheduler.pinned) {
        const index = scheduler.placement_next.fetchAdd(1, .monotonic) % scheduler.executors.len;
        const home = &scheduler.executors[index];
        task.home = home;
        if (here != home) return home.pushInject(task);
        if (home.current != null) return home.runFirst(task);
        return home.enqueue(task);
    }
    if (here) |executor| {
        // From the idle context (a completion callback): queue it.
        if (executor.current == null) return executor.enqueue(task);
        if (placement == .spread and scheduler.executors.len > 1 and executor.ring.isEmpty() and
            (scheduler.searching.load(.monotonic) > 0 or scheduler.sleeping.load(.monotonic) > 0))
        {
            return executor.enqueue(task);
        }
        return executor.runFirst(task);
    }
    scheduler.pushGlobal(task);
}

/// From the watchdog, for the main task taken out of a queue of executor 0 while another task
/// holds that executor (the main task can run only there otherwise): unbinds it and queues it
/// where any executor takes it. It runs on that executor's thread, on its own stack (the
/// thread's that called `Runtime.init`, idle meanwhile), and is bound to executor 0 again the
/// next time it runs there (`Executor.park`), or by `Executor.returnHome`.
pub fn displaceMain(scheduler: *Scheduler, task: *Task) void {
    assert(scheduler.mainDisplaceable(task));
    assert(task.home == &scheduler.executors[0]);
    task.home = null;
    scheduler.pushGlobal(task);
}

/// Whether `task`, queued on a held executor 0, is the main task and may move: not while its
/// I/O operation is in flight on executor 0's ring (a cancel must go there), not in pinned
/// mode, not under ThreadSanitizer (whose fiber of the main thread is not moved to another
/// thread here), and not where no other executor could run it.
pub fn mainDisplaceable(scheduler: *const Scheduler, task: *const Task) bool {
    if (task != &scheduler.main_task) return false;
    if (scheduler.pinned or builtin.sanitize_thread or !scheduler.canHandOver()) return false;
    return !task.waits_for_io;
}

/// Whether a task held up on one executor could run on another: there is more than one, or a
/// spare.
pub fn canHandOver(scheduler: *const Scheduler) bool {
    return scheduler.executors.len > 1 or scheduler.spare != null;
}

/// From the watchdog, while every executor is held and tasks wait that they would run: puts
/// the spare executor to work, starting its thread the first time. A thread that cannot start
/// is logged once and not tried again.
pub fn activateSpare(scheduler: *Scheduler) void {
    const spare = scheduler.spare orelse return;
    if (scheduler.spare_failed) return;
    if (spare.thread == null) {
        spare.startThread(scheduler.spare_loop) catch |err| {
            scheduler.spare_failed = true;
            log.warn("the spare executor did not start ({t}): while every executor is held, " ++
                "ready tasks wait for one to be free", .{err});
            return;
        };
    }
    if (!scheduler.spare_active.load(.monotonic)) {
        // Release: whoever sees the spare at work sees its loop (`notifyWork`).
        scheduler.spare_active.store(true, .release);
        _ = scheduler.spare_activations.fetchAdd(1, .monotonic);
    }
    spare.loop.wake();
}

/// From the watchdog, once an executor is free again: the spare takes no more work, hands the
/// ready tasks it holds to the global queue and finishes those bound to it (their I/O is on its
/// ring), as a retired executor does.
pub fn deactivateSpare(scheduler: *Scheduler) void {
    if (!scheduler.spare_active.load(.monotonic)) return;
    scheduler.spare_active.store(false, .monotonic);
    scheduler.spare.?.loop.wake();
}

/// Stops the spare's thread if it runs, with `stopping` set: for `Runtime.deinit`, once the
/// watchdog, which starts it, has stopped.
pub fn stopSpare(scheduler: *Scheduler) void {
    assert(scheduler.stopping.load(.monotonic));
    const spare = scheduler.spare orelse return;
    const thread = spare.thread orelse return;
    spare.loop.wake();
    thread.join();
    spare.thread = null;
}

pub fn pushGlobal(scheduler: *Scheduler, task: *Task) void {
    scheduler.pushGlobalBatch(&.{task});
}

/// Moves `tasks` (a ring's overflow) to the global queue in one critical section.
pub fn pushGlobalBatch(scheduler: *Scheduler, tasks: []const *Task) void {
    scheduler.inject_lock.lock();
    for (tasks) |task| {
        assert(task.home == null);
        scheduler.inject.push(task);
    }
    _ = scheduler.inject_count.fetchAdd(tasks.len, .seq_cst);
    scheduler.inject_lock.unlock();
    scheduler.notifyWork();
}

pub fn pushStarved(scheduler: *Scheduler, task: *Task) void {
    assert(task.stack == null);
    scheduler.starved_lock.lock();
    defer scheduler.starved_lock.unlock();
    scheduler.starved.push(task);
    _ = scheduler.starved_count.fetchAdd(1, .monotonic);
}

/// The oldest starved task, if any. Cheap when there is none (one load): called whenever a
/// stack is freed.
pub fn popStarved(scheduler: *Scheduler) ?*Task {
    if (scheduler.starved_count.load(.monotonic) == 0) return null;
    scheduler.starved_lock.lock();
    defer scheduler.starved_lock.unlock();
    const task = scheduler.starved.pop() orelse return null;
    _ = scheduler.starved_count.fetchSub(1, .monotonic);
    return task;
}

/// Takes up to `out.len` tasks from the global queue, oldest first. Returns how many.
pub fn popGlobal(scheduler: *Scheduler, out: []*Task) usize {
    if (scheduler.inject_count.load(.acquire) == 0) return 0;
    scheduler.inject_lock.lock();
    defer scheduler.inject_lock.unlock();
    // Share a backlog: take a fair part of it, not all of it.
    const executors = scheduler.executors.len;
    const fair = scheduler.inject.count / executors + 1;
    const count = @min(out.len, fair, scheduler.inject.count);
    for (out[0..count]) |*slot| slot.* = scheduler.inject.pop().?;
    _ = scheduler.inject_count.fetchSub(count, .monotonic);
    return count;
}

/// Called after work that any executor may take became visible: wakes one idle executor
/// unless an executor is searching already or none is idle; and the spare executor, if at work.
pub fn notifyWork(scheduler: *Scheduler) void {
    // Acquire: pairs with `activateSpare`'s release, after which the spare's loop, made on its
    // own thread, is there to notify.
    if (scheduler.spare_active.load(.acquire)) scheduler.spare.?.loop.notify();
    if (scheduler.executors.len == 1) {
        // No one to steal: the only executor just needs to leave its blocking poll.
        scheduler.executors[0].loop.notify();
        return;
    }
    if (!scheduler.wouldWake()) return;
    // Claim the search for the executor we are about to wake, so that concurrent producers
    // see a searcher and do not wake a second one.
    if (scheduler.searching.cmpxchgStrong(0, 1, .seq_cst, .monotonic) != null) return;
    // Retired executors are not woken for stealable work: bring them back first if the
    // contention has passed (`reviewRetired` is never called by a saturated executor that
    // neither searches nor polls completions, and its work would stay on it).
    if (scheduler.retired.load(.monotonic) > 0) scheduler.reviewRetired(os.monotonicNs());
    scheduler.idle_lock.lock();
    const woken = scheduler.popIdleActive();
    if (woken) |executor| {
        assert(executor.idle_listed);
        executor.idle_listed = false;
        executor.woken_to_search = true;
        _ = scheduler.sleeping.fetchSub(1, .seq_cst);
    }
    scheduler.idle_lock.unlock();
    if (woken) |executor| {
        executor.loop.wake();
    } else {
        _ = scheduler.searching.fetchSub(1, .seq_cst);
    }
}

/// Whether `notifyWork` would now try to wake an executor: none searches and some sleeps. A
/// snapshot, for a caller that checks something costlier before calling it.
pub fn wouldWake(scheduler: *const Scheduler) bool {
    return scheduler.searching.load(.seq_cst) == 0 and scheduler.sleeping.load(.seq_cst) > 0;
}

/// Under `idle_lock`: takes the most recently idle executor that is not retired off the idle
/// list.
fn popIdleActive(scheduler: *Scheduler) ?*Executor {
    var position = scheduler.idle.items.len;
    while (position > 0) {
        position -= 1;
        const executor = &scheduler.executors[scheduler.idle.items[position]];
        if (scheduler.isRetired(executor)) continue;
        _ = scheduler.idle.orderedRemove(position);
        return executor;
    }
    return null;
}

/// Whether an executor out of work may spin searching (`config.executor_search_ns`) rather
/// than look once: not while busy lane workers alone want every CPU, where the spin would
/// take a core from one of them (see contention/cpu_demand.zig). Other executors are not counted:
/// they come and go within microseconds, and counting them stopped the spin while a single
/// caller waited for a 10 µs job (a 1 µs round trip became one wake-up syscall per call).
pub fn searchMaySpin(scheduler: *const Scheduler) bool {
    return cpu_demand.busyWorkers() < scheduler.cpus;
}

/// Whether an executor of this runtime recently waited for a CPU (contention/RunDelay.zig): other
/// threads, of this process or another, want every CPU. Then a spinning search, or a sleeping
/// executor woken to share a poll's completions, would only take a CPU from them: the awake
/// executor runs the work itself. Measured with HTTP on 2 executors sharing 2 cores with wrk:
/// the second executor's spins and steals made every thread wait for a CPU and a connection's
/// reply wait out a preempted executor's time slice.
pub fn cpusContended(scheduler: *const Scheduler, now_ns: u64) bool {
    return now_ns < scheduler.contended_until_ns.load(.monotonic);
}

/// An executor found its thread waiting for a CPU at `now_ns`: the CPUs count as contended
/// until the end of its quiet period. Returns whether the caller should now look at the
/// process's CPU time (`considerRetiring`): once the contention has lasted
/// `config.retire_contention_ns_min` without a break, at most once per
/// `config.run_delay_backoff_ns_min`, and never in pinned mode. The caller reads that clock (a
/// syscall) only then.
pub fn noteContention(scheduler: *Scheduler, now_ns: u64, contention: RunDelay.Contention) bool {
    assert(contention.quiet_until_ns > now_ns);
    assert(contention.since_ns <= now_ns);
    _ = scheduler.contended_until_ns.fetchMax(contention.quiet_until_ns, .monotonic);
    // Pinned tasks never move: a retired executor would run them all the same.
    if (scheduler.pinned) return false;
    if (now_ns - contention.since_ns < config.retire_contention_ns_min) return false;
    const next_ns = scheduler.retire_next_ns.load(.monotonic);
    if (now_ns < next_ns) return false;
    const next_new_ns = now_ns + config.run_delay_backoff_ns_min;
    // Lost: another executor looks now.
    const retire_next = &scheduler.retire_next_ns;
    return retire_next.cmpxchgStrong(next_ns, next_new_ns, .monotonic, .monotonic) == null;
}

/// The look `noteContention` asked for, at `now_ns`, when the process had used `cpu_ns` of CPU
/// time (`os.processCpuNs`): if it used less since the last look than the active executors but
/// one could have, one more retires (never executor 0). Else the executors are busy and the
/// waits are the price of running them all (a VM's idle CPU is slow to wake, which schedstat
/// counts too): a tree of tasks spawning tasks ran 15 % slower with one retired.
pub fn considerRetiring(scheduler: *Scheduler, now_ns: u64, cpu_ns: u64) void {
    if (!scheduler.may_retire) return;
    const mark_ns = scheduler.usage_mark_ns.swap(now_ns, .monotonic);
    const mark_cpu_ns = scheduler.usage_mark_cpu_ns.swap(cpu_ns, .monotonic);
    // The first look of a contention, or one after a long break: only the mark is set.
    if (mark_ns == 0 or mark_ns >= now_ns) return;
    if (now_ns - mark_ns > config.retire_usage_window_ns_max) return;
    var retired = scheduler.retired.load(.monotonic);
    while (retired + 1 < scheduler.executors.len) {
        const active: u64 = scheduler.executors.len - retired;
        // Used less than `active - 1` CPUs over the interval: the work fits in one fewer.
        if (cpu_ns -| mark_cpu_ns >= (active - 1) * (now_ns - mark_ns)) return;
        retired = scheduler.retired.cmpxchgWeak(retired, retired + 1, .monotonic, .monotonic) orelse
            return;
    }
}

/// Brings the retired executors back once the contention has passed. For callers that have
/// read the clock anyway; costs one load while none is retired. A returning executor may sleep
/// with nothing to do: the next stealable work wakes it (`notifyWork`).
pub fn reviewRetired(scheduler: *Scheduler, now_ns: u64) void {
    if (scheduler.retired.load(.monotonic) == 0) return;
    if (scheduler.cpusContended(now_ns)) return;
    scheduler.retired.store(0, .monotonic);
}

/// Brings every retired executor back, whatever the contention, and lets none retire before
/// `until_ns`: for the watchdog, when one task holds an executor and the work queued elsewhere
/// for it (a held executor's ring, its timers' tasks) would otherwise wait for that task,
/// retired executors taking no stealable work. The delay keeps a recalled executor from
/// retiring again at its next search, before it took the work (`considerRetiring` runs there
/// while the contention lasts).
pub fn recallRetired(scheduler: *Scheduler, until_ns: u64) void {
    _ = scheduler.retire_next_ns.fetchMax(until_ns, .monotonic);
    scheduler.retired.store(0, .monotonic);
}

/// Executors not retired now (a snapshot): 1 when every other executor has retired.
pub fn activeExecutors(scheduler: *const Scheduler) usize {
    const retired = scheduler.retired.load(.monotonic);
    assert(retired < scheduler.executors.len);
    return scheduler.executors.len - retired;
}

/// Whether `executor`, searching, is the only executor awake: every other one has retired, or
/// every other one sleeps on the idle list (a mix of the two, with a retired executor running
/// its bound tasks, does not count: that would take a count per state). Then it has no one to
/// steal from (a sleeping executor's queues are empty, and whoever queues work for it wakes
/// it), and it searches as a lone executor would (`Executor.searchAlone`). A snapshot of one
/// or two loads.
pub fn aloneAwake(scheduler: *const Scheduler, executor: *const Executor) bool {
    assert(!executor.idle_listed);
    if (scheduler.activeExecutors() == 1) return true;
    return scheduler.sleeping.load(.monotonic) + 1 == scheduler.executors.len;
}

/// Whether `executor` is retired (see "Retiring executors" above); the spare executor is,
/// while not at work. One load.
pub fn isRetired(scheduler: *const Scheduler, executor: *const Executor) bool {
    const retired = scheduler.retired.load(.monotonic);
    assert(retired < scheduler.executors.len);
    // The spare's index is `executors.len`: past every active one.
    if (executor.index + retired < scheduler.executors.len) return false;
    return executor.index < scheduler.executors.len or !scheduler.spare_active.load(.monotonic);
}

pub const ContentionPolicy = @import("../options.zig").ContentionPolicy;

/// Puts `executor` on the idle list before its last look at the queues.
pub fn announceIdle(scheduler: *Scheduler, executor: *Executor) void {
    assert(!executor.searching);
    scheduler.idle_lock.lock();
    defer scheduler.idle_lock.unlock();
    assert(!executor.idle_listed);
    // Capacity for every executor was reserved at init.
    scheduler.idle.appendAssumeCapacity(executor.index);
    executor.idle_listed = true;
    _ = scheduler.sleeping.fetchAdd(1, .seq_cst);
}

/// Takes `executor` off the idle list after it woke up. Returns whether a producer woke it
/// to search (it then owns one count of `searching`).
pub fn leaveIdle(scheduler: *Scheduler, executor: *Executor) bool {
    scheduler.idle_lock.lock();
    defer scheduler.idle_lock.unlock();
    if (executor.idle_listed) {
        const position = std.mem.indexOfScalar(u32, scheduler.idle.items, executor.index).?;
        _ = scheduler.idle.orderedRemove(position);
        executor.idle_listed = false;
        _ = scheduler.sleeping.fetchSub(1, .seq_cst);
    }
    const woken = executor.woken_to_search;
    executor.woken_to_search = false;
    return woken;
}

/// Whether any queue `executor` could take from holds a task (a seq_cst snapshot): for a
/// retired executor, only its own injection queue (bound tasks).
pub fn hasWorkFor(scheduler: *Scheduler, executor: *Executor) bool {
    if (executor.inject_count.load(.seq_cst) > 0) return true;
    if (scheduler.isRetired(executor)) return false;
    return scheduler.hasStealableWork(executor);
}

/// Whether a task waits in the global queue or in the ring of an executor other than `except`
/// (a seq_cst snapshot of the global count).
pub fn hasStealableWork(scheduler: *Scheduler, except: ?*const Executor) bool {
    if (scheduler.inject_count.load(.seq_cst) > 0) return true;
    for (scheduler.executors) |*other| {
        if (other != except and !other.ring.isEmpty()) return true;
    }
    return false;
}

/// From a retired executor that just announced itself idle: wakes an active executor if a
/// task waits in the global queue or a ring. A producer wakes no one while some executor
/// searches, leaving its task to that searcher; one retired meanwhile gives up its search
/// without taking from those queues, and its idle check skips them. Its announcement is
/// seq_cst, after its search ended: it sees every task pushed while it searched.
pub fn passOnStealableWork(scheduler: *Scheduler) void {
    if (scheduler.hasStealableWork(null)) scheduler.notifyWork();
}

/// `noteContention`, and the look at `cpu_ns` it asks for, as `Executor.search` does them.
fn note(scheduler: *Scheduler, now_ns: u64, contention: RunDelay.Contention, cpu_ns: u64) void {
    if (scheduler.noteContention(now_ns, contention)) scheduler.considerRetiring(now_ns, cpu_ns);
}

/// A scheduler over `executors` for the tests of its bookkeeping: the executors are indexed and
/// off the idle list, and nothing runs (no threads, no tasks).
fn testScheduler(executors: []Executor) Scheduler {
    for (executors, 0..) |*executor, index| {
        executor.index = @intCast(index);
        executor.idle_listed = false;
    }
    return .{
        .gpa = std.testing.allocator,
        .executors = executors,
        .cpus = @intCast(executors.len),
        .pinned = false,
        .main_task = undefined,
        .tasks = undefined,
        .hooks = undefined,
        .hooks_context = undefined,
    };
}

test "Scheduler: executors retire one at a time under lasting contention while the work fits" {
    const ms = std.time.ns_per_ms;
    const look_ns = config.run_delay_backoff_ns_min;
    var executors: [3]Executor = undefined;
    var scheduler = testScheduler(&executors);
    const start_ns = 1_000 * ms;
    const until_ns = start_ns + 100 * ms;
    // A blip: contended, nobody retires.
    note(&scheduler, start_ns, .{ .quiet_until_ns = until_ns, .since_ns = start_ns - 1 * ms }, 0);
    try std.testing.expect(scheduler.cpusContended(start_ns));
    try std.testing.expectEqual(@as(u32, 0), scheduler.retired.load(.monotonic));
    // Lasting: the first look marks the process's CPU time, and no other look comes before
    // `look_ns` has passed.
    const lasting: RunDelay.Contention = .{
        .quiet_until_ns = until_ns,
        .since_ns = start_ns - config.retire_contention_ns_min,
    };
    var cpu_ns: u64 = 50 * ms;
    note(&scheduler, start_ns, lasting, cpu_ns);
    note(&scheduler, start_ns + look_ns - 1, lasting, cpu_ns);
    try std.testing.expectEqual(@as(u32, 0), scheduler.retired.load(.monotonic));
    // Busy: 2 CPUs' worth of time in the interval, all that 2 of the 3 executors could use.
    var now_ns: u64 = start_ns + look_ns;
    cpu_ns += 2 * look_ns;
    note(&scheduler, now_ns, lasting, cpu_ns);
    try std.testing.expectEqual(@as(u32, 0), scheduler.retired.load(.monotonic));
    // Just under 2 CPUs: the highest executor retires.
    now_ns += look_ns;
    cpu_ns += 2 * look_ns - 1;
    note(&scheduler, now_ns, lasting, cpu_ns);
    try std.testing.expectEqual(@as(u32, 1), scheduler.retired.load(.monotonic));
    try std.testing.expect(scheduler.isRetired(&executors[2]));
    try std.testing.expect(!scheduler.isRetired(&executors[1]));
    // 1 CPU's worth with 2 active: the next stays.
    now_ns += look_ns;
    cpu_ns += look_ns;
    note(&scheduler, now_ns, lasting, cpu_ns);
    try std.testing.expectEqual(@as(u32, 1), scheduler.retired.load(.monotonic));
    // Idle: the next retires, and executor 0 never does.
    now_ns += look_ns;
    note(&scheduler, now_ns, lasting, cpu_ns);
    try std.testing.expect(scheduler.isRetired(&executors[1]));
    now_ns += look_ns;
    note(&scheduler, now_ns, lasting, cpu_ns);
    try std.testing.expectEqual(@as(u32, 2), scheduler.retired.load(.monotonic));
    try std.testing.expect(!scheduler.isRetired(&executors[0]));
    // A look long after the last only marks.
    scheduler.retired.store(0, .monotonic);
    now_ns += config.retire_usage_window_ns_max + 1;
    note(&scheduler, now_ns, lasting, cpu_ns);
    try std.testing.expectEqual(@as(u32, 0), scheduler.retired.load(.monotonic));
    scheduler.retired.store(2, .monotonic);
    // They all come back once the contention has passed, not before.
    scheduler.reviewRetired(until_ns - 1);
    try std.testing.expectEqual(@as(u32, 2), scheduler.retired.load(.monotonic));
    scheduler.reviewRetired(until_ns);
    try std.testing.expectEqual(@as(u32, 0), scheduler.retired.load(.monotonic));
    // Pinned tasks never move: no executor retires in pinned mode.
    scheduler.pinned = true;
    for (0..2) |_| {
        now_ns += look_ns;
        note(&scheduler, now_ns, lasting, cpu_ns);
    }
    try std.testing.expect(scheduler.cpusContended(now_ns));
    try std.testing.expectEqual(@as(u32, 0), scheduler.retired.load(.monotonic));
    // Nor without a watchdog to recall them (`may_retire`), idle as the process is.
    scheduler.pinned = false;
    scheduler.may_retire = false;
    for (0..4) |_| {
        now_ns += look_ns;
        note(&scheduler, now_ns, lasting, cpu_ns);
    }
    try std.testing.expect(scheduler.cpusContended(now_ns));
    try std.testing.expectEqual(@as(u32, 0), scheduler.retired.load(.monotonic));
    // The same looks with it: the two retire.
    scheduler.may_retire = true;
    for (0..4) |_| {
        now_ns += look_ns;
        note(&scheduler, now_ns, lasting, cpu_ns);
    }
    try std.testing.expectEqual(@as(u32, 2), scheduler.retired.load(.monotonic));
}

test "Scheduler: an executor is alone awake once every other one retired or sleeps" {
    var executors: [3]Executor = undefined;
    var scheduler = testScheduler(&executors);
    try std.testing.expect(!scheduler.aloneAwake(&executors[0]));
    // One of the two others sleeps: the third may still have work to steal.
    _ = scheduler.sleeping.fetchAdd(1, .seq_cst);
    try std.testing.expect(!scheduler.aloneAwake(&executors[0]));
    _ = scheduler.sleeping.fetchAdd(1, .seq_cst);
    try std.testing.expect(scheduler.aloneAwake(&executors[0]));
    // Retired executors count as away, asleep or not (one may be running its bound tasks).
    scheduler.sleeping.store(0, .seq_cst);
    scheduler.retired.store(1, .monotonic);
    try std.testing.expect(!scheduler.aloneAwake(&executors[0]));
    scheduler.retired.store(2, .monotonic);
    try std.testing.expect(scheduler.aloneAwake(&executors[0]));
}
