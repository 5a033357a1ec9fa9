//! sync: weft.sync and std's futex-based primitives, one result line per row, compared row by
//! row with Tokio's counterparts (bench/peers), which use exactly these definitions:
//!
//!   sync_mutex_uncontended     one task, 1M x (std.Io.Mutex lock + unlock)
//!   sync_rwlock_read           one task, 1M x (RwLock lockShared + unlockShared)
//!   sync_rwlock_write          one task, 1M x (RwLock lock + unlock)
//!   sync_semaphore_uncontended one task, 1M x (Semaphore acquire + release)
//!   sync_oncecell_get          1M x get of an initialised OnceCell
//!   sync_oncecell_set          1M x (fresh OnceCell, getOrInit)
//!   sync_notify                one task, 1M x (notifyOne, then wait consuming the permit)
//!   sync_barrier               4 tasks, Barrier of 4, 100k generations; ns per generation
//!   sync_channel_send          capacity 100k, fill 100k; ns per send
//!   sync_channel_recv          drain those 100k; ns per recv
//!   sync_channel_roundtrip     two tasks, two capacity-1 channels, 100k round trips; ns/round
//!   sync_oneshot               1M x (create, send, recv)
//!   sync_broadcast             1 sender + 4 receiver tasks, capacity 1024, 100k messages; ns
//!                              per message; the sender stays within the capacity of the
//!                              slowest receiver (each publishes its count; the sender yields
//!                              while 1024 ahead), so every receiver counts exactly 100k and
//!                              any lag is `status=lost`
//!   sync_watch                 one task, 1M x (Watch send i, borrow the current value)
//!   sync_mpmc                  4 producers + 4 consumers, capacity 1000, 100k per producer;
//!                              ns per message; counts sum to 400k and the value sum matches
//!   sync_mutex_contended       4 tasks x 250k (lock, increment, unlock); counter = 1M
//!   sync_rwlock_contended      4 readers + 2 writers x 100k ops each; ns per op
//!   sync_semaphore_contended   8 tasks, 2 permits, 100k acquire/release each; ns per op
//!                              (the three contended rows: every task first waits at a start
//!                              barrier of all of them, on both sides, so that they run at
//!                              once; without it weft, which runs a spawned task first, ran
//!                              each to completion before the next one started)
//!   sync_select                2 producers send 50k each into their own channel (capacity
//!                              1024); 1 consumer selects over both until both are closed; ns
//!                              per message; count 100k and the value sum checked
//!   sync_rwlock_read_std       sync_rwlock_read, sync_rwlock_write and sync_rwlock_contended
//!   sync_rwlock_write_std      with std's `Io.RwLock` instead of `weft.sync.RwLock`: both
//!   sync_rwlock_contended_std  stay measured (std's primitives are verified on weft too)
//!
//! The RwLock rows without `_std` use `weft.sync.RwLock`; the mutex rows use std's
//! `Io.Mutex` (weft has no Mutex of its own, see src/sync/root.zig).
//!
//! Every row runs with 1 and with 2 executors (`executors=`), as Tokio's peer runs on its
//! current_thread runtime and on the multi_thread one with 2 workers. Tasks are weft fibers
//! (`Group.concurrent`), which the executors steal from each other; rows with several tasks
//! report `threads_used=`, how many OS threads ran their tasks (sampled every 1024
//! operations), so a 2-executor line shows whether the contention really crossed threads.
//!
//! Each row runs in its own child process and prints `bench=<row> runtime=weft executors=<n>
//! status=ok ns_per_op=... alloc_bytes=... ops=... threads_used=... peak_rss_kib=...`.
//! `alloc_bytes` counts bytes allocated through the runtime's allocator in the timed region
//! (task records of the spawned tasks included; the primitives allocate nothing). Every row
//! checks what it received: a wrong count prints `status=lost`.
//!
//! Usage: bench-sync [--io weft|threaded|both] [--row NAME] [--executors N]
//! (default: weft, every row, 1 and 2 executors; bench/sync_compare.sh puts them next to
//! Tokio's).
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");
const sync = weft.sync;

const timeout_ns = 60 * std.time.ns_per_s;

const Row = enum {
    sync_mutex_uncontended,
    sync_rwlock_read,
    sync_rwlock_write,
    sync_semaphore_uncontended,
    sync_oncecell_get,
    sync_oncecell_set,
    sync_notify,
    sync_barrier,
    sync_channel_send,
    sync_channel_recv,
    sync_channel_roundtrip,
    sync_oneshot,
    sync_broadcast,
    sync_watch,
    sync_mpmc,
    sync_mutex_contended,
    sync_rwlock_contended,
    sync_semaphore_contended,
    sync_select,
    sync_rwlock_read_std,
    sync_rwlock_write_std,
    sync_rwlock_contended_std,
};

/// The executor counts every row runs with (Tokio's peer: current_thread, multi_thread 2).
const executor_counts = [_]usize{ 1, 2 };

/// Rows whose primitive weft does not have yet, with the reason printed.
fn skipReason(row: Row) ?[]const u8 {
    return switch (row) {
        else => null, // every row is built now
    };
}

const Result = struct {
    ns_per_op: f64,
    alloc_bytes: u64,
    ops: u64,
    /// OS threads seen running the row's tasks (1 for the single-task rows).
    threads_used: u64 = 1,
};

/// Which OS threads ran a row's tasks: each task notes its thread every `spread_every`
/// operations, outside the lock or channel it measures. The thread id comes from a syscall, not
/// a thread-local (whose address the compiler may hoist out of a loop, while a fiber can
/// resume on another thread after any park).
const Spread = struct {
    threads: [threads_max]std.atomic.Value(i32) = @splat(.init(0)),

    const threads_max = 8;
    const spread_every = 1024;

    fn note(spread: *Spread, i: usize) void {
        if (i % spread_every != 0) return;
        const tid: i32 = @intCast(std.os.linux.gettid());
        for (&spread.threads) |*slot| {
            const seen = slot.cmpxchgStrong(0, tid, .monotonic, .monotonic) orelse return;
            if (seen == tid) return;
        }
    }

    fn count(spread: *const Spread) u64 {
        var used: u64 = 0;
        for (&spread.threads) |*slot| used += @intFromBool(slot.load(.monotonic) != 0);
        return used;
    }
};

const RunError = error{LostMessages} || Io.Cancelable || Io.ConcurrentError ||
    std.mem.Allocator.Error || sync.Channel(u64).SendError;

/// Counts the bytes allocated through it (alloc, and the growth of resize/remap).
const CountingAllocator = struct {
    child: std.mem.Allocator,
    bytes: std.atomic.Value(u64) = .init(0),

    fn allocator(self: *CountingAllocator) std.mem.Allocator {
        return .{ .ptr = self, .vtable = &.{
            .alloc = alloc,
            .resize = resize,
            .remap = remap,
            .free = free,
        } };
    }

    fn alloc(ctx: *anyopaque, len: usize, alignment: std.mem.Alignment, ra: usize) ?[*]u8 {
        const self: *CountingAllocator = @ptrCast(@alignCast(ctx));
        _ = self.bytes.fetchAdd(len, .monotonic);
        return self.child.rawAlloc(len, alignment, ra);
    }

    fn resize(
        ctx: *anyopaque,
        memory: []u8,
        alignment: std.mem.Alignment,
        len: usize,
        ra: usize,
    ) bool {
        const self: *CountingAllocator = @ptrCast(@alignCast(ctx));
        if (len > memory.len) _ = self.bytes.fetchAdd(len - memory.len, .monotonic);
        return self.child.rawResize(memory, alignment, len, ra);
    }

    fn remap(
        ctx: *anyopaque,
        memory: []u8,
        alignment: std.mem.Alignment,
        len: usize,
        ra: usize,
    ) ?[*]u8 {
        const self: *CountingAllocator = @ptrCast(@alignCast(ctx));
        if (len > memory.len) _ = self.bytes.fetchAdd(len - memory.len, .monotonic);
        return self.child.rawRemap(memory, alignment, len, ra);
    }

    fn free(ctx: *anyopaque, memory: []u8, alignment: std.mem.Alignment, ra: usize) void {
        const self: *CountingAllocator = @ptrCast(@alignCast(ctx));
        self.child.rawFree(memory, alignment, ra);
    }
};

/// The timed region of a row: start, then `finish(ops)`.
const Timer = struct {
    counter: *CountingAllocator,
    start_ns: u64,
    start_bytes: u64,

    fn start(counter: *CountingAllocator) Timer {
        return .{
            .counter = counter,
            .start_bytes = counter.bytes.load(.monotonic),
            .start_ns = harness.monotonicNs(),
        };
    }

    fn finish(timer: Timer, ops: u64) Result {
        const wall_ns = harness.monotonicNs() - timer.start_ns;
        return .{
            .ns_per_op = @as(f64, @floatFromInt(wall_ns)) / @as(f64, @floatFromInt(ops)),
            .alloc_bytes = timer.counter.bytes.load(.monotonic) - timer.start_bytes,
            .ops = ops,
        };
    }
};

fn run(io: Io, gpa: std.mem.Allocator, counter: *CountingAllocator, row: Row) RunError!Result {
    return switch (row) {
        .sync_mutex_uncontended => mutexUncontended(io, counter),
        .sync_rwlock_read => rwlockSingle(sync.RwLock, io, counter, .read),
        .sync_rwlock_write => rwlockSingle(sync.RwLock, io, counter, .write),
        .sync_rwlock_read_std => rwlockSingle(Io.RwLock, io, counter, .read),
        .sync_rwlock_write_std => rwlockSingle(Io.RwLock, io, counter, .write),
        .sync_semaphore_uncontended => semaphoreUncontended(io, counter),
        .sync_oncecell_get => oncecellGet(io, counter),
        .sync_oncecell_set => oncecellSet(io, counter),
        .sync_notify => notifyRow(io, counter),
        .sync_barrier => barrierRow(io, counter),
        .sync_channel_send => channelFill(io, gpa, counter, .send),
        .sync_channel_recv => channelFill(io, gpa, counter, .recv),
        .sync_channel_roundtrip => roundtrip(io, counter),
        .sync_oneshot => oneshotRow(io, counter),
        .sync_broadcast => broadcastRow(io, counter),
        .sync_watch => watchRow(io, counter),
        .sync_mpmc => mpmc(io, counter),
        .sync_mutex_contended => mutexContended(io, counter),
        .sync_rwlock_contended => rwlockContended(sync.RwLock, io, counter),
        .sync_rwlock_contended_std => rwlockContended(Io.RwLock, io, counter),
        .sync_semaphore_contended => semaphoreContended(io, counter),
        .sync_select => selectRow(io, counter),
    };
}

const million = 1_000_000;

fn mutexUncontended(io: Io, counter: *CountingAllocator) RunError!Result {
    var mutex: Io.Mutex = .init;
    var value: u64 = 0;
    const timer: Timer = .start(counter);
    for (0..million) |_| {
        try mutex.lock(io);
        value += 1;
        mutex.unlock(io);
    }
    const result = timer.finish(million);
    if (value != million) return error.LostMessages;
    return result;
}

/// `Lock` is `weft.sync.RwLock` or `std.Io.RwLock` (the same method names).
fn rwlockSingle(
    comptime Lock: type,
    io: Io,
    counter: *CountingAllocator,
    mode: enum { read, write },
) RunError!Result {
    var lock: Lock = .init;
    var value: u64 = 0;
    const timer: Timer = .start(counter);
    for (0..million) |_| switch (mode) {
        .read => {
            try lock.lockShared(io);
            value += 1;
            lock.unlockShared(io);
        },
        .write => {
            try lock.lock(io);
            value += 1;
            lock.unlock(io);
        },
    };
    const result = timer.finish(million);
    if (value != million) return error.LostMessages;
    return result;
}

fn semaphoreUncontended(io: Io, counter: *CountingAllocator) RunError!Result {
    var semaphore: sync.Semaphore = .init(1);
    var value: u64 = 0;
    const timer: Timer = .start(counter);
    for (0..million) |_| {
        try semaphore.acquire(io);
        value += 1;
        semaphore.release(io);
    }
    const result = timer.finish(million);
    if (value != million or semaphore.available() != 1) return error.LostMessages;
    return result;
}

fn identity(x: u64) u64 {
    return x;
}

fn oncecellGet(io: Io, counter: *CountingAllocator) RunError!Result {
    var cell: sync.OnceCell(u64) = .init;
    _ = try cell.getOrInit(io, identity, .{3});
    var sum: u64 = 0;
    const timer: Timer = .start(counter);
    for (0..million) |_| {
        const cell_pointer = &cell;
        std.mem.doNotOptimizeAway(cell_pointer);
        sum += cell_pointer.get().?.*;
    }
    const result = timer.finish(million);
    if (sum != 3 * million) return error.LostMessages;
    return result;
}

fn oncecellSet(io: Io, counter: *CountingAllocator) RunError!Result {
    var sum: u64 = 0;
    const timer: Timer = .start(counter);
    for (0..million) |i| {
        var cell: sync.OnceCell(u64) = .init;
        std.mem.doNotOptimizeAway(&cell);
        sum += (try cell.getOrInit(io, identity, .{i})).*;
    }
    const result = timer.finish(million);
    if (sum != million * (million - 1) / 2) return error.LostMessages;
    return result;
}

fn notifyRow(io: Io, counter: *CountingAllocator) RunError!Result {
    var notify: sync.Notify = .init;
    var woken: u64 = 0;
    const timer: Timer = .start(counter);
    for (0..million) |_| {
        notify.notifyOne(io);
        try notify.wait(io);
        woken += 1;
    }
    const result = timer.finish(million);
    if (woken != million or notify.tryWait()) return error.LostMessages;
    return result;
}

const barrier_generations = 100_000;

fn barrierParty(
    io: Io,
    barrier: *sync.Barrier,
    leaders: *std.atomic.Value(u64),
    spread: *Spread,
) Io.Cancelable!void {
    for (0..barrier_generations) |i| {
        spread.note(i);
        if (try barrier.wait(io)) _ = leaders.fetchAdd(1, .monotonic);
    }
}

fn barrierRow(io: Io, counter: *CountingAllocator) RunError!Result {
    var barrier: sync.Barrier = .init(4);
    var leaders: std.atomic.Value(u64) = .init(0);
    var spread: Spread = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    const timer: Timer = .start(counter);
    for (0..4) |_| try group.concurrent(io, barrierParty, .{ io, &barrier, &leaders, &spread });
    try group.await(io);
    var result = timer.finish(barrier_generations);
    result.threads_used = spread.count();
    if (leaders.load(.monotonic) != barrier_generations) return error.LostMessages;
    return result;
}

const fill_count = 100_000;

fn channelFill(
    io: Io,
    gpa: std.mem.Allocator,
    counter: *CountingAllocator,
    mode: enum { send, recv },
) RunError!Result {
    const buffer = try gpa.alloc(u64, fill_count);
    defer gpa.free(buffer);
    var channel: sync.Channel(u64) = .init(buffer);
    var timer: Timer = .start(counter);
    for (0..fill_count) |i| try channel.send(io, i);
    if (mode == .send) {
        const result = timer.finish(fill_count);
        if (channel.count() != fill_count) return error.LostMessages;
        return result;
    }
    var sum: u64 = 0;
    timer = .start(counter);
    for (0..fill_count) |_| sum += channel.recv(io) catch return error.LostMessages;
    const result = timer.finish(fill_count);
    if (sum != fill_count * (fill_count - 1) / 2 or channel.count() != 0) return error.LostMessages;
    return result;
}

const rounds = 100_000;

fn pinger(
    io: Io,
    ping: *sync.Channel(u64),
    pong: *sync.Channel(u64),
    ok: *u64,
    spread: *Spread,
) Io.Cancelable!void {
    for (0..rounds) |i| {
        spread.note(i);
        send(io, ping, i) catch return;
        const reply = pong.recv(io) catch return;
        if (reply == i + 1) ok.* += 1;
    }
}

fn ponger(
    io: Io,
    ping: *sync.Channel(u64),
    pong: *sync.Channel(u64),
    spread: *Spread,
) Io.Cancelable!void {
    for (0..rounds) |i| {
        spread.note(i);
        const value = ping.recv(io) catch return;
        send(io, pong, value + 1) catch return;
    }
}

fn send(io: Io, channel: *sync.Channel(u64), value: u64) Io.Cancelable!void {
    channel.send(io, value) catch |err| switch (err) {
        error.Closed => unreachable, // never closed
        error.Canceled => return error.Canceled,
    };
}

fn roundtrip(io: Io, counter: *CountingAllocator) RunError!Result {
    var ping_buffer: [1]u64 = undefined;
    var pong_buffer: [1]u64 = undefined;
    var ping: sync.Channel(u64) = .init(&ping_buffer);
    var pong: sync.Channel(u64) = .init(&pong_buffer);
    var ok: u64 = 0;
    var spread: Spread = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    const timer: Timer = .start(counter);
    try group.concurrent(io, ponger, .{ io, &ping, &pong, &spread });
    try group.concurrent(io, pinger, .{ io, &ping, &pong, &ok, &spread });
    try group.await(io);
    var result = timer.finish(rounds);
    result.threads_used = spread.count();
    if (ok != rounds) return error.LostMessages;
    return result;
}

fn oneshotRow(io: Io, counter: *CountingAllocator) RunError!Result {
    var sum: u64 = 0;
    const timer: Timer = .start(counter);
    for (0..million) |i| {
        var oneshot: sync.Oneshot(u64) = .init;
        std.mem.doNotOptimizeAway(&oneshot);
        oneshot.send(io, i);
        sum += oneshot.recv(io) catch return error.LostMessages;
    }
    const result = timer.finish(million);
    if (sum != million * (million - 1) / 2) return error.LostMessages;
    return result;
}

const broadcast_messages = 100_000;
const broadcast_capacity = 1024;
const broadcast_receivers = 4;

fn broadcastReceiver(
    io: Io,
    subscription: sync.Broadcast(u64).Receiver,
    progress: *std.atomic.Value(u64),
    tally: *Tally,
    spread: *Spread,
) Io.Cancelable!void {
    var receiver = subscription;
    var count: u64 = 0;
    var sum: u64 = 0;
    while (receiver.recv(io)) |received| switch (received) {
        .value => |value| {
            spread.note(count);
            count += 1;
            sum += value;
            progress.store(count, .monotonic);
        },
        .lagged => {}, // the missed values are missing from `count`: status=lost
    } else |err| switch (err) {
        error.Closed => {},
        error.Canceled => return error.Canceled,
    }
    _ = tally.count.fetchAdd(count, .monotonic);
    _ = tally.sum.fetchAdd(sum, .monotonic);
}

fn slowestReceiver(progress: []std.atomic.Value(u64)) u64 {
    var slowest: u64 = std.math.maxInt(u64);
    for (progress) |*p| slowest = @min(slowest, p.load(.monotonic));
    return slowest;
}

/// As Tokio's row: never more than the capacity ahead of the slowest receiver, yielding to
/// the other tasks while it is (`weft.Runtime.yield`, Tokio's `yield_now`). std.Io has no
/// yield; `checkCancel`, which weft turns into a yield only every 64th call, left the sender
/// polling the receivers' counters 63 times out of 64 while they bounced between cores.
fn broadcastSender(
    io: Io,
    broadcast: *sync.Broadcast(u64),
    progress: []std.atomic.Value(u64),
) Io.Cancelable!void {
    var floor: u64 = 0;
    for (0..broadcast_messages) |i| {
        if (i - floor >= broadcast_capacity) {
            floor = slowestReceiver(progress);
            while (i - floor >= broadcast_capacity) {
                try weft.Runtime.yield(io);
                floor = slowestReceiver(progress);
            }
        }
        broadcast.send(io, i) catch unreachable; // closed after the last send
    }
    broadcast.close(io);
}

fn broadcastRow(io: Io, counter: *CountingAllocator) RunError!Result {
    var ring: [broadcast_capacity]u64 = undefined;
    var broadcast: sync.Broadcast(u64) = .init(&ring);
    var progress: [broadcast_receivers]std.atomic.Value(u64) = @splat(.init(0));
    var tally: Tally = .{};
    var spread: Spread = .{};
    var receivers: Io.Group = .init;
    defer receivers.cancel(io);
    var sender: Io.Group = .init;
    defer sender.cancel(io);
    const timer: Timer = .start(counter);
    for (&progress) |*p| try receivers.concurrent(io, broadcastReceiver, .{
        io,
        broadcast.subscribe(),
        p,
        &tally,
        &spread,
    });
    try sender.concurrent(io, broadcastSender, .{ io, &broadcast, &progress });
    try sender.await(io);
    try receivers.await(io);
    var result = timer.finish(broadcast_messages);
    result.threads_used = spread.count();
    const total = broadcast_receivers * broadcast_messages;
    if (tally.count.load(.monotonic) != total) return error.LostMessages;
    const sum_below = broadcast_messages * (broadcast_messages - 1) / 2;
    if (tally.sum.load(.monotonic) != broadcast_receivers * sum_below) return error.LostMessages;
    return result;
}

fn watchRow(io: Io, counter: *CountingAllocator) RunError!Result {
    var watch: sync.Watch(u64) = .init(0);
    var receiver = watch.subscribe();
    var sum: u64 = 0;
    const timer: Timer = .start(counter);
    for (0..million) |i| {
        const watch_pointer = &watch;
        std.mem.doNotOptimizeAway(watch_pointer);
        watch_pointer.send(io, i) catch return error.LostMessages; // never closed
        const receiver_pointer = &receiver;
        std.mem.doNotOptimizeAway(receiver_pointer);
        sum += receiver_pointer.borrow();
    }
    const result = timer.finish(million);
    if (sum != million * (million - 1) / 2) return error.LostMessages;
    return result;
}

const mpmc_per_producer = 100_000;

const Tally = struct {
    count: std.atomic.Value(u64) = .init(0),
    sum: std.atomic.Value(u64) = .init(0),
};

fn mpmcProducer(io: Io, channel: *sync.Channel(u64), id: u64, spread: *Spread) Io.Cancelable!void {
    for (0..mpmc_per_producer) |i| {
        spread.note(i);
        try send(io, channel, id * mpmc_per_producer + i);
    }
}

fn mpmcConsumer(
    io: Io,
    channel: *sync.Channel(u64),
    tally: *Tally,
    spread: *Spread,
) Io.Cancelable!void {
    var count: u64 = 0;
    var sum: u64 = 0;
    while (channel.recv(io)) |value| {
        spread.note(count);
        count += 1;
        sum += value;
    } else |err| switch (err) {
        error.Closed => {},
        error.Canceled => return error.Canceled,
    }
    _ = tally.count.fetchAdd(count, .monotonic);
    _ = tally.sum.fetchAdd(sum, .monotonic);
}

fn mpmc(io: Io, counter: *CountingAllocator) RunError!Result {
    var buffer: [1000]u64 = undefined;
    var channel: sync.Channel(u64) = .init(&buffer);
    var tally: Tally = .{};
    var spread: Spread = .{};
    var consumers: Io.Group = .init;
    defer consumers.cancel(io);
    var producers: Io.Group = .init;
    defer producers.cancel(io);
    const timer: Timer = .start(counter);
    for (0..4) |_| try consumers.concurrent(io, mpmcConsumer, .{ io, &channel, &tally, &spread });
    for (0..4) |id| {
        try producers.concurrent(io, mpmcProducer, .{ io, &channel, @as(u64, id), &spread });
    }
    try producers.await(io);
    channel.close(io);
    try consumers.await(io);
    const total = 4 * mpmc_per_producer;
    var result = timer.finish(total);
    result.threads_used = spread.count();
    if (tally.count.load(.monotonic) != total) return error.LostMessages;
    if (tally.sum.load(.monotonic) != total * (total - 1) / 2) return error.LostMessages;
    return result;
}

fn mutexWorker(
    io: Io,
    mutex: *Io.Mutex,
    value: *u64,
    gate: *sync.Barrier,
    spread: *Spread,
) Io.Cancelable!void {
    _ = try gate.wait(io);
    for (0..250_000) |i| {
        spread.note(i);
        try mutex.lock(io);
        value.* += 1;
        mutex.unlock(io);
    }
}

fn mutexContended(io: Io, counter: *CountingAllocator) RunError!Result {
    var mutex: Io.Mutex = .init;
    var value: u64 = 0;
    var spread: Spread = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    const timer: Timer = .start(counter);
    var gate: sync.Barrier = .init(4);
    for (0..4) |_| {
        try group.concurrent(io, mutexWorker, .{ io, &mutex, &value, &gate, &spread });
    }
    try group.await(io);
    var result = timer.finish(million);
    result.threads_used = spread.count();
    if (value != million) return error.LostMessages;
    return result;
}

/// The contended row's task, for `Lock` = `weft.sync.RwLock` or `std.Io.RwLock`.
fn RwWorker(comptime Lock: type) type {
    return struct {
        fn run(
            io: Io,
            lock: *Lock,
            value: *u64,
            reads: *std.atomic.Value(u64),
            writer: bool,
            gate: *sync.Barrier,
            spread: *Spread,
        ) Io.Cancelable!void {
            _ = try gate.wait(io);
            for (0..100_000) |i| {
                spread.note(i);
                if (writer) {
                    try lock.lock(io);
                    value.* += 1;
                    lock.unlock(io);
                } else {
                    try lock.lockShared(io);
                    std.mem.doNotOptimizeAway(value.*);
                    lock.unlockShared(io);
                    _ = reads.fetchAdd(1, .monotonic);
                }
            }
        }
    };
}

fn rwlockContended(comptime Lock: type, io: Io, counter: *CountingAllocator) RunError!Result {
    var lock: Lock = .init;
    var value: u64 = 0;
    var reads: std.atomic.Value(u64) = .init(0);
    var spread: Spread = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    const timer: Timer = .start(counter);
    var gate: sync.Barrier = .init(6);
    for (0..6) |i| try group.concurrent(io, RwWorker(Lock).run, .{
        io, &lock, &value, &reads, i < 2, &gate, &spread,
    });
    try group.await(io);
    var result = timer.finish(6 * 100_000);
    result.threads_used = spread.count();
    if (value != 2 * 100_000 or reads.load(.monotonic) != 4 * 100_000) return error.LostMessages;
    return result;
}

fn semaphoreWorker(
    io: Io,
    semaphore: *sync.Semaphore,
    done: *std.atomic.Value(u64),
    gate: *sync.Barrier,
    spread: *Spread,
) Io.Cancelable!void {
    _ = try gate.wait(io);
    for (0..100_000) |i| {
        spread.note(i);
        try semaphore.acquire(io);
        _ = done.fetchAdd(1, .monotonic);
        semaphore.release(io);
    }
}

fn semaphoreContended(io: Io, counter: *CountingAllocator) RunError!Result {
    var semaphore: sync.Semaphore = .init(2);
    var done: std.atomic.Value(u64) = .init(0);
    var spread: Spread = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    const timer: Timer = .start(counter);
    var gate: sync.Barrier = .init(8);
    for (0..8) |_| {
        try group.concurrent(io, semaphoreWorker, .{ io, &semaphore, &done, &gate, &spread });
    }
    try group.await(io);
    var result = timer.finish(8 * 100_000);
    result.threads_used = spread.count();
    if (done.load(.monotonic) != 8 * 100_000) return error.LostMessages;
    if (semaphore.available() != 2) return error.LostMessages;
    return result;
}

const select_per_producer = 50_000;
const select_capacity = 1024;

fn selectProducer(io: Io, channel: *sync.Channel(u64), id: u64, spread: *Spread) Io.Cancelable!void {
    for (0..select_per_producer) |i| {
        spread.note(i);
        try send(io, channel, id * select_per_producer + i);
    }
    channel.close(io);
}

/// Selects over both channels, dropping an arm once its channel is closed and drained.
fn selectConsumer(
    io: Io,
    a: *sync.Channel(u64),
    b: *sync.Channel(u64),
    tally: *Tally,
    spread: *Spread,
) Io.Cancelable!void {
    var arm_a: ?*sync.Channel(u64) = a;
    var arm_b: ?*sync.Channel(u64) = b;
    var count: u64 = 0;
    var sum: u64 = 0;
    while (arm_a != null or arm_b != null) {
        spread.note(count);
        const value = switch (try sync.select(io, .{
            .a = .{ .recv = arm_a },
            .b = .{ .recv = arm_b },
        })) {
            .a => |received| received catch {
                arm_a = null;
                continue;
            },
            .b => |received| received catch {
                arm_b = null;
                continue;
            },
        };
        count += 1;
        sum += value;
    }
    _ = tally.count.fetchAdd(count, .monotonic);
    _ = tally.sum.fetchAdd(sum, .monotonic);
}

fn selectRow(io: Io, counter: *CountingAllocator) RunError!Result {
    var buffer_a: [select_capacity]u64 = undefined;
    var buffer_b: [select_capacity]u64 = undefined;
    var a: sync.Channel(u64) = .init(&buffer_a);
    var b: sync.Channel(u64) = .init(&buffer_b);
    var tally: Tally = .{};
    var spread: Spread = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    const timer: Timer = .start(counter);
    try group.concurrent(io, selectConsumer, .{ io, &a, &b, &tally, &spread });
    try group.concurrent(io, selectProducer, .{ io, &a, @as(u64, 0), &spread });
    try group.concurrent(io, selectProducer, .{ io, &b, @as(u64, 1), &spread });
    try group.await(io);
    const total = 2 * select_per_producer;
    var result = timer.finish(total);
    result.threads_used = spread.count();
    if (tally.count.load(.monotonic) != total) return error.LostMessages;
    if (tally.sum.load(.monotonic) != total * (total - 1) / 2) return error.LostMessages;
    return result;
}

/// Child: builds the Io named by `runtime=` over a counting allocator and runs `row=`.
fn childMain(init: std.process.Init, args: []const []const u8) !void {
    const config: harness.Config = .{ .words = args[2..] };
    var buffer: [512]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    const out = &stdout.interface;
    var counter: CountingAllocator = .{ .child = init.gpa };
    const row = try config.enumValue(Row, "row");
    var backend = harness.Backend(weft).init(counter.allocator(), config) catch |err|
        return fail(out, err);
    const result = run(backend.io(), init.gpa, &counter, row) catch |err| return fail(out, err);
    try harness.writeFields(out, result);
    try out.writeByte('\n');
    try out.flush();
    backend.deinit();
}

fn fail(out: *std.Io.Writer, err: anyerror) noreturn {
    out.print("error={t}\n", .{err}) catch {};
    out.flush() catch {};
    std.process.exit(1);
}

/// Parent: one child per row, one line per row (`bench=<row> runtime=<io> status=...`).
/// `executors` is null for std.Io.Threaded (it has no such setting).
fn report(session: *harness.Session, row: Row, kind: harness.IoKind, executors: ?usize) !void {
    const name = @tagName(row);
    const runtime = try session.word("runtime", kind);
    const executors_word = if (executors) |n| try session.word("executors", n) else "";
    const config: []const []const u8 = if (executors != null)
        &.{ runtime, executors_word }
    else
        &.{runtime};
    if (skipReason(row)) |reason| return session.skip(name, config, reason);
    const row_word = try session.word("row", name);
    const outcome = if (executors != null)
        try session.measure(&.{ runtime, executors_word, row_word }, timeout_ns)
    else
        try session.measure(&.{ runtime, row_word }, timeout_ns);
    const out = session.out;
    try out.print("bench={s}", .{name});
    for (config) |word| try out.print(" {s}", .{word});
    switch (outcome.end) {
        .exited => |code| if (code == 0) {
            try out.print(" status=ok {s}", .{std.mem.trim(u8, outcome.stdout, " \n")});
        } else if (outcome.field("error")) |err| {
            if (std.mem.eql(u8, err, "LostMessages")) {
                try out.print(" status=lost", .{});
            } else {
                try out.print(" status=failed exit={d} error={s}", .{ code, err });
            }
        } else try out.print(" status=failed exit={d}", .{code}),
        .signaled => |signal| try out.print(" status=crashed signal={t}", .{signal}),
        .timed_out => try out.print(" status=timeout", .{}),
    }
    try out.print(" peak_rss_kib={d}\n", .{outcome.rss_kib});
    try out.flush();
}

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try harness.argsAlloc(arena, init.minimal.args);
    if (harness.isChild(args)) return childMain(init, args);

    var buffer: [1024]u8 = undefined;
    var stdout = std.Io.File.stdout().writerStreaming(init.io, &buffer);
    var session: harness.Session = .{
        .arena = arena,
        .environ = init.minimal.environ,
        .out = &stdout.interface,
    };
    const only: ?Row = if (harness.flagValue(args, "--row")) |name|
        std.meta.stringToEnum(Row, name) orelse return error.InvalidArgs
    else
        null;
    const executors_only: ?usize = if (harness.flagValue(args, "--executors")) |text|
        std.fmt.parseInt(usize, text, 10) catch return error.InvalidArgs
    else
        null;
    for (try harness.ioKinds(args, &.{.weft})) |kind| {
        for (executor_counts) |executors| {
            if (executors_only != null and executors_only.? != executors) continue;
            for (std.enums.values(Row)) |row| {
                if (only != null and only.? != row) continue;
                try report(&session, row, kind, if (kind == .weft) executors else null);
            }
            if (kind == .threaded) break; // one pass: Threaded has no executor count
        }
    }
}
