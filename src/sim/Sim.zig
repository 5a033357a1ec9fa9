//! weft.Sim: runs a std.Io program deterministically, on one thread and on virtual time.
//!
//! ```
//! var sim = try weft.Sim.init(gpa, .{ .seed = 42 });
//! defer sim.deinit();
//! try sim.run(scenario, .{}); // scenario(io: std.Io) runs as the first task
//! ```
//!
//! Every task is a fiber on the thread that called `run`. Which ready task runs next is drawn
//! from a PRNG seeded with `Options.seed`, so a seed names one interleaving: the same seed
//! replays the same run, step for step, and other seeds explore other orders. Time is virtual:
//! it starts at `start_real_ns`, moves by `tick_ns` per scheduling step and per clock read (so
//! a loop that polls `now` ends), and jumps to the next timer whenever no task is ready, so an
//! hour of timeouts takes milliseconds. Each run hashes its events (every task chosen, every
//! timer fired, every network delivery, with the virtual time), and `checkSeeds` runs a
//! scenario under many seeds, twice each, to show that a failure replays and that nothing
//! outside the seed steers it.
//!
//! What is simulated: tasks (`async`, `concurrent`, groups, `await`, `cancel`, cancel
//! protection), futexes (so every std.Io and weft.sync primitive), clocks, sleeps, timeouts,
//! `random` (`randomSecure` too: it is seeded, not secure), and the network: TCP, UDP and
//! Unix sockets between simulated hosts, with latency, jitter, datagram loss and duplicates,
//! partitions (`partition`, `heal`) and lookups from `NetworkOptions.hosts` (Network.zig).
//! Files and directories are the real file system, called synchronously on the simulation's
//! thread through std.Io.Threaded: a test's fixtures and outputs are real files, and each call
//! completes at once, so their order is the schedule's. Child processes return an error from
//! their error sets (docs/SIM.md lists each group); none blocks or panics.
//!
//! A run ends when its first task returns. It fails with `error.Deadlock` when every task is
//! blocked and no timer is pending (`writeReport` names each blocked task and what it waits
//! for), and with `error.StepLimit` or `error.TimeLimit` past `Options.steps_max` or
//! `Options.virtual_ns_max`. A failed run leaves its tasks where they stopped: `deinit` frees
//! them, their stacks and their timers, but not what the tasks themselves allocated; run each
//! seed on an arena where that matters.
//!
//! One thread: a Sim's `Io` may be used only on the thread inside `run`; a call from another
//! thread, or outside `run`, panics with the rule, since it would make the run depend on the
//! OS scheduler.
const Sim = @This();

const std = @import("std");
const Io = std.Io;
const Allocator = std.mem.Allocator;
const State = @import("State.zig");
const Network = @import("Network.zig");
const stack_pool = @import("../fiber/stack.zig");

state: State,

pub const Options = State.Options;
pub const InitError = State.InitError;
pub const RunError = State.RunError;
pub const Failure = State.Failure;
pub const RunResult = State.RunResult;
pub const NetworkOptions = Network.Options;
pub const HostEntry = Network.HostEntry;
pub const Link = Network.Link;
pub const FileFaults = @import("files.zig").Options;
pub const Files = State.Files;
pub const Crash = State.Crash;
/// The simulated disk (`Options.files = .simulated`): see Disk.zig.
pub const Disk = @import("Disk.zig");
pub const DiskFaults = Disk.Faults;
pub const Durability = State.Durability;

pub fn init(gpa: Allocator, options: Options) InitError!Sim {
    return .{ .state = try .init(gpa, options) };
}

/// Frees every task, stack and timer, those a failed run stranded included.
pub fn deinit(sim: *Sim) void {
    sim.state.deinit();
}

/// The simulated `std.Io`; valid while the Sim lives and does not move, inside `run` only.
pub fn io(sim: *Sim) Io {
    return sim.state.io();
}

/// Runs `function(io, args...)` as the first task and every task it starts, until it returns
/// (see the top of the file for how a run fails). Tasks it left running resume in the next
/// run, or are freed by `deinit`. One run at a time, on the calling thread; not from a task.
pub fn run(sim: *Sim, comptime function: anytype, args: anytype) RunResult(function) {
    return sim.state.run(function, args);
}

/// A hash of every scheduling decision, timer and network delivery of the runs so far: equal
/// for two runs of the same scenario and seed.
pub fn traceHash(sim: *const Sim) u64 {
    return sim.state.traceHash();
}

/// Scheduling steps taken so far: each is a task run from one block to its next.
pub fn stepCount(sim: *const Sim) u64 {
    return sim.state.steps;
}

/// Virtual nanoseconds since the first run began.
pub fn elapsedNs(sim: *const Sim) u64 {
    return sim.state.elapsedNs();
}

/// Moves the running task, and the tasks it starts from now on, to the simulated host `ip`
/// (its port is ignored): the sockets they make belong to it, and `partition` cuts hosts
/// apart. Tasks start on 127.0.0.1. Call it from a task, with the run's `io`.
pub fn setHost(task_io: Io, ip: Io.net.IpAddress) void {
    const state = State.fromIo(task_io);
    state.currentTask().host = .of(ip);
}

/// Cuts the link between hosts `a` and `b` (ports ignored): stream bytes across it wait for
/// `heal` and datagrams are dropped; connects wait, up to their timeout. From a task.
pub fn partition(task_io: Io, a: Io.net.IpAddress, b: Io.net.IpAddress) error{OutOfMemory}!void {
    try State.fromIo(task_io).network.partition(.of(a), .of(b));
}

/// Gives the link between hosts `a` and `b` (ports ignored) its own latency, jitter, loss,
/// duplicates and resets, in place of `NetworkOptions.link`. From a task.
pub fn setLink(task_io: Io, a: Io.net.IpAddress, b: Io.net.IpAddress, link: Link) error{
    InvalidOptions,
    OutOfMemory,
}!void {
    if (!link.valid()) return error.InvalidOptions;
    try State.fromIo(task_io).network.setLink(.of(a), .of(b), link);
}

/// Crashes the run, as a power loss would: every task ends where it stands (no `defer` runs),
/// the simulated disk keeps only what was made durable (Disk.zig, "Durability"), every socket
/// closes, and `run` returns `error.Crashed`. The next `run` on this Sim starts on what
/// survived, as a restarted process would; virtual time goes on. From a task, with
/// `Options.files = .simulated` (with real files there is nothing to lose: it panics).
pub fn crash(task_io: Io) noreturn {
    const state = State.fromIo(task_io);
    if (state.disk == null) {
        @panic("weft.Sim.crash: this Sim's files are real (Options.files = .real); a crash " ++
            "tests what a simulated disk keeps");
    }
    state.crash();
}

/// The simulated disk, to seed before a run and inspect after one (null with real files).
/// Not during a run: its tasks own it then.
pub fn disk(sim: *Sim) ?*Disk {
    if (sim.state.current != null) @panic("weft.Sim.disk: called from inside a run");
    return if (sim.state.disk) |*d| d else null;
}

/// Operations on the simulated disk so far, over every run.
pub fn diskOperations(sim: *const Sim) u64 {
    return sim.state.disk_operations;
}

/// Mends every cut; what waited to cross goes on. From a task.
pub fn heal(task_io: Io) void {
    State.fromIo(task_io).network.heal();
}

/// Writes why the last run failed: its reason, step and virtual time, and for a deadlock each
/// blocked task, what it waits for and where it called the Io from. Nothing if it did not
/// fail.
pub fn writeReport(sim: *const Sim, writer: *Io.Writer) Io.Writer.Error!void {
    return sim.state.writeReport(writer);
}

pub const CheckOptions = struct {
    /// Seeds `seed_first` up to (not including) `seed_first + seeds`.
    seed_first: u64 = 0,
    seeds: u64 = 100,
    /// Every run's options; `seed` is set per run.
    sim: Options = .{ .seed = 0 },
    /// Where the first failing seed's report goes (`writeReport`), if anywhere.
    report: ?*Io.Writer = null,
};

/// What `checkSeeds` and `checkCrashes` found.
pub const Checked = struct {
    outcome: enum {
        /// Every seed ran twice without an error, with equal trace hashes.
        passed,
        /// `seed` failed with `err` (the scenario's error or a `RunError`).
        failed,
        /// `seed`'s two runs made different choices: something outside the seed (a real
        /// clock, an address, another thread) steered the scenario. `err` is null unless
        /// the two runs also ended differently.
        diverged,
    },
    seed: u64 = 0,
    err: ?anyerror = null,
    /// Seeds run, the last one included.
    seeds_run: u64,
    /// `checkCrashes`: the disk operation `seed`'s write phase crashed before (null: it made
    /// fewer and ended without a crash).
    crash_operation: ?u64 = null,
};

/// Runs `function(io, args...)` on a fresh State for every seed of `options`, twice each, and
/// stops at the first seed that fails or whose runs diverge (different trace hashes or
/// outcomes). With `WEFT_SEED=n` in the environment it runs seed n alone, to replay it.
pub fn checkSeeds(
    gpa: Allocator,
    options: CheckOptions,
    comptime function: anytype,
    args: anytype,
) InitError!Checked {
    try State.validate(options.sim);
    const first_seed, const seed_count = try seedRange(options.seed_first, options.seeds);
    // One pool of stacks for every run: a fresh Sim would map and guard a slab each time.
    var pool: stack_pool.Pool = .init(gpa, options.sim.stack_size_bytes, .page, null);
    defer pool.deinit();
    var seed = first_seed;
    // Bounded by `seed_count`.
    while (seed - first_seed < seed_count) : (seed += 1) {
        const first = try checkOnce(gpa, options, seed, &pool, function, args);
        const second = try checkOnce(gpa, options, seed, &pool, function, args);
        if (verdict(seed, seed - first_seed + 1, first, second)) |checked| return checked;
    }
    return .{ .outcome = .passed, .seeds_run = seed_count };
}

/// One run of a seed: its trace hash, how it ended, and where `checkCrashes` crashed it.
const SeedRun = struct { hash: u64, err: ?anyerror, crash_operation: ?u64 = null };

/// What a seed's two runs say: null if both passed alike; else `diverged` (the runs differ)
/// or `failed`.
fn verdict(seed: u64, seeds_run: u64, first: SeedRun, second: SeedRun) ?Checked {
    if (first.hash != second.hash or !sameError(first.err, second.err)) return .{
        .outcome = .diverged,
        .seed = seed,
        .err = first.err orelse second.err,
        .seeds_run = seeds_run,
        .crash_operation = first.crash_operation,
    };
    const err = first.err orelse return null;
    return .{
        .outcome = .failed,
        .seed = seed,
        .err = err,
        .seeds_run = seeds_run,
        .crash_operation = first.crash_operation,
    };
}

/// The first seed and how many to run: as asked, or the one `WEFT_SEED` names, alone.
fn seedRange(seed_first: u64, seeds: u64) error{InvalidEnvironment}!struct { u64, u64 } {
    if (try State.environmentSeed()) |only| return .{ only, 1 };
    return .{ seed_first, seeds };
}

fn sameError(a: ?anyerror, b: ?anyerror) bool {
    const a_err = a orelse return b == null;
    const b_err = b orelse return false;
    return a_err == b_err;
}

fn checkOnce(
    gpa: Allocator,
    options: CheckOptions,
    seed: u64,
    pool: *stack_pool.Pool,
    comptime function: anytype,
    args: anytype,
) InitError!SeedRun {
    var sim_options = options.sim;
    sim_options.seed = seed;
    var sim: Sim = .{ .state = try .initWithPool(gpa, sim_options, pool) };
    defer sim.deinit();
    const outcome: ?anyerror = if (sim.run(function, args)) |_| null else |err| err;
    if (outcome != null) if (options.report) |writer| {
        sim.writeReport(writer) catch {};
        writer.print("weft.Sim: seed {d} failed: {t}\n", .{ seed, outcome.? }) catch {};
        writer.flush() catch {};
    };
    return .{ .hash = sim.traceHash(), .err = outcome };
}

pub const CrashCheckOptions = struct {
    /// Seeds `seed_first` up to (not including) `seed_first + seeds`: one crash point each.
    seed_first: u64 = 0,
    seeds: u64 = 100,
    /// Every run's options; `seed` is set per run, `files` to `.simulated`, and `crash` to
    /// `.{ .seeded = operations_max }`.
    sim: Options = .{ .seed = 0 },
    /// Crash points are drawn from 1 up to this: about the operations the write phase makes
    /// (`diskOperations` after a run without a crash tells).
    operations_max: u64 = 100,
    /// Where the first failing seed's report goes, if anywhere: the recovery's failure, the
    /// crash point, and what the disk held after the crash.
    report: ?*Io.Writer = null,
};

/// Tests what a program finds after a crash at any moment. For each seed: on a fresh Sim with
/// simulated files, runs `write_phase(io, &context)` until a crash before a disk operation
/// drawn from the seed (or to its end, if it makes fewer), then `recover_phase(io, &context)`
/// on what survived, as a restarted process would. `context` is copied for each seed (so the
/// write phase can note what it was told is done, for the recovery to check). Each seed runs
/// twice; returns the first whose recovery fails, whose write phase fails other than by the
/// crash, or whose two runs diverge. With `WEFT_SEED=n` in the environment it runs seed n
/// alone, to replay it.
pub fn checkCrashes(
    gpa: Allocator,
    options: CrashCheckOptions,
    context: anytype,
    comptime write_phase: anytype,
    comptime recover_phase: anytype,
) InitError!Checked {
    var sim_options = options.sim;
    sim_options.files = .simulated;
    sim_options.crash = .{ .seeded = options.operations_max };
    try State.validate(sim_options);
    const first_seed, const seed_count = try seedRange(options.seed_first, options.seeds);
    var pool: stack_pool.Pool = .init(gpa, sim_options.stack_size_bytes, .page, null);
    defer pool.deinit();
    var seed = first_seed;
    // Bounded by `seed_count`.
    while (seed - first_seed < seed_count) : (seed += 1) {
        var runs: [2]SeedRun = undefined;
        for (&runs, 0..) |*crash_run, attempt| crash_run.* = try crashOnce(
            gpa,
            if (attempt == 0) options.report else null,
            sim_options,
            seed,
            &pool,
            context,
            write_phase,
            recover_phase,
        );
        if (verdict(seed, seed - first_seed + 1, runs[0], runs[1])) |checked| return checked;
    }
    return .{ .outcome = .passed, .seeds_run = seed_count };
}

fn crashOnce(
    gpa: Allocator,
    report: ?*Io.Writer,
    sim_options: Options,
    seed: u64,
    pool: *stack_pool.Pool,
    context: anytype,
    comptime write_phase: anytype,
    comptime recover_phase: anytype,
) InitError!SeedRun {
    var seeded = sim_options;
    seeded.seed = seed;
    var sim: Sim = .{ .state = try .initWithPool(gpa, seeded, pool) };
    defer sim.deinit();
    const crash_point = sim.state.crash_at;
    var run_context = context;
    var crashed = false;
    var outcome: ?anyerror = null;
    if (sim.run(write_phase, .{&run_context})) |_| {} else |err| {
        if (err == error.Crashed) crashed = true else outcome = err;
    }
    // The crash point is the write phase's: the recovery runs to its end.
    sim.state.crash_at = null;
    // What the write phase did last and what survived, for the report (before the recovery
    // changes them).
    var survived: Io.Writer.Allocating = .init(gpa);
    defer survived.deinit();
    if (report != null) {
        sim.state.writeRecentDiskOperations(&survived.writer) catch {};
        survived.writer.writeAll("weft.Sim: what survived:\n") catch {};
        sim.state.disk.?.writeDurable(&survived.writer) catch {};
    }
    if (outcome == null) {
        if (sim.run(recover_phase, .{&run_context})) |_| {} else |err| outcome = err;
    }
    const crash_operation = if (crashed) crash_point else null;
    if (outcome != null) if (report) |writer| {
        // A run that failed as a run (a deadlock, a limit) has a report of its own.
        if (sim.state.failure) |failure| if (failure.reason != error.Crashed) {
            sim.writeReport(writer) catch {};
        };
        if (crash_operation) |operation| {
            writer.print("weft.Sim: the write phase crashed before disk operation {d}; its " ++
                "last ones (the crash came before the last):\n", .{operation}) catch {};
        } else {
            writer.writeAll("weft.Sim: the write phase ended before its crash point; its " ++
                "last disk operations:\n") catch {};
        }
        writer.writeAll(survived.written()) catch {};
        writer.print("weft.Sim: seed {d} failed: {t} (WEFT_SEED={d} replays it)\n", .{
            seed, outcome.?, seed,
        }) catch {};
        writer.flush() catch {};
    };
    return .{ .hash = sim.traceHash(), .err = outcome, .crash_operation = crash_operation };
}
