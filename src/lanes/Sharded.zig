//! `Lane.Sharded`: N independent lanes ("shards"), each with its own lock, queue and workers,
//! so that many callers do not contend on one lock. A call goes to a preferred shard (for
//! `run`, the shard of the previous call while it has a free worker, else the next one
//! round-robin; `key % shards` for `runKeyed`); if that shard's queue is
//! full, it spills to the next shard with room, in order, and only when every shard is full
//! does the preferred shard's admission policy apply (`error.QueueFull`, or its FIFO line).
//! So no call is rejected while another shard has room. (Rejected alternative: a shared
//! overflow queue; it brings back the single lock that sharding removes.)
//!
//! Once accepted, a job may still move: a shard's worker with nothing queued takes the oldest
//! queued job of a sibling shard before it polls and parks (work stealing; see
//! `Lane.stealJob`), so no job waits in one shard's queue while another shard's worker is idle.
//! Shards that are shutting down neither give nor take jobs.
//!
//! A keyed call therefore runs on its key's shard only while that shard has room and its
//! workers keep up: keys give locality, not exclusion. Per call, the semantics are `Lane`'s:
//! acceptance, cancelation, deadline, error sets, shutdown.
//!
//! Given a name (`Options.name`), the shards are reported by `weft.Metrics` as one lane: their
//! gauges, counts and histograms summed.
//!
//! Thread-safety: as `Lane`. `shutdown` stops every shard with the same deadline.
const Sharded = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const Lane = @import("Lane.zig");
const named = @import("named.zig");

gpa: std.mem.Allocator,
shards: []*Lane,
/// The round-robin cursor of `run`.
next: atomic.Value(u32) = .init(0),
/// The shard that took the latest `run` (a hint, written without ordering).
last: atomic.Value(u32) = .init(0),
/// `Options.name`; empty when unnamed.
name: named.Name = .{},
/// Its place in the process's list of named lanes (`named.zig`); null when not listed.
listed: ?u32 = null,

pub const Options = struct {
    shards: u32 = 2,
    /// Options of every shard (`threads`, `queue_limit`, ... are per shard). Its `name` must
    /// be null: the shards are named as one, by `name`.
    lane: Lane.Options = .{},
    /// As `Lane.Options.name`, for the shards together.
    name: ?[]const u8 = null,
};

pub const InitError = Lane.InitError;

/// Allocates the shards and starts their workers (`shards * lane.threads` threads).
pub fn init(gpa: std.mem.Allocator, options: Options) InitError!*Sharded {
    if (options.shards == 0) return error.InvalidOptions;
    if (options.lane.name != null) return error.InvalidOptions;
    if (options.name) |text| if (text.len == 0) return error.InvalidOptions;
    const sharded = try gpa.create(Sharded);
    errdefer gpa.destroy(sharded);
    const shards = try gpa.alloc(*Lane, options.shards);
    errdefer gpa.free(shards);
    const name: named.Name = if (options.name) |text| .init(text) else .{};
    // The name first: one in use fails with nothing started.
    const place: ?u32 = if (options.name != null) try named.claim(&name) else null;
    errdefer if (place) |index| named.release(index);
    for (shards, 0..) |*shard, index| {
        // Named: each shard is metered, and listed only as part of the whole.
        const started = if (options.name != null)
            Lane.initOwned(gpa, options.lane, name.slice())
        else
            Lane.init(gpa, options.lane);
        shard.* = started catch |err| {
            for (shards[0..index]) |done| done.deinitUnused();
            return err;
        };
    }
    sharded.* = .{ .gpa = gpa, .shards = shards, .name = name, .listed = place };
    if (place) |index| named.publish(index, .{ .sharded = sharded });
    // From now on idle workers take queued jobs from their siblings (`Lane.stealJob`).
    if (shards.len > 1) for (shards, 0..) |shard, index| {
        shard.shard_index = @intCast(index);
        shard.siblings.store(&sharded.shards, .release);
    };
    return sharded;
}

/// Shuts down every shard not yet shut down (policy `.run`, no deadline), joins all workers
/// and frees everything. Every call must have returned.
pub fn deinit(sharded: *Sharded, io: Io) void {
    // First: once off the list no snapshot reads the shards, which are about to be freed.
    if (sharded.listed) |place| named.release(place);
    sharded.listed = null;
    // Every worker exits and is joined before any shard is freed: until it exits, a worker
    // may look at a sibling's queue.
    for (sharded.shards) |shard| {
        if (shard.phase == .open) _ = shard.shutdown(io, .{});
    }
    for (sharded.shards) |shard| shard.join();
    for (sharded.shards) |shard| shard.deinit(io);
    const gpa = sharded.gpa;
    gpa.free(sharded.shards);
    gpa.destroy(sharded);
}

/// `Lane.run` on the shard that took the previous call while it has a free worker, else on
/// the next shard round-robin (spilling as described above).
pub fn run(
    sharded: *Sharded,
    io: Io,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Lane.Result(function) {
    return sharded.runOn(io, sharded.pick(), .none, function, args);
}

/// Sticky while a worker is free: the shard that took the previous call has a worker free
/// (fewer jobs running or queued than workers), likely the one that just finished and still
/// polls, so a call there starts at once. Pure round-robin sent a lone caller's every other
/// call to a shard whose worker had parked, paying a thread wake-up each time (36 µs against
/// 0.2 µs per call in bench/lanes.sh). Once that shard is busy, calls spread round-robin over
/// the other shards, which is what sharding is for, and of the next two shards in that order
/// the one with less work (running plus queued jobs, a snapshot) takes the call, so that a
/// shard stuck on a long job is passed over. Shards share no queue: a burst of calls must be
/// dealt out evenly (an earlier rotation that skipped the busy shard by an offset gave two of
/// four shards twice the jobs of the others, and the burst took as long as the longest share).
fn pick(sharded: *Sharded) usize {
    const count = sharded.shards.len;
    const last = sharded.last.load(.monotonic);
    assert(last < count);
    if (count == 1 or sharded.shards[last].hasFreeWorker()) return last;
    const turn = sharded.next.fetchAdd(1, .monotonic);
    const first = skipping(last, turn % count, count);
    var preferred = first;
    if (count > 2) {
        const second = skipping(last, (first + 1) % count, count);
        if (sharded.shards[second].load() < sharded.shards[first].load()) preferred = second;
    }
    assert(preferred < count and preferred != last);
    sharded.last.store(@intCast(preferred), .monotonic);
    return preferred;
}

/// `candidate`, or the shard after it when it is `busy`.
fn skipping(busy: usize, candidate: usize, count: usize) usize {
    assert(count >= 2 and busy < count and candidate < count);
    return if (candidate == busy) (candidate + 1) % count else candidate;
}

/// `Lane.runTimeout` on the shard of `key` (spilling as described above).
pub fn runKeyed(
    sharded: *Sharded,
    io: Io,
    key: u64,
    timeout: Io.Timeout,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Lane.Result(function) {
    const preferred: usize = @intCast(key % sharded.shards.len);
    return sharded.runOn(io, preferred, timeout, function, args);
}

fn runOn(
    sharded: *Sharded,
    io: Io,
    preferred: usize,
    timeout: Io.Timeout,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) Lane.Result(function) {
    assert(preferred < sharded.shards.len);
    var call: Lane.Call(function) = .init(io, args);
    // Every shard of a named `Sharded` is metered, none of an unnamed one.
    call.job.stamp(sharded.shards[preferred].metered);
    const deadline = timeout.toTimestamp(io);
    io.checkCancel() catch |err| {
        sharded.shards[preferred].countRejected(err);
        return err;
    };
    const shard = try sharded.submit(&call.job, preferred);
    try shard.wait(io, &call.job, deadline);
    return call.result;
}

/// Accepts `job` on the first shard with room, from `preferred` on; if none has room, applies
/// the preferred shard's admission policy there. Returns the shard that holds the job.
fn submit(sharded: *Sharded, job: *Lane.Job, preferred: usize) Lane.Error!*Lane {
    const count = sharded.shards.len;
    for (0..count) |offset| {
        const shard = sharded.shards[(preferred + offset) % count];
        if (try shard.trySubmit(job)) return shard;
    }
    const shard = sharded.shards[preferred];
    try shard.submit(job, shard.options.admission);
    return shard;
}

/// `Lane.shutdown` of every shard, all with the same deadline; the reports summed.
pub fn shutdown(sharded: *Sharded, io: Io, options: Lane.ShutdownOptions) Lane.Report {
    const deadline = options.timeout.toTimestamp(io);
    const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
    var total: Lane.Report = .{
        .jobs_run = 0,
        .jobs_failed = 0,
        .waiters_failed = 0,
        .jobs_left = 0,
    };
    for (sharded.shards) |shard| {
        const report = shard.shutdown(io, .{ .policy = options.policy, .timeout = timeout });
        total.jobs_run += report.jobs_run;
        total.jobs_failed += report.jobs_failed;
        total.waiters_failed += report.waiters_failed;
        total.jobs_left += report.jobs_left;
    }
    return total;
}

/// What `weft.Metrics` reports of the shards, summed (each read under its own lock).
pub fn figures(sharded: *Sharded) Lane.Figures {
    var total: Lane.Figures = .{};
    for (sharded.shards) |shard| total.add(shard.figures());
    return total;
}

/// The shards' counters, summed.
pub fn stats(sharded: *Sharded) Lane.Stats {
    var total: Lane.Stats = .{};
    for (sharded.shards) |shard| {
        const s = shard.stats();
        inline for (@typeInfo(Lane.Stats).@"struct".fields) |field| {
            @field(total, field.name) += @field(s, field.name);
        }
    }
    return total;
}
