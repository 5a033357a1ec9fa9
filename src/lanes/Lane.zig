//! A bounded pool of OS threads for blocking calls: `lane.run(io, f, args)` runs `f` on one of
//! the lane's worker threads and parks the caller (a fiber on weft, or a plain thread) until it
//! returns. The executors never block in a syscall that has no asynchronous form.
//!
//! ```
//! const lane = try weft.Lane.init(gpa, .{ .threads = 4, .queue_limit = 64 });
//! defer lane.deinit(io);
//! const bytes = try lane.run(io, std.posix.read, .{ fd, buffer });
//! ```
//!
//! ## Semantics
//!
//! - The lane has `threads` workers and a FIFO queue of at most `queue_limit` accepted jobs.
//!   With the queue full, admission (per lane) either fails at once (`.fail_fast`:
//!   `error.QueueFull`) or waits in a FIFO admission line of at most `waiters_max` callers
//!   (`.wait`; `error.Overloaded` past it). A caller in the line is admitted by a worker that
//!   frees a queue slot, in arrival order; nobody overtakes the line.
//! - A job is *accepted* once it is in the queue or running. Canceled before acceptance (a
//!   request pending when `run` is called, or arriving while in the admission line): the job
//!   never runs and the caller gets `error.Canceled`. After acceptance the job runs exactly
//!   once, to completion, and the caller waits for it: **the job borrows the caller's memory**
//!   (its arguments and result live in the caller's frame), so `run` cannot return before the
//!   worker is done with them. A cancel request that arrives after acceptance is therefore not
//!   delivered by `run`: `run` returns the job's own result and re-arms the request
//!   (`io.recancel()`), so the caller sees `error.Canceled` at its next cancelation point.
//!   (Rejected alternative: return `error.Canceled` and drop the result. The job may have done
//!   something irreversible, such as writing a file, which the caller then could not learn.)
//! - `runTimeout` bounds the time waiting for acceptance: `error.DeadlineExceeded` if the job
//!   is still in the admission line then. Once accepted, the deadline no longer applies.
//! - The result type is `f`'s own, with the lane's errors added (`Result(f)`): the job's error
//!   set is preserved, never widened to `anyerror`.
//!
//! ## Workers
//!
//! Each worker has its own futex word and parks on it only after its queue poll found nothing
//! for `idle_spin_ns`. A submitter wakes a parked worker only when it makes the queue go from
//! empty to non-empty and no worker is polling; a worker that takes a job and leaves more
//! behind wakes a parked peer, again unless one polls (so a burst spreads over the pool
//! without every submission paying a syscall), and a woken worker keeps running jobs until
//! the queue is empty (a batch per wake). A poller left to take the job matters on a machine
//! with few CPUs: a parked worker woken beside it waits for a CPU while the poller spins, and
//! one fiber calling a 2-worker lane in turn paid ~20 µs per call for it (bench/lanes.sh,
//! `sequential`). A worker tells a caller its job is done only after it counted itself free
//! under the lock, so a caller back at once with its next call sees the lane as it is.
//!
//! Jobs are intrusive nodes on the callers' stacks carrying their own completion word: no
//! ticket map, no allocation per call. The lane allocates once, in `init`.
//!
//! ## Job states (under the lane's lock, except the completion word)
//!
//!     waiting (admission line) ──worker frees a slot──▶ queued ──worker pops──▶ running
//!        │  │                                            │                        │
//!        │  └─shutdown: failed (ShutdownInProgress)      └─shutdown(.cancel):     └─▶ done
//!        └─caller canceled / deadline: withdrawn            failed
//!
//! - `waiting`: linked in `admission`; the caller may withdraw it (it is not accepted).
//! - `queued`: linked in `queue`; accepted, only a worker or `shutdown(.cancel)` removes it.
//! - `running`: owned by a worker, unlinked; the arguments and result belong to the worker.
//! - `done`/`failed`: the completion word leaves `pending` (release), after which the worker
//!   or `shutdown` touches only its address (a futex wake); the caller owns everything again.
//!
//! ## Shutdown
//!
//! `shutdown` stops admission (`error.ShutdownInProgress`), fails every caller in the
//! admission line, runs the queued jobs (`.run`) or fails them before they start (`.cancel`),
//! waits for the workers up to a deadline, joins them if they all exited and returns a
//! `Report`. Every caller is resumed exactly once on every path: by the worker that ran its
//! job, by `shutdown` that failed it, or by itself when it withdrew.
//!
//! ## Metrics
//!
//! A lane given `Options.name` is listed for `weft.Metrics` (`named.zig`) and *metered*: each
//! job's wait from its call to its start and its run go into two log2 histograms. The clock is
//! read outside the lock (when the call begins, before and after the job runs) and the
//! histograms are written in `jobDone`, under the lock the worker takes there anyway, so
//! their writes are one at a time without a locked instruction. Refusals are counted by error
//! where each is decided, under the lock too. An unnamed lane, which nobody reports, reads no
//! clock; the runtime's own lanes are metered under their names (`initOwned`).
//!
//! Thread-safety: `run`, `runTimeout`, `stats` and `figures` may be called from any fiber or
//! OS thread at once; `shutdown` once; `deinit` once, after every `run` returned.
const Lane = @This();

/// N lanes of one queue each, picked round-robin or by key, spilling to a shard with room.
pub const Sharded = @import("Sharded.zig");

const std = @import("std");
const builtin = @import("builtin");
const assert = std.debug.assert;
const Io = std.Io;
const config = @import("../config.zig");
// The lock, the atomics and the workers' futex through the shim (os/Mutex.zig, std's atomics
// and the futex syscalls outside tests), so that the interleaving checker runs the real worker
// loop (see the scenarios at the bottom).
const atomic = @import("../os/atomic.zig");
const Lock = atomic.Mutex;
const os = @import("../os/host.zig");
const os_thread = @import("../os/thread.zig");
const cpu_demand = @import("../contention/cpu_demand.zig");
const wait_reason = @import("../wait_reason.zig");
const Counter = @import("../os/Counter.zig");
const Histogram = @import("../os/Histogram.zig");
const named = @import("named.zig");

gpa: std.mem.Allocator,
options: Options,
/// Guards the fields below up to `counts` (a short critical section, never held while a job
/// runs or while anybody parks).
lock: Lock = .{},
phase: Phase = .open,
queue: JobList = .{},
admission: JobList = .{},
/// Jobs a worker took and has not finished.
running: u32 = 0,
/// Parked workers, most recently parked first (its stack and caches are the warmest).
idle: ?*Worker = null,
/// The `Io` of the `shutdown` caller, which every exiting worker wakes.
shutdown_io: ?Io = null,
counts: Stats = .{},
/// `Stats.jobs_run`, counted by the worker before it completes the job (atomic, outside the
/// lock), so a caller that got its result also finds its job counted.
jobs_run: atomic.Value(u64) = .init(0),
/// `queue.len`, readable without the lock by polling workers (a hint).
queued_hint: atomic.Value(u32) = .init(0),
/// `running + queue.len`, readable without the lock (a hint for `hasFreeWorker`).
busy_hint: atomic.Value(u32) = .init(0),
/// The shards of the `Lane.Sharded` this lane belongs to (itself included), set once by
/// `Sharded.init` after every shard started: an idle worker takes queued jobs from them
/// (see `stealJob`). Null for a lane of its own.
siblings: atomic.Value(?*const []*Lane) = .init(null),
/// This lane's place in `siblings` (written before `siblings` is published, then constant).
shard_index: u32 = 0,
/// Workers on the idle list, readable without the lock (a hint: a sibling shard with a job
/// that must wait looks for a parked worker to take it, see `wakeSibling`).
parked_hint: atomic.Value(u32) = .init(0),
/// Workers polling the queue before they park (`pollQueue`). Raised without the lock, lowered
/// under it before the poller's last look at the queue: so a submitter that sees it raised,
/// under the lock, knows its job will be found by that poller, and wakes nobody.
polling: atomic.Value(u32) = .init(0),
/// Workers started and not yet exited; `shutdown` waits on it (futex word).
workers_live: atomic.Value(u32) = .init(0),
workers: []Worker,
/// Whether the worker threads were joined.
joined: bool = false,
/// `Options.name`, or the name its owner gave it (`initOwned`); empty when unnamed.
name: named.Name = .{},
/// Its place in the process's list of named lanes (`named.zig`), which it leaves in `deinit`;
/// null when not listed.
listed: ?u32 = null,
/// Whether the lane times its jobs for `weft.Metrics` (`queue_wait`, `run_time`): named lanes
/// and the runtime's own do, with the counters compiled in. Constant once the lane is shared.
/// Unnamed lanes, which no snapshot reports, skip the clock reads.
metered: bool = false,
/// For `weft.Metrics`, under the lock: calls refused by each error of `rejection_errors`
/// (compiled out with `-Dmetrics=false`). Counted whether or not the lane is metered: an
/// increment under a lock already held costs nothing worth a branch.
rejected: [rejection_errors.len]Counter = @splat(.{}),
/// For `weft.Metrics`, under the lock, when `metered`: each job's wait from its call to its
/// start (the admission line included), and its run.
queue_wait: Histogram = .{},
run_time: Histogram = .{},

pub const Admission = enum {
    /// A full queue rejects the call at once with `error.QueueFull`.
    fail_fast,
    /// A full queue puts the caller in a FIFO line of at most `waiters_max`.
    wait,
};

pub const Options = struct {
    /// Worker threads, all started by `init`.
    threads: u32 = 4,
    /// Accepted jobs waiting for a worker, at most.
    queue_limit: u32 = 256,
    admission: Admission = .fail_fast,
    /// Callers waiting for a queue slot (`.wait` admission), at most.
    waiters_max: u32 = 1024,
    /// How long an idle worker polls the queue before it parks (see `config`).
    idle_spin_ns: u64 = config.lane_idle_spin_ns_default,
    /// How long a caller polls its job's completion before it parks (see `config`).
    caller_spin_ns: u64 = config.lane_caller_spin_ns_default,
    stack_size_bytes: usize = config.lane_stack_size_bytes_default,
    /// Added to each worker thread's nice value (0 to 19; 0 keeps the process's priority).
    /// A lane of computation runs below the executors this way, so they win the CPU when
    /// both want it (see `weft.CpuLane`). Linux only: elsewhere a nonzero value fails `init`.
    nice: u8 = 0,
    /// Each worker's time slice in the kernel's scheduler (null: the kernel's default; else
    /// `os.thread_slice_ns_min` to `_max`). A short slice lets the executors preempt a
    /// computing worker sooner when they share a CPU (see `weft.CpuLane` and
    /// `os.setThreadSlice`); kernels before 6.12 ignore it. Linux only, as `nice`.
    slice_ns: ?u64 = null,
    /// Reports the lane in `weft.Metrics` under this name (in every runtime of the process:
    /// a lane is not a runtime's), and times its jobs for it; an unnamed lane is not reported.
    /// Kept up to `config.lane_name_bytes_max` bytes (cut at a character boundary), control
    /// characters replaced by `_`. Unique among the live named lanes; "blocking" and "cpu"
    /// name each runtime's own lanes.
    name: ?[]const u8 = null,
};

/// The lane's own errors, added to every job's result.
pub const Error = error{
    /// The caller was canceled before its job was accepted; the job never ran.
    Canceled,
    /// The queue was full and the lane's admission is `.fail_fast`.
    QueueFull,
    /// The queue was full and the admission line held `waiters_max` callers.
    Overloaded,
    /// The deadline of `runTimeout` passed before the job was accepted; it never ran.
    DeadlineExceeded,
    /// `shutdown` began before the job ran; it never ran.
    ShutdownInProgress,
};

/// The lane's errors in the order `weft.Metrics` reports the calls each refused.
pub const rejection_errors = [_]Error{
    error.Canceled,
    error.QueueFull,
    error.Overloaded,
    error.DeadlineExceeded,
    error.ShutdownInProgress,
};

comptime {
    // Every error of `Error` is reported, once.
    assert(rejection_errors.len == @typeInfo(Error).error_set.?.len);
    for (rejection_errors, 0..) |err, index| {
        assert(rejectionIndex(err) == index);
    }
}

/// `err`'s place in `rejection_errors`.
pub fn rejectionIndex(err: Error) usize {
    inline for (rejection_errors, 0..) |candidate, index| {
        if (err == candidate) return index;
    }
    unreachable; // the comptime block above checks that every error is listed
}

/// `initOwned`'s errors: the options, memory, threads.
pub const OwnedInitError = error{InvalidOptions} ||
    std.mem.Allocator.Error || std.Thread.SpawnError;

pub const InitError = OwnedInitError || error{
    /// `Options.name` is another live named lane's, or "blocking" or "cpu" (each runtime's
    /// own lanes): two lanes of one name would be one series in `weft.Metrics`.
    NameInUse,
    /// `config.lanes_named_max` named lanes are alive already.
    NamesExhausted,
};

/// What `weft.Metrics` reports of a lane (`figures`): gauges now, counts since `init`.
pub const Figures = struct {
    /// Jobs accepted and waiting for a worker.
    queued: u64 = 0,
    /// Jobs a worker runs.
    running: u64 = 0,
    /// Callers in the admission line (`.wait`), not yet accepted.
    waiters: u64 = 0,
    /// Jobs that ran to completion (counted with the counters compiled out too).
    completed: u64 = 0,
    /// Calls that failed with each error of `rejection_errors`: their jobs never ran.
    rejected: [rejection_errors.len]u64 = @splat(0),
    /// Of the jobs that ran (metered lanes): from the call to the job's start, and its run.
    queue_wait: Histogram.Snapshot = .{},
    run_time: Histogram.Snapshot = .{},

    /// Sums `other` in (the shards of a `Lane.Sharded`).
    pub fn add(total: *Figures, other: Figures) void {
        total.queued += other.queued;
        total.running += other.running;
        total.waiters += other.waiters;
        total.completed += other.completed;
        for (&total.rejected, other.rejected) |*count, more| count.* += more;
        total.queue_wait.add(other.queue_wait);
        total.run_time.add(other.run_time);
    }
};

/// What `shutdown` does with accepted jobs that have not started.
pub const Policy = enum {
    /// Run them (their callers get their results).
    run,
    /// Fail them before they start (their callers get `error.ShutdownInProgress`).
    cancel,
};

pub const ShutdownOptions = struct {
    policy: Policy = .run,
    /// How long to wait for the workers to finish; `.none` waits as long as it takes.
    timeout: Io.Timeout = .none,
};

/// Counters over the lane's life. Under the lock; a copy is returned by `stats`.
pub const Stats = struct {
    /// Jobs that ran to completion (kept in `Lane.jobs_run`; filled in by `stats`).
    jobs_run: u64 = 0,
    /// Accepted jobs failed by `shutdown(.cancel)` before they started.
    jobs_failed: u64 = 0,
    /// Callers in the admission line failed by `shutdown`.
    waiters_failed: u64 = 0,
    /// Callers that left the admission line (canceled or past their deadline).
    waiters_withdrawn: u64 = 0,
    /// Calls refused outright (`QueueFull`, `Overloaded`, `ShutdownInProgress`, or canceled
    /// before they asked).
    calls_rejected: u64 = 0,
    /// Jobs this lane's workers took from the queue of a sibling shard (`Lane.Sharded`) and
    /// ran; they are counted in `jobs_run` here, not there.
    jobs_stolen: u64 = 0,
    /// Parked workers of this lane woken for a job (by a submitter, a busy peer, or a sibling
    /// shard whose job waits), each a futex syscall and a thread switch: the price of jobs
    /// that found no worker polling. Not counted: the wake-ups of `shutdown`.
    workers_woken: u64 = 0,
    /// Callers canceled after their job was accepted: each waited for its job, got its
    /// result and had the cancel request re-armed.
    canceled_after_acceptance: u64 = 0,
};

/// What `shutdown` reports.
pub const Report = struct {
    /// Jobs that ran to completion over the lane's life.
    jobs_run: u64,
    /// Accepted jobs failed before they started (policy `.cancel`).
    jobs_failed: u64,
    /// Callers of the admission line failed.
    waiters_failed: u64,
    /// Jobs still running or queued when the deadline passed (0 when every worker exited;
    /// `deinit` then waits for them).
    jobs_left: u64,
};

const Phase = enum { open, draining };

/// A job's completion word: `pending`, then how it ended.
const pending: u32 = 0;
const outcome_ran: u32 = 1;
const outcome_failed: u32 = 2;

/// A unit of work, on the caller's stack. Type-erased: `start` knows where the arguments and
/// the result are (`run` embeds the `Job` in a typed call frame).
pub const Job = struct {
    start: *const fn (job: *Job) void,
    /// The caller's Io: the worker wakes the caller through it.
    io: Io,
    state: State = .fresh,
    prev: ?*Job = null,
    next: ?*Job = null,
    /// The futex word the caller parks on.
    completion: atomic.Value(u32) = .init(pending),
    /// When the call began (`stamp`), for the queue wait of a metered lane; else 0.
    submitted_ns: u64 = 0,

    /// Records when the call began, if the lane is metered (a clock read otherwise saved).
    pub fn stamp(job: *Job, metered: bool) void {
        assert(job.state == .fresh);
        if (metered) job.submitted_ns = os.monotonicNs();
    }

    /// Written under the lane's lock only. A job that ran stays `running`: its completion
    /// word, not its state, tells its caller that it ended; `finished` marks a job that
    /// `shutdown` failed.
    pub const State = enum { fresh, waiting, queued, running, finished, withdrawn };
};

/// An intrusive doubly linked FIFO of jobs. Under the lane's lock.
const JobList = struct {
    head: ?*Job = null,
    tail: ?*Job = null,
    len: u32 = 0,

    fn push(list: *JobList, job: *Job) void {
        assert(job.prev == null and job.next == null);
        job.prev = list.tail;
        if (list.tail) |tail| tail.next = job else list.head = job;
        list.tail = job;
        list.len += 1;
    }

    fn pop(list: *JobList) ?*Job {
        const job = list.head orelse return null;
        list.remove(job);
        return job;
    }

    fn remove(list: *JobList, job: *Job) void {
        assert(list.len > 0);
        if (job.prev) |prev| prev.next = job.next else list.head = job.next;
        if (job.next) |next| next.prev = job.prev else list.tail = job.prev;
        job.prev = null;
        job.next = null;
        list.len -= 1;
        assert((list.len == 0) == (list.head == null));
    }
};

const Worker = struct {
    lane: *Lane,
    thread: ?std.Thread = null,
    /// Futex word: `parked` while on the idle list, `woken` once taken off it.
    signal: atomic.Value(u32) = .init(woken),
    next_idle: ?*Worker = null,

    const parked: u32 = 0;
    const woken: u32 = 1;
};

/// `f`'s return type with the lane's errors added: `E!T` becomes `(E || Error)!T`, `T`
/// becomes `Error!T`.
pub fn Result(comptime function: anytype) type {
    return ResultWith(function, Error);
}

/// `f`'s return type with the error set `Extra` added, its own error set kept (never widened
/// to `anyerror`): the result type of every call that runs `f` for its caller (lanes, the CPU
/// lane, registry transactions).
pub fn ResultWith(comptime function: anytype, comptime Extra: type) type {
    const Return = @typeInfo(@TypeOf(function)).@"fn".return_type orelse
        @compileError("a job needs a function with a concrete return type");
    return switch (@typeInfo(Return)) {
        .error_union => |info| (info.error_set || Extra)!info.payload,
        else => Extra!Return,
    };
}

/// Allocates the lane and starts its worker threads. Call `deinit` to stop and free it.
pub fn init(gpa: std.mem.Allocator, options: Options) InitError!*Lane {
    const text = options.name orelse return initWith(gpa, options, null);
    if (text.len == 0) return error.InvalidOptions;
    try validate(options);
    // The name first: one in use fails with nothing started.
    const name: named.Name = .init(text);
    const place = try named.claim(&name);
    errdefer named.release(place);
    const lane = try initWith(gpa, options, text);
    named.publish(place, .{ .lane = lane });
    lane.listed = place;
    return lane;
}

/// `init` for a lane that its owner reports itself under `name`, rather than the process's
/// list of named lanes: each runtime's blocking and CPU lanes (their names would clash across
/// runtimes) and the shards of a named `Lane.Sharded` (listed as one). The lane is metered;
/// `options.name` must be null.
pub fn initOwned(
    gpa: std.mem.Allocator,
    options: Options,
    name_text: []const u8,
) OwnedInitError!*Lane {
    assert(options.name == null);
    assert(name_text.len > 0);
    return initWith(gpa, options, name_text);
}

fn initWith(
    gpa: std.mem.Allocator,
    options: Options,
    name_text: ?[]const u8,
) OwnedInitError!*Lane {
    try validate(options);
    const lane = try gpa.create(Lane);
    errdefer gpa.destroy(lane);
    const workers = try gpa.alloc(Worker, options.threads);
    errdefer gpa.free(workers);
    lane.* = .{ .gpa = gpa, .options = options, .workers = workers };
    // The lane keeps its own copy: the caller's bytes may go.
    lane.options.name = null;
    if (name_text) |text| {
        lane.name = .init(text);
        lane.metered = Counter.enabled;
    }
    for (workers) |*worker| worker.* = .{ .lane = lane };
    for (workers, 0..) |*worker, index| {
        _ = lane.workers_live.fetchAdd(1, .monotonic);
        worker.thread = os_thread.spawn(
            "lane worker",
            "the lane's Options.stack_size_bytes",
            options.stack_size_bytes,
            gpa,
            workerMain,
            .{worker},
        ) catch |err| {
            _ = lane.workers_live.fetchSub(1, .monotonic);
            lane.stopStarted(workers[0..index]);
            return err;
        };
    }
    assert(lane.workers_live.load(.monotonic) == options.threads);
    return lane;
}

fn validate(options: Options) error{InvalidOptions}!void {
    if (options.threads == 0 or options.threads > config.lane_threads_max) {
        return error.InvalidOptions;
    }
    if (options.queue_limit == 0) return error.InvalidOptions;
    if (options.nice > config.nice_max) return error.InvalidOptions;
    // A per-thread priority or slice is Linux's: elsewhere refused rather than ignored.
    if (!os.thread_tuning_supported and (options.nice != 0 or options.slice_ns != null)) {
        return error.InvalidOptions;
    }
    if (options.slice_ns) |slice_ns| {
        if (slice_ns < os.thread_slice_ns_min or slice_ns > os.thread_slice_ns_max) {
            return error.InvalidOptions;
        }
    }
    if (options.admission == .wait and options.waiters_max == 0) return error.InvalidOptions;
}

/// `init` failed part-way: stops and joins the workers already started (no job ran).
fn stopStarted(lane: *Lane, started: []Worker) void {
    lane.lock.lock();
    lane.phase = .draining;
    var idle = lane.idle;
    lane.idle = null;
    lane.parked_hint.store(0, .monotonic);
    // Taken off the idle list as `shutdown` does: a parked worker waits for its word to say
    // `woken`, and a futex wake alone would find it still `parked`.
    var cursor = idle;
    while (cursor) |worker| : (cursor = worker.next_idle) {
        worker.signal.store(Worker.woken, .release);
    }
    lane.lock.unlock();
    while (idle) |worker| {
        idle = worker.next_idle;
        worker.next_idle = null;
        wakeWorker(worker);
    }
    for (started) |*worker| worker.thread.?.join();
}

/// Shuts the lane down if `shutdown` was not called (policy `.run`, no deadline), joins the
/// worker threads (blocking until jobs left running by a `shutdown` deadline finish) and
/// frees the lane. Every `run` must have returned.
pub fn deinit(lane: *Lane, io: Io) void {
    // First: once off the list no snapshot reads the lane, which is about to be freed.
    if (lane.listed) |place| named.release(place);
    lane.listed = null;
    if (lane.phase == .open) _ = lane.shutdown(io, .{});
    assert(lane.phase == .draining);
    if (!lane.joined) lane.joinWorkers();
    assert(lane.queue.len == 0 and lane.admission.len == 0);
    assert(lane.running == 0);
    const gpa = lane.gpa;
    gpa.free(lane.workers);
    gpa.destroy(lane);
}

/// Stops and frees a lane that no call ever reached, when its owner's `init` fails after it
/// was made (a `Lane.Sharded` whose later shard did not start): its workers are idle, so
/// there is nobody to wake and nothing to wait for but their exit, and no `Io` is needed.
pub fn deinitUnused(lane: *Lane) void {
    assert(lane.listed == null);
    assert(lane.phase == .open);
    lane.stopStarted(lane.workers);
    lane.joined = true;
    assert(lane.queue.len == 0 and lane.admission.len == 0 and lane.running == 0);
    const gpa = lane.gpa;
    gpa.free(lane.workers);
    gpa.destroy(lane);
}

/// Runs `function(args...)` on a worker and returns its result. See `runTimeout`.
pub fn run(
    lane: *Lane,
    io: Io,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Result(function) {
    return lane.runTimeout(io, .none, function, args);
}

/// Runs `function(args...)` on a worker thread, parks the caller until it returns, and returns
/// its result. Cancelation point until the job is accepted; then the caller waits for the job
/// uncancelably and a cancel request is re-armed (see the file doc). `timeout` bounds the wait
/// for acceptance only. Thread-safe; any fiber or OS thread.
///
/// Errors, besides the job's own: see `Error`. On every error of `Error` the job never ran.
pub fn runTimeout(
    lane: *Lane,
    io: Io,
    timeout: Io.Timeout,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Result(function) {
    var call: Call(function) = .init(io, args);
    try lane.execute(io, &call.job, timeout.toTimestamp(io));
    return call.result;
}

/// A job's typed frame on the caller's stack: the `Job` node, the arguments and the result.
/// `run` builds one; `Sharded` too. The worker writes `result`; the caller reads it after
/// `wait` returned without error.
pub fn Call(comptime function: anytype) type {
    const Function = @TypeOf(function);
    return struct {
        const Self = @This();

        job: Job,
        args: std.meta.ArgsTuple(Function),
        result: @typeInfo(Function).@"fn".return_type.?,

        pub fn init(io: Io, args: std.meta.ArgsTuple(Function)) Self {
            return .{ .job = .{ .start = &start, .io = io }, .args = args, .result = undefined };
        }

        fn start(job: *Job) void {
            const self: *Self = @fieldParentPtr("job", job);
            self.result = @call(.auto, function, self.args);
        }
    };
}

/// Submits `job` and waits until it finished (`error` only if it never ran).
pub fn execute(lane: *Lane, io: Io, job: *Job, deadline: ?Io.Clock.Timestamp) Error!void {
    assert(job.state == .fresh);
    job.stamp(lane.metered);
    io.checkCancel() catch {
        lane.countRejected(error.Canceled);
        return error.Canceled;
    };
    try lane.submit(job, lane.options.admission);
    return lane.wait(io, job, deadline);
}

/// Accepts `job` into the queue if there is room and nobody waits in the admission line;
/// never waits. Returns false (the job untouched) when it cannot: `Sharded` then tries another
/// lane. A building block of `run`; after `true`, `wait` for the job.
pub fn trySubmit(lane: *Lane, job: *Job) error{ShutdownInProgress}!bool {
    assert(job.state == .fresh);
    lane.lock.lock();
    const admitted = lane.admit(job, null);
    const wake = lane.admitWake(admitted);
    lane.lock.unlock();
    wake.send(lane);
    return switch (admitted) {
        .accepted => true,
        .full => false,
        .waiting, .queue_full, .overloaded => unreachable, // no admission given
        .shutdown => error.ShutdownInProgress,
    };
}

/// Accepts `job`, or puts it in the admission line (`.wait`), or refuses it. Never parks; a
/// building block of `run`: afterwards `wait` for the job.
pub fn submit(lane: *Lane, job: *Job, admission: Admission) Error!void {
    assert(job.state == .fresh);
    lane.lock.lock();
    const admitted = lane.admit(job, admission);
    const wake = lane.admitWake(admitted);
    lane.lock.unlock();
    wake.send(lane);
    return switch (admitted) {
        .accepted, .waiting => {},
        .full => unreachable, // an admission was given
        .queue_full => error.QueueFull,
        .overloaded => error.Overloaded,
        .shutdown => error.ShutdownInProgress,
    };
}

const Admitted = union(enum) {
    /// Queued; the payload tells whether the queue was empty before.
    accepted: bool,
    waiting,
    /// No room and no admission policy given (`trySubmit`).
    full,
    queue_full,
    overloaded,
    shutdown,
};

/// The admission decision, under the lock. FIFO: nobody overtakes the admission line.
fn admit(lane: *Lane, job: *Job, admission: ?Admission) Admitted {
    if (lane.phase != .open) {
        lane.countRejectedLocked(error.ShutdownInProgress);
        return .shutdown;
    }
    if (lane.admission.len == 0 and lane.queue.len < lane.options.queue_limit) {
        return .{ .accepted = lane.enqueue(job) };
    }
    switch (admission orelse return .full) {
        .fail_fast => {
            lane.countRejectedLocked(error.QueueFull);
            return .queue_full;
        },
        .wait => if (lane.admission.len >= lane.options.waiters_max) {
            lane.countRejectedLocked(error.Overloaded);
            return .overloaded;
        },
    }
    job.state = .waiting;
    lane.admission.push(job);
    assert(lane.admission.len <= lane.options.waiters_max);
    return .waiting;
}

/// The worker to wake for an admission decision (under the lock): one parked worker, and only
/// when the queue went from empty to non-empty.
fn admitWake(lane: *Lane, admitted: Admitted) Wake {
    const was_empty = switch (admitted) {
        .accepted => |was_empty| was_empty,
        else => return .none,
    };
    if (was_empty) if (lane.takeIdleUnlessPolling()) |worker| return .{ .worker = worker };
    // More jobs running or queued than workers, none of them parked: the job waits, unless an
    // idle worker of a sibling shard takes it (`stealJob`); a parked one must be woken for
    // that. Queued jobs count, not only running ones: a job queued behind one that our worker
    // (woken, or polling) has not taken yet waits all the same once it does (an interleaving
    // checker seed found the second of two such jobs stuck behind a first that blocked, the
    // sibling's worker parked; `running >= threads` had woken nobody).
    const waits = lane.idle == null and lane.running + lane.queue.len > lane.options.threads;
    return if (waits) .sibling else .none;
}

/// Whom a submitter wakes once it released the lock.
const Wake = union(enum) {
    none,
    /// A parked worker of this lane, taken off the idle list.
    worker: *Worker,
    /// A parked worker of a sibling shard, if any (`wakeSibling`).
    sibling,

    fn send(wake: Wake, lane: *Lane) void {
        switch (wake) {
            .none => {},
            .worker => |worker| wakeWorker(worker),
            .sibling => lane.wakeSibling(),
        }
    }
};

/// A job of ours waits behind busy workers: wakes one parked worker of the first sibling
/// shard that has one, which then steals it (or, if our workers got to it first, finds
/// nothing and parks again). Costs a load per sibling when none is parked.
fn wakeSibling(lane: *Lane) void {
    const siblings = (lane.siblings.load(.acquire) orelse return).*;
    const own = lane.shard_index;
    for (1..siblings.len) |offset| {
        if (lane.queued_hint.load(.monotonic) == 0) return; // taken meanwhile
        const sibling = siblings[(own + offset) % siblings.len];
        if (sibling.parked_hint.load(.seq_cst) == 0) continue;
        sibling.lock.lock();
        const worker = if (sibling.phase == .open) sibling.takeIdleCounted() else null;
        sibling.lock.unlock();
        if (worker) |w| return wakeWorker(w);
    }
}

/// Parks until `job` (submitted) finished or failed, or withdraws it from the admission line
/// on cancelation or at `deadline`.
pub fn wait(lane: *Lane, io: Io, job: *Job, deadline_initial: ?Io.Clock.Timestamp) Error!void {
    // No assert on `job.state` here: once submitted it belongs to the lane's lock, and a
    // worker may be writing it right now.
    var deadline = deadline_initial;
    // Poll only when the job can finish within the poll: at most one queued job per worker
    // (ours included) means it is running or next. Further back, every caller of a burst
    // would spend its poll on its executor for nothing (2,000 callers of a 1000:1 burst
    // spent a tenth of the CPU there), and their peers' fibers would wait meanwhile.
    const near = lane.queued_hint.load(.monotonic) <= lane.options.threads;
    if (near) if (pollCompletion(job, lane.options.caller_spin_ns)) |code| return outcome(code);
    while (true) {
        const code = job.completion.load(.acquire);
        if (code != pending) return outcome(code);
        const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
        // A task dump then says the caller waits for this lane, not for a futex.
        wait_reason.label(.lane, @intFromPtr(lane));
        const waited = io.futexWaitTimeout(u32, &job.completion.raw, pending, timeout);
        wait_reason.unlabel();
        waited catch |err| switch (err) {
            error.Canceled => {
                if (lane.withdraw(job, error.Canceled)) return error.Canceled;
                lane.countCanceledAfterAcceptance();
                // Accepted: the job borrows our memory, so wait for it, then re-arm.
                const code_final = lane.waitUncancelable(io, job);
                io.recancel();
                return outcome(code_final);
            },
        };
        const d = deadline orelse continue;
        if (job.completion.load(.acquire) != pending) continue;
        if (d.durationFromNow(io).raw.nanoseconds > 0) continue; // a spurious wake
        if (lane.withdraw(job, error.DeadlineExceeded)) return error.DeadlineExceeded;
        deadline = null; // accepted in time: the deadline no longer applies
    }
}

/// Polls `job`'s completion word for up to `spin_ns`; its code if it completed meanwhile.
fn pollCompletion(job: *Job, spin_ns: u64) ?u32 {
    if (spin_ns == 0) return null;
    const start_ns = os.monotonicNs();
    var polls: u32 = 0;
    while (true) : (polls += 1) {
        const code = job.completion.load(.acquire);
        if (code != pending) return code;
        std.atomic.spinLoopHint();
        if (polls % 16 == 15 and os.monotonicNs() - start_ns >= spin_ns) return null;
    }
}

fn waitUncancelable(lane: *Lane, io: Io, job: *Job) u32 {
    while (true) {
        const code = job.completion.load(.acquire);
        if (code != pending) return code;
        wait_reason.label(.lane, @intFromPtr(lane));
        io.futexWaitUncancelable(u32, &job.completion.raw, pending);
        wait_reason.unlabel();
    }
}

fn outcome(code: u32) Error!void {
    switch (code) {
        outcome_ran => {},
        outcome_failed => return error.ShutdownInProgress,
        else => unreachable, // completion codes are written only by this file
    }
}

/// Takes `job` out of the admission line if it is still there (it never runs then, and its
/// call fails with `reason`).
fn withdraw(lane: *Lane, job: *Job, reason: Error) bool {
    lane.lock.lock();
    defer lane.lock.unlock();
    if (job.state != .waiting) return false;
    assert(job.completion.load(.monotonic) == pending);
    lane.admission.remove(job);
    job.state = .withdrawn;
    lane.counts.waiters_withdrawn += 1;
    lane.rejected[rejectionIndex(reason)].increment();
    return true;
}

fn countCanceledAfterAcceptance(lane: *Lane) void {
    lane.lock.lock();
    defer lane.lock.unlock();
    lane.counts.canceled_after_acceptance += 1;
}

/// Counts a call refused before it reached the queue (canceled before it asked): `execute`,
/// and `Lane.Sharded` for the shard it would have asked.
pub fn countRejected(lane: *Lane, reason: Error) void {
    lane.lock.lock();
    defer lane.lock.unlock();
    lane.countRejectedLocked(reason);
}

/// A call refused outright (under the lock).
fn countRejectedLocked(lane: *Lane, reason: Error) void {
    lane.counts.calls_rejected += 1;
    lane.rejected[rejectionIndex(reason)].increment();
}

/// Appends an accepted job (under the lock); returns whether the queue was empty before.
fn enqueue(lane: *Lane, job: *Job) bool {
    assert(job.state == .fresh or job.state == .waiting);
    assert(lane.queue.len < lane.options.queue_limit);
    const was_empty = lane.queue.len == 0;
    job.state = .queued;
    lane.queue.push(job);
    lane.publishHints();
    return was_empty;
}

/// Under the lock, after `queue` or `running` changed: the hints read without it.
fn publishHints(lane: *Lane) void {
    lane.queued_hint.store(lane.queue.len, .monotonic);
    // seq_cst: see `park` (the hand-shake with a sibling's parking worker).
    lane.busy_hint.store(lane.running + lane.queue.len, .seq_cst);
}

/// Whether a job submitted now would likely start at once: fewer jobs running or queued than
/// workers. A snapshot without the lock (a hint: `Sharded` picks shards by it).
pub fn hasFreeWorker(lane: *const Lane) bool {
    return lane.busy_hint.load(.monotonic) < lane.options.threads;
}

/// Jobs running or queued (a snapshot without the lock, like `hasFreeWorker`).
pub fn load(lane: *const Lane) u32 {
    return lane.busy_hint.load(.monotonic);
}

/// A parked worker to wake for a queued job (under the lock), unless a worker polls the queue
/// and will take the job itself (see `polling`).
fn takeIdleUnlessPolling(lane: *Lane) ?*Worker {
    if (lane.polling.load(.monotonic) > 0) return null;
    return lane.takeIdleCounted();
}

/// `takeIdle` for a job, counted in `Stats.workers_woken` (under the lock).
fn takeIdleCounted(lane: *Lane) ?*Worker {
    const worker = lane.takeIdle() orelse return null;
    lane.counts.workers_woken += 1;
    return worker;
}

/// Takes a parked worker off the idle list (under the lock); the caller wakes it.
fn takeIdle(lane: *Lane) ?*Worker {
    const worker = lane.idle orelse return null;
    lane.idle = worker.next_idle;
    worker.next_idle = null;
    _ = lane.parked_hint.fetchSub(1, .monotonic);
    assert(worker.signal.load(.monotonic) == Worker.parked);
    worker.signal.store(Worker.woken, .release);
    return worker;
}

fn wakeWorker(worker: *Worker) void {
    atomic.futexWake(&worker.signal, 1);
}

/// A snapshot of the lane's counters.
pub fn stats(lane: *Lane) Stats {
    lane.lock.lock();
    defer lane.lock.unlock();
    var snapshot = lane.counts;
    // Ordered before the completion of every job counted (release store of the completion).
    snapshot.jobs_run = lane.jobs_run.load(.monotonic);
    return snapshot;
}

/// What `weft.Metrics` reports of the lane, read under its lock: the gauges and histograms of
/// one instant (`completed` may run ahead of the histograms by the jobs being recorded).
pub fn figures(lane: *Lane) Figures {
    lane.lock.lock();
    defer lane.lock.unlock();
    var result: Figures = .{
        .queued = lane.queue.len,
        .running = lane.running,
        .waiters = lane.admission.len,
        .completed = lane.jobs_run.load(.monotonic),
        .queue_wait = lane.queue_wait.snapshot(),
        .run_time = lane.run_time.snapshot(),
    };
    for (&result.rejected, &lane.rejected) |*count, *counter| count.* = counter.read();
    assert(result.queue_wait.count == result.run_time.count);
    return result;
}

// ------------------------------------------------------------------------------- workers

fn workerMain(worker: *Worker) void {
    const lane = worker.lane;
    // Refused only by a sandbox policy; the worker then runs at the process's priority.
    if (lane.options.nice > 0) _ = os.lowerThreadPriority(lane.options.nice);
    // After the nice value: the call keeps the nice value it finds. Refused by older kernels.
    if (lane.options.slice_ns) |slice_ns| _ = os.setThreadSlice(slice_ns);
    // Whether this worker counts itself in `cpu_demand` (from its first job after being idle
    // until it finds no more).
    var busy = false;
    // The job this worker ran last, its caller not yet told: `jobDone` has shown the worker
    // free under the lock, and the caller learns of its job once the lock is released. A
    // caller back with its next call then finds the books as they are (a `Lane.Sharded`
    // stays on this shard, a submitter wakes no sibling for a worker that is done).
    var ran: ?*Job = null;
    lane.lock.lock();
    while (true) {
        if (lane.queue.pop()) |job| {
            if (!busy) cpu_demand.workerBusy();
            busy = true;
            const peer = lane.startJob(job);
            lane.lock.unlock();
            if (ran) |done| complete(done);
            if (peer) |p| wakeWorker(p);
            const timing = lane.runJob(job);
            lane.lock.lock();
            lane.jobDone(timing);
            ran = job;
            continue;
        }
        if (lane.phase != .open) {
            // The last caller is told before the worker counts itself out.
            const done = ran orelse break;
            ran = null;
            lane.lock.unlock();
            complete(done);
            lane.lock.lock();
            continue;
        }
        lane.lock.unlock();
        if (ran) |done| complete(done);
        ran = null;
        if (lane.stealJob()) |job| {
            if (!busy) cpu_demand.workerBusy();
            busy = true;
            lane.runStolen(job);
            ran = job;
            continue;
        }
        if (busy) cpu_demand.workerIdle();
        busy = false;
        _ = lane.polling.fetchAdd(1, .monotonic);
        const found = lane.pollQueue();
        lane.lock.lock();
        // Lowered before the look below, under the lock: a job a submitter left to this
        // poller (it saw `polling` raised) is in the queue by now.
        _ = lane.polling.fetchSub(1, .monotonic);
        if (found or lane.queue.len > 0 or lane.phase != .open) continue;
        lane.park(worker);
    }
    // Exiting: the queue is empty and admission is closed, so no job can arrive any more.
    assert(lane.queue.len == 0);
    assert(ran == null);
    if (busy) cpu_demand.workerIdle();
    const io = lane.shutdown_io;
    const live = lane.workers_live.fetchSub(1, .release);
    assert(live > 0);
    lane.lock.unlock();
    // `shutdown` is still waiting (it joins the threads afterwards), so the lane lives.
    if (live == 1) if (io) |shutdown_io| shutdown_io.futexWake(u32, &lane.workers_live.raw, 1);
}

/// A worker popped `job` (under the lock): it runs now. Moves the oldest caller of the
/// admission line into the freed slot, and returns a parked peer to wake if jobs remain.
fn startJob(lane: *Lane, job: *Job) ?*Worker {
    assert(job.state == .queued);
    assert(lane.queue.len < lane.options.queue_limit);
    job.state = .running;
    lane.running += 1;
    lane.admitOne();
    lane.publishHints();
    if (lane.queue.len == 0) return null;
    return lane.takeIdleUnlessPolling();
}

/// A queue slot was freed (under the lock): the oldest caller of the admission line takes it.
fn admitOne(lane: *Lane) void {
    if (lane.admission.pop()) |admitted| {
        assert(admitted.state == .waiting);
        assert(lane.phase == .open); // shutdown empties the line
        _ = lane.enqueue(admitted);
    }
}

/// Work stealing between the shards of a `Lane.Sharded`: a worker with nothing queued takes
/// the oldest queued job of the first sibling that has one, before it polls and parks. Shards
/// share no queue, so without this a shard whose worker got less CPU (two cores shared by
/// more threads than that) still had jobs queued while the others sat idle, and a burst took
/// as long as its slowest share (bench/lanes.sh, contention 100:1). The job leaves the
/// sibling's books when taken (its queue slot goes to the sibling's admission line) and
/// enters the thief's as running, so each shard's `running`, `jobs_run` and shutdown report
/// count what its own threads do. Only open shards give jobs: a shard shutting down keeps its
/// queue for its own policy. Returns the job, already marked running.
fn stealJob(lane: *Lane) ?*Job {
    const siblings = (lane.siblings.load(.acquire) orelse return null).*;
    const own = lane.shard_index;
    for (1..siblings.len) |offset| {
        const victim = siblings[(own + offset) % siblings.len];
        if (!victim.hasWaitingJob()) continue;
        victim.lock.lock();
        defer victim.lock.unlock();
        // Only a job that would wait for a worker of its own shard: the first call to an
        // idle shard is its worker's (just woken, or still polling), not a thief's.
        if (victim.phase != .open or victim.running + victim.queue.len <= victim.options.threads) {
            continue;
        }
        const job = victim.queue.pop().?;
        assert(job.state == .queued);
        // Under the victim's lock, where a caller's `withdraw` reads it.
        job.state = .running;
        victim.admitOne();
        victim.publishHints();
        return job;
    }
    return null;
}

/// Whether a job is queued behind busy workers, so that a sibling may take it (a hint).
fn hasWaitingJob(lane: *const Lane) bool {
    return lane.queued_hint.load(.monotonic) > 0 and
        lane.busy_hint.load(.seq_cst) > lane.options.threads;
}

/// Whether some sibling shard has a job that `stealJob` would take (a hint).
fn siblingHasWaitingJob(lane: *const Lane) bool {
    const siblings = (lane.siblings.load(.acquire) orelse return false).*;
    for (siblings) |sibling| {
        if (sibling != lane and sibling.hasWaitingJob()) return true;
    }
    return false;
}

/// Runs a job `stealJob` took, counted as this lane's. Called without the lock; returns with
/// it held, as the worker loop goes on, and the job done but not completed (the loop tells
/// its caller once it released the lock).
fn runStolen(lane: *Lane, job: *Job) void {
    assert(job.state == .running);
    lane.lock.lock();
    lane.running += 1;
    lane.counts.jobs_stolen += 1;
    lane.publishHints();
    lane.lock.unlock();
    const timing = lane.runJob(job);
    lane.lock.lock();
    lane.jobDone(timing);
}

/// A worker finished a job it counted in `running` (under the lock): the job's times go into
/// the histograms here, where the lock makes their writes one at a time.
fn jobDone(lane: *Lane, timing: Timing) void {
    assert(lane.running > 0);
    lane.running -= 1;
    lane.publishHints();
    if (lane.metered) {
        lane.queue_wait.record(timing.queue_wait_ns);
        lane.run_time.record(timing.run_ns);
    }
}

/// A job's wait and run, as measured by the worker that ran it (zeros unless metered).
const Timing = struct {
    queue_wait_ns: u64 = 0,
    run_ns: u64 = 0,
};

/// Joins the worker threads once they exited (after `shutdown`); blocks until they have.
/// `Lane.Sharded` joins every shard before it frees any: a worker may be looking at a
/// sibling's queue (`stealJob`) until it exits.
pub fn join(lane: *Lane) void {
    assert(lane.phase == .draining);
    if (!lane.joined) lane.joinWorkers();
}

/// Runs `job` (without the lock) and returns its times for `jobDone`; `complete` tells its
/// caller once `jobDone` counted it. The clock is read outside the lock, so that timing does
/// not lengthen the critical sections the lane's callers and workers share.
fn runJob(lane: *Lane, job: *Job) Timing {
    assert(job.state == .running);
    const start_ns = if (lane.metered) os.monotonicNs() else 0;
    job.start(job);
    // `state` stays `running`: it is written under the lock only (`withdraw` reads it there),
    // and the completion word is what tells the caller the job ended.
    _ = lane.jobs_run.fetchAdd(1, .monotonic);
    if (!lane.metered) return .{};
    // The job stays ours until `complete`, so its stamp may still be read.
    assert(job.submitted_ns != 0);
    return .{
        .queue_wait_ns = start_ns -| job.submitted_ns,
        .run_ns = os.monotonicNs() -| start_ns,
    };
}

/// Tells the caller of a job that ran that it is done (without the lock).
fn complete(job: *Job) void {
    assert(job.state == .running);
    const io = job.io;
    // Release: the result written by `start` is visible to the caller that sees the code.
    // From here on the caller may return and reuse the memory: only the address is used.
    job.completion.store(outcome_ran, .release);
    io.futexWake(u32, &job.completion.raw, 1);
}

/// Polls the queue (without the lock) for up to `idle_spin_ns`; true if a job showed up.
fn pollQueue(lane: *Lane) bool {
    const spin_ns = lane.options.idle_spin_ns;
    if (spin_ns == 0) return false;
    const start_ns = os.monotonicNs();
    var polls: u32 = 0;
    while (true) : (polls += 1) {
        if (lane.queued_hint.load(.monotonic) > 0) return true;
        std.atomic.spinLoopHint();
        if (polls % 64 == 63 and os.monotonicNs() - start_ns >= spin_ns) return false;
    }
}

/// Parks the worker (called and returns with the lock held) until a submitter, a peer or
/// `shutdown` takes it off the idle list.
fn park(lane: *Lane, worker: *Worker) void {
    assert(lane.queue.len == 0);
    assert(worker.next_idle == null);
    worker.signal.store(Worker.parked, .monotonic);
    worker.next_idle = lane.idle;
    lane.idle = worker;
    // seq_cst, then one more look at the siblings: a submitter whose job must wait publishes
    // it (`busy_hint`, seq_cst) before it looks for a parked sibling worker (`wakeSibling`),
    // so either it sees us parked and wakes us, or we see its job here and stay up.
    _ = lane.parked_hint.fetchAdd(1, .seq_cst);
    if (lane.siblingHasWaitingJob()) {
        lane.unpark(worker);
        return;
    }
    lane.lock.unlock();
    // Acquire: pairs with the release store of `takeIdle`.
    while (worker.signal.load(.acquire) == Worker.parked) {
        atomic.futexWait(&worker.signal, Worker.parked);
    }
    lane.lock.lock();
}

/// Takes `worker`, which just put itself on the idle list, off it again (under the lock).
fn unpark(lane: *Lane, worker: *Worker) void {
    assert(worker.signal.load(.monotonic) == Worker.parked);
    var link = &lane.idle;
    while (link.*) |listed| : (link = &listed.next_idle) {
        if (listed == worker) break;
    } else unreachable; // on the list: the lock was held since it was put there
    link.* = worker.next_idle;
    worker.next_idle = null;
    _ = lane.parked_hint.fetchSub(1, .monotonic);
    worker.signal.store(Worker.woken, .monotonic);
}

// ------------------------------------------------------------------------------ shutdown

/// Stops the lane: new calls fail with `error.ShutdownInProgress`, callers in the admission
/// line are failed, accepted jobs run or are failed by `options.policy`, and the workers are
/// waited for until `options.timeout`, then joined if they all exited. Not a cancelation point
/// (the wait is protected, so that shutdown is deterministic). Call once.
pub fn shutdown(lane: *Lane, io: Io, options: ShutdownOptions) Report {
    const deadline = options.timeout.toTimestamp(io);
    var failed: JobList = .{};
    lane.lock.lock();
    assert(lane.phase == .open); // shutdown is called once
    lane.phase = .draining;
    lane.shutdown_io = io;
    // Each failed job leaves `waiting` under the lock: a caller whose wait times out now must
    // not `withdraw` it from the admission line it is no longer in.
    while (lane.admission.pop()) |job| {
        job.state = .finished;
        failed.push(job);
        lane.counts.waiters_failed += 1;
        lane.rejected[rejectionIndex(error.ShutdownInProgress)].increment();
    }
    if (options.policy == .cancel) while (lane.queue.pop()) |job| {
        job.state = .finished;
        failed.push(job);
        lane.counts.jobs_failed += 1;
        lane.rejected[rejectionIndex(error.ShutdownInProgress)].increment();
    };
    lane.publishHints();
    var idle = lane.idle;
    lane.idle = null;
    lane.parked_hint.store(0, .monotonic);
    var cursor = idle;
    while (cursor) |worker| : (cursor = worker.next_idle) {
        worker.signal.store(Worker.woken, .release);
    }
    lane.lock.unlock();
    failJobs(&failed);
    while (idle) |worker| {
        idle = worker.next_idle;
        worker.next_idle = null;
        wakeWorker(worker);
    }
    lane.awaitWorkers(io, deadline);
    lane.lock.lock();
    defer lane.lock.unlock();
    const all_exited = lane.workers_live.load(.acquire) == 0;
    const report: Report = .{
        .jobs_run = lane.jobs_run.load(.monotonic),
        .jobs_failed = lane.counts.jobs_failed,
        .waiters_failed = lane.counts.waiters_failed,
        .jobs_left = lane.running + lane.queue.len,
    };
    assert(!all_exited or report.jobs_left == 0);
    if (all_exited) {
        lane.lock.unlock();
        lane.joinWorkers();
        lane.lock.lock();
    }
    return report;
}

/// Completes every job of `failed` with `error.ShutdownInProgress`. Without the lock.
fn failJobs(failed: *JobList) void {
    while (failed.pop()) |job| {
        assert(job.state == .finished); // set by `shutdown`, under the lock
        const io = job.io;
        job.completion.store(outcome_failed, .release);
        io.futexWake(u32, &job.completion.raw, 1);
    }
}

/// Waits (uncancelably) until every worker exited or `deadline` passed.
fn awaitWorkers(lane: *Lane, io: Io, deadline: ?Io.Clock.Timestamp) void {
    const protection = io.swapCancelProtection(.blocked);
    defer _ = io.swapCancelProtection(protection);
    const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
    while (true) {
        const live = lane.workers_live.load(.acquire);
        if (live == 0) return;
        if (deadline) |d| if (d.durationFromNow(io).raw.nanoseconds <= 0) return;
        io.futexWaitTimeout(u32, &lane.workers_live.raw, live, timeout) catch |err| switch (err) {
            error.Canceled => unreachable, // protected above
        };
    }
}

fn joinWorkers(lane: *Lane) void {
    assert(!lane.joined);
    for (lane.workers) |*worker| {
        // A worker of the interleaving checker's scenarios (below) is a logical thread of the
        // test's own OS thread: there is no thread to join.
        const thread = worker.thread orelse {
            assert(builtin.is_test);
            continue;
        };
        thread.join();
    }
    lane.joined = true;
    assert(lane.workers_live.load(.acquire) == 0);
}

test "Lane: Result keeps the job's error set and adds the lane's" {
    const Job0 = struct {
        fn plain(x: u32) u32 {
            return x;
        }
        fn failing(x: u32) error{Broken}!u64 {
            return x;
        }
    };
    comptime assert(Result(Job0.plain) == Error!u32);
    comptime assert(Result(Job0.failing) == (error{Broken} || Error)!u64);
    comptime assert(@typeInfo(Result(Job0.failing)).error_union.error_set != anyerror);
}

test "Lane: a job queued while a worker polls wakes no parked worker; without a poller, one" {
    // The decision alone, on a lane built by hand (no threads): the worker loop's side of
    // the hand-shake is exercised by the stress tests in src/testing/lane_test.zig.
    var lane: Lane = .{
        .gpa = std.testing.allocator,
        .options = .{ .threads = 2 },
        .workers = &.{},
    };
    var parked_worker: Worker = .{ .lane = &lane, .signal = .init(Worker.parked) };
    lane.idle = &parked_worker;
    lane.parked_hint.store(1, .monotonic);

    lane.polling.store(1, .monotonic);
    try std.testing.expect(lane.admitWake(.{ .accepted = true }) == .none);
    try std.testing.expectEqual(&parked_worker, lane.idle.?);
    try std.testing.expectEqual(@as(u64, 0), lane.counts.workers_woken);

    lane.polling.store(0, .monotonic);
    const wake = lane.admitWake(.{ .accepted = true });
    try std.testing.expectEqual(&parked_worker, wake.worker);
    try std.testing.expectEqual(@as(?*Worker, null), lane.idle);
    try std.testing.expectEqual(Worker.woken, parked_worker.signal.load(.monotonic));
    try std.testing.expectEqual(@as(u64, 1), lane.counts.workers_woken);
    // A queue that was not empty wakes nobody: a worker is already on its way to it.
    try std.testing.expect(lane.admitWake(.{ .accepted = false }) == .none);
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Test builds only: for the interleaving checker's scenarios, here and in other files
/// (CpuLane.zig), a lane built by hand with no threads whose workers are logical threads of
/// the checker, each running `workerMain` itself.
pub const by_hand = if (builtin.is_test) struct {
    pub const LaneWorker = Worker;

    /// Makes `workers` the workers of `lane` (built by hand, not moving from now on), as if
    /// `init` had started them; each must then be run by `workerMain` until `shutdown`.
    pub fn wire(lane: *Lane, workers: []Worker) void {
        assert(lane.workers.len == 0);
        assert(workers.len == lane.options.threads);
        for (workers) |*worker| worker.* = .{ .lane = lane };
        lane.workers = workers;
        lane.workers_live.store(@intCast(workers.len), .monotonic);
    }

    /// `workerMain`: a worker has no `Io`; it parks through os/atomic.zig's futex.
    pub fn run(worker: *Worker) void {
        workerMain(worker);
    }
} else struct {};

test "Lane: a job queued behind one its worker has not taken yet wakes a parked sibling" {
    const Noop = struct {
        fn start(job: *Job) void {
            _ = job;
        }
    };
    var lane: Lane = .{
        .gpa = std.testing.allocator,
        .options = .{ .threads = 1 },
        .workers = &.{},
    };
    var first: Job = .{ .start = Noop.start, .io = std.testing.io };
    var second: Job = .{ .start = Noop.start, .io = std.testing.io };
    // The lane's one worker polls: it takes the first job, and nobody is woken for it.
    lane.polling.store(1, .monotonic);
    try std.testing.expect(lane.admitWake(lane.admit(&first, null)) == .none);
    // Nothing runs yet, but the second job waits behind the first all the same.
    try std.testing.expectEqual(@as(u32, 0), lane.running);
    try std.testing.expect(lane.admitWake(lane.admit(&second, null)) == .sibling);
}

test "interleave: Lane callers and a worker, 1000 seeds: each job runs once, cancels seen once" {
    try Checker.checkSeeds(LaneScenario);
}

/// Three callers run two jobs each on a lane built by hand (no threads) with one worker slot,
/// a queue of one and a FIFO admission line, so that callers wait to be admitted while a job
/// runs; their waits are canceled, time out and wake spuriously at random (a call that failed
/// never ran its job, and is retried). A logical thread of the interleaving checker stands for
/// the worker: it does what `workerMain` does between taking a job and telling its caller, with
/// checker steps in between. A caller canceled after its job was accepted must wait for the
/// job, return its result and re-arm the request: the checker fails a request dropped or
/// delivered twice, and the check a job that ran for a caller told it never ran (or the
/// reverse).
const LaneScenario = struct {
    lane: Lane,
    prng: std.Random.DefaultPrng,
    callers_left: atomic.Value(u32) = .init(callers),
    /// Per caller: jobs run, and calls that returned the job's result.
    ran: [callers]u32 = @splat(0),
    succeeded: [callers]u32 = @splat(0),

    const callers = 3;
    const jobs = 2;
    pub const rearming_threads = [_]usize{ 0, 1, 2 };

    pub fn init(seed: u64) LaneScenario {
        return .{
            .lane = .{
                .gpa = std.testing.allocator, // unused: nothing to allocate without threads
                .options = .{
                    .threads = 1,
                    .queue_limit = 1,
                    .admission = .wait,
                    // No polling on the real clock: the checker's clock is virtual.
                    .idle_spin_ns = 0,
                    .caller_spin_ns = 0,
                },
                .workers = &.{},
            },
            .prng = .init(seed ^ 0x1a4e),
        };
    }

    pub fn bodies(scenario: *LaneScenario) [callers + 1]Checker.Body {
        return .{
            Checker.bodyAt(call, scenario, 0),
            Checker.bodyAt(call, scenario, 1),
            Checker.bodyAt(call, scenario, 2),
            Checker.bodyOf(worker, scenario),
        };
    }

    fn work(scenario: *LaneScenario, caller: usize) void {
        scenario.ran[caller] += 1;
    }

    fn call(scenario: *LaneScenario, io: Io, index: usize) void {
        while (scenario.succeeded[index] < jobs) {
            const deadline = Checker.maybeDeadline(io, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            scenario.lane.runTimeout(io, timeout, work, .{ scenario, index }) catch |err|
                switch (err) {
                    error.Canceled, error.DeadlineExceeded => {
                        Checker.noteError(io, err);
                        continue; // the job never ran
                    },
                    // Admission waits (no QueueFull), the line is long enough, no shutdown.
                    error.QueueFull, error.Overloaded, error.ShutdownInProgress => unreachable,
                };
            scenario.succeeded[index] += 1;
            Checker.cancelationPoint(io);
        }
        _ = scenario.callers_left.fetchSub(1, .release);
    }

    /// `workerMain` without polling, parking or stealing (`WorkerScenario` runs those): the
    /// worker spins on `callers_left` (a step each time) instead of parking, so that the runs
    /// here go to the callers' side of the hand-off.
    fn worker(scenario: *LaneScenario, io: Io) void {
        _ = io;
        const lane = &scenario.lane;
        while (true) {
            lane.lock.lock();
            const job = lane.queue.pop() orelse {
                lane.lock.unlock();
                if (scenario.callers_left.load(.acquire) == 0) return;
                continue;
            };
            const peer = lane.startJob(job);
            assert(peer == null); // no idle worker to wake
            lane.lock.unlock();
            atomic.step();
            const timing = lane.runJob(job);
            lane.lock.lock();
            lane.jobDone(timing);
            lane.lock.unlock();
            atomic.step();
            complete(job);
        }
    }

    pub fn check(scenario: *LaneScenario) !void {
        for (scenario.ran, scenario.succeeded) |ran, succeeded| {
            try std.testing.expectEqual(@as(u32, jobs), succeeded);
            try std.testing.expectEqual(succeeded, ran);
        }
        const lane = &scenario.lane;
        try std.testing.expectEqual(@as(u32, 0), lane.queue.len + lane.admission.len);
        try std.testing.expectEqual(@as(u32, 0), lane.running);
    }
};

test "interleave: Lane workers poll, park and are woken, 1000 seeds: no job left queued" {
    WorkerScenario.workers_woken_total = 0;
    try Checker.checkSeeds(WorkerScenario);
    // The wake path is reached: some job found its worker parked (not all polling).
    try std.testing.expect(WorkerScenario.workers_woken_total > 0);
}

/// Three callers run two jobs each on a lane of two workers built by hand, whose workers are
/// logical threads of the interleaving checker running `workerMain` itself: they take jobs,
/// tell callers, wake a parked peer for a job left behind, poll the queue (raising `polling`)
/// or not (per seed), park on the idle list, are woken by a submitter or a peer, and exit at
/// `shutdown`, which the last caller calls once its jobs ran. The queue holds one job, so
/// callers also wait in the admission line and are moved to the queue by a worker. Callers
/// poll their job's completion or not (per seed); their waits are canceled, time out and wake
/// spuriously at random. A job left queued with no worker awake to take it (a submitter that
/// counted on a poller that then parked, a worker taken off the idle list and not woken)
/// leaves its caller waiting forever: the checker reports a lost wake-up or a deadlock.
///
/// A poll is `idle_spin_ns` of 1 ns (or `caller_spin_ns`): its first look at the real clock,
/// after 64 (16) polls, finds it past, so the poll is that many checker steps, whatever the
/// clock says, and a seed still replays exactly.
const WorkerScenario = struct {
    lane: Lane,
    workers: [workers_count]Worker = undefined,
    prng: std.Random.DefaultPrng,
    callers_left: atomic.Value(u32) = .init(callers),
    /// Per caller: jobs run, and calls that returned the job's result.
    ran: [callers]u32 = @splat(0),
    succeeded: [callers]u32 = @splat(0),
    report: ?Report = null,

    const callers = 3;
    const jobs = 2;
    const workers_count = 2;
    pub const rearming_threads = [_]usize{ 0, 1, 2 };
    /// `Stats.workers_woken` summed over the seeds of a test.
    var workers_woken_total: u64 = 0;

    pub fn init(seed: u64) WorkerScenario {
        var prng: std.Random.DefaultPrng = .init(seed ^ 0x3a7e);
        const random = prng.random();
        return .{
            .lane = .{
                .gpa = std.testing.allocator, // unused: nothing to allocate without threads
                .options = .{
                    .threads = workers_count,
                    .queue_limit = 1,
                    .admission = .wait,
                    .waiters_max = callers,
                    .idle_spin_ns = random.uintLessThan(u64, 2),
                    .caller_spin_ns = random.uintLessThan(u64, 2),
                },
                .workers = &.{},
            },
            .prng = prng,
        };
    }

    /// Wires the lane to its workers, now that the scenario no longer moves.
    pub fn bodies(scenario: *WorkerScenario) [callers + workers_count]Checker.Body {
        by_hand.wire(&scenario.lane, &scenario.workers);
        return .{
            Checker.bodyAt(call, scenario, 0),
            Checker.bodyAt(call, scenario, 1),
            Checker.bodyAt(call, scenario, 2),
            Checker.bodyOf(worker0, scenario),
            Checker.bodyOf(worker1, scenario),
        };
    }

    fn work(scenario: *WorkerScenario, caller: usize) void {
        scenario.ran[caller] += 1;
    }

    fn call(scenario: *WorkerScenario, io: Io, index: usize) void {
        while (scenario.succeeded[index] < jobs) {
            const deadline = Checker.maybeDeadline(io, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            scenario.lane.runTimeout(io, timeout, work, .{ scenario, index }) catch |err|
                switch (err) {
                    error.Canceled, error.DeadlineExceeded => {
                        Checker.noteError(io, err);
                        continue; // the job never ran
                    },
                    // Admission waits, the line holds every caller, shutdown comes last.
                    error.QueueFull, error.Overloaded, error.ShutdownInProgress => unreachable,
                };
            scenario.succeeded[index] += 1;
            Checker.cancelationPoint(io);
        }
        // The last caller stops the lane: its workers exit, parked ones woken.
        if (scenario.callers_left.fetchSub(1, .acq_rel) == 1) {
            scenario.report = scenario.lane.shutdown(io, .{});
        }
    }

    fn worker0(scenario: *WorkerScenario, io: Io) void {
        _ = io; // a worker has no `Io`
        by_hand.run(&scenario.workers[0]);
    }

    fn worker1(scenario: *WorkerScenario, io: Io) void {
        _ = io;
        by_hand.run(&scenario.workers[1]);
    }

    pub fn check(scenario: *WorkerScenario) !void {
        for (scenario.ran, scenario.succeeded) |ran, succeeded| {
            try std.testing.expectEqual(@as(u32, jobs), succeeded);
            try std.testing.expectEqual(succeeded, ran);
        }
        const report = scenario.report.?;
        try std.testing.expectEqual(@as(u64, callers * jobs), report.jobs_run);
        try std.testing.expectEqual(@as(u64, 0), report.jobs_left);
        const lane = &scenario.lane;
        try std.testing.expect(lane.joined);
        try std.testing.expectEqual(@as(u32, 0), lane.workers_live.load(.monotonic));
        try std.testing.expectEqual(@as(u32, 0), lane.polling.load(.monotonic));
        try std.testing.expectEqual(@as(?*Worker, null), lane.idle);
        workers_woken_total += lane.counts.workers_woken;
    }
};

test "interleave: Lane.Sharded workers steal, 1000 seeds: each job runs once, none left behind" {
    StealScenario.stolen_total = 0;
    StealScenario.siblings_woken_total = 0;
    try Checker.checkSeeds(StealScenario);
    // Both ways a job reaches a sibling's worker are taken: a steal, and a parked sibling
    // woken for a job that waits.
    try std.testing.expect(StealScenario.stolen_total > 0);
    try std.testing.expect(StealScenario.siblings_woken_total > 0);
}

/// A `Lane.Sharded` of two shards of one worker each, built by hand, whose workers are logical
/// threads running `workerMain`: with nothing of its own to do, a worker steals the oldest job
/// that waits in the other shard (`stealJob`), and a parked one is woken for such a job
/// (`wakeSibling`) or stays up when it sees one as it parks. Four callers, with cancels and
/// timeouts: two call key 0 once each, one a job that blocks its worker until the other's job
/// ran, so that the second job runs only if the other shard's worker takes it; one calls random
/// keys twice; one submits two jobs at once to shard 0 (`submit`, then `wait` for each), twice,
/// the second of which must not start while the first is still queued (a steal takes the
/// oldest job: FIFO across a steal). The last caller shuts the shards down. Each job runs
/// exactly once, and a job left waiting behind the blocked worker while the other worker is
/// parked is a deadlock.
const StealScenario = struct {
    shards: [shards_count]Lane,
    shard_list: [shards_count]*Lane = undefined,
    sharded: Sharded = undefined,
    workers: [shards_count]Worker = undefined,
    prng: std.Random.DefaultPrng,
    /// Set by the releasing job; the blocking job waits for it (a futex word).
    released: atomic.Value(u32) = .init(0),
    callers_left: atomic.Value(u32) = .init(callers),
    /// Per caller: jobs run, and calls that returned the job's result.
    ran: [callers]u32 = @splat(0),
    succeeded: [callers]u32 = @splat(0),
    /// A pair's second job started while its first was still queued.
    overtaken: bool = false,
    report: ?Report = null,

    const shards_count = 2;
    const callers = 4;
    const blocker = 0;
    const releaser = 1;
    const pairs = 3;
    /// Jobs per caller: the blocker and the releaser call once, the pairs caller submits two
    /// pairs.
    const jobs = [callers]u32{ 1, 1, 2, 4 };
    pub const rearming_threads = [_]usize{ 0, 1, 2, 3 };
    /// `Stats.jobs_stolen` and `Stats.workers_woken`, summed over the seeds of a test.
    var stolen_total: u64 = 0;
    var siblings_woken_total: u64 = 0;

    pub fn init(seed: u64) StealScenario {
        var prng: std.Random.DefaultPrng = .init(seed ^ 0x57ea);
        const random = prng.random();
        const options: Options = .{
            .threads = 1,
            // Room for every job at once: no call spills to the other shard.
            .queue_limit = callers + 1,
            .admission = .wait,
            .idle_spin_ns = random.uintLessThan(u64, 2),
            .caller_spin_ns = random.uintLessThan(u64, 2),
        };
        var scenario: StealScenario = .{ .shards = undefined, .prng = prng };
        for (&scenario.shards) |*shard| {
            shard.* = .{ .gpa = std.testing.allocator, .options = options, .workers = &.{} };
        }
        return scenario;
    }

    /// Wires the shards to their workers and to each other, now that the scenario no longer
    /// moves (as `Sharded.init` does once every shard started).
    pub fn bodies(scenario: *StealScenario) [callers + shards_count]Checker.Body {
        for (&scenario.shards, &scenario.workers, 0..) |*shard, *worker, index| {
            by_hand.wire(shard, worker[0..1]);
            shard.shard_index = @intCast(index);
            scenario.shard_list[index] = shard;
        }
        scenario.sharded = .{ .gpa = std.testing.allocator, .shards = &scenario.shard_list };
        for (&scenario.shards) |*shard| shard.siblings.store(&scenario.sharded.shards, .release);
        return .{
            Checker.bodyAt(call, scenario, 0),
            Checker.bodyAt(call, scenario, 1),
            Checker.bodyAt(call, scenario, 2),
            Checker.bodyAt(call, scenario, 3),
            Checker.bodyOf(worker0, scenario),
            Checker.bodyOf(worker1, scenario),
        };
    }

    fn work(scenario: *StealScenario, caller: usize) void {
        scenario.ran[caller] += 1;
        switch (caller) {
            blocker => while (scenario.released.load(.acquire) == 0) {
                atomic.futexWait(&scenario.released, 0);
            },
            releaser => {
                scenario.released.store(1, .release);
                atomic.futexWake(&scenario.released, 1);
            },
            else => {},
        }
    }

    /// A pair's second job: its first, submitted before it by the same caller, must have left
    /// the queue (FIFO), which is read under shard 0's lock, where `state` is written.
    fn workSecond(scenario: *StealScenario, first: *const Job) void {
        scenario.ran[pairs] += 1;
        const shard = &scenario.shards[0];
        shard.lock.lock();
        defer shard.lock.unlock();
        if (first.state == .queued) scenario.overtaken = true;
    }

    /// Submits two jobs to shard 0, one after the other, and waits for both.
    fn callPair(scenario: *StealScenario, io: Io) void {
        const shard = &scenario.shards[0];
        var first: Call(work) = .init(io, .{ scenario, pairs });
        var second: Call(workSecond) = .init(io, .{ scenario, &first.job });
        // The queue has room for every job: both are accepted (no admission line to leave).
        shard.submit(&first.job, .wait) catch unreachable;
        shard.submit(&second.job, .wait) catch unreachable;
        const deadline = Checker.maybeDeadline(io, scenario.prng.random());
        // Accepted, so each wait returns the job's end, having re-armed a cancel request that
        // came meanwhile; the second wait then delivers it again, and re-arms it again.
        shard.wait(io, &first.job, deadline) catch unreachable;
        shard.wait(io, &second.job, deadline) catch unreachable;
        scenario.succeeded[pairs] += 2;
        Checker.cancelationPoint(io);
    }

    fn call(scenario: *StealScenario, io: Io, index: usize) void {
        while (scenario.succeeded[index] < jobs[index]) {
            if (index == pairs) {
                scenario.callPair(io);
                continue;
            }
            const random = scenario.prng.random();
            const key: u64 = if (index == blocker or index == releaser) 0 else random.int(u1);
            const deadline = Checker.maybeDeadline(io, random);
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            scenario.sharded.runKeyed(io, key, timeout, work, .{ scenario, index }) catch |err|
                switch (err) {
                    error.Canceled, error.DeadlineExceeded => {
                        Checker.noteError(io, err);
                        continue; // the job never ran
                    },
                    // Every shard has room for every caller, shutdown comes last.
                    error.QueueFull, error.Overloaded, error.ShutdownInProgress => unreachable,
                };
            scenario.succeeded[index] += 1;
            Checker.cancelationPoint(io);
        }
        if (scenario.callers_left.fetchSub(1, .acq_rel) == 1) {
            scenario.report = scenario.sharded.shutdown(io, .{});
        }
    }

    fn worker0(scenario: *StealScenario, io: Io) void {
        _ = io; // a worker has no `Io`
        by_hand.run(&scenario.workers[0]);
    }

    fn worker1(scenario: *StealScenario, io: Io) void {
        _ = io;
        by_hand.run(&scenario.workers[1]);
    }

    pub fn check(scenario: *StealScenario) !void {
        var jobs_total: u64 = 0;
        for (scenario.ran, scenario.succeeded, jobs) |ran, succeeded, wanted| {
            try std.testing.expectEqual(wanted, succeeded);
            try std.testing.expectEqual(succeeded, ran);
            jobs_total += wanted;
        }
        try std.testing.expect(!scenario.overtaken);
        const report = scenario.report.?;
        try std.testing.expectEqual(jobs_total, report.jobs_run);
        try std.testing.expectEqual(@as(u64, 0), report.jobs_left);
        const counts = scenario.sharded.stats();
        stolen_total += counts.jobs_stolen;
        siblings_woken_total += counts.workers_woken;
        for (&scenario.shards) |*shard| {
            try std.testing.expect(shard.joined);
            try std.testing.expectEqual(@as(?*Worker, null), shard.idle);
        }
    }
};
