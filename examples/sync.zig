//! weft.sync in one small program: a pipeline of fibers.
//!
//! Producers send jobs into a bounded `Channel`; workers receive them and send each answer back
//! through a `Oneshot` that came with the job; a `WaitGroup` tracks the workers, a `Semaphore`
//! caps how many run the "expensive" part at once, a `Barrier` lines the workers up before
//! they start, and a `OnceCell` holds a table built by whichever worker needs it first.
//! `Notify` tells the main task that the first answer arrived. At the end each worker reports
//! how many jobs it handled on a `Channel`, and the main task uses `select` to take reports
//! until a future (a task waiting on the `WaitGroup`) says that every worker is done.
//!
//! Usage: ./zigw build examples && zig-out/bin/example-sync
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const sync = weft.sync;

const workers = 4;
const jobs_total = 1000;

const Job = struct {
    input: u64,
    reply: *sync.Oneshot(u64),
};

const Shared = struct {
    jobs: sync.Channel(Job),
    started: sync.Barrier = .init(workers),
    running: sync.WaitGroup = .init,
    expensive: sync.Semaphore = .init(2),
    squares: sync.OnceCell([16]u64) = .init,
    first_answer: sync.Notify = .init,
    reports: sync.Channel(u32),
};

fn buildSquares() [16]u64 {
    var table: [16]u64 = undefined;
    for (&table, 0..) |*entry, i| entry.* = i * i;
    return table;
}

fn worker(io: Io, shared: *Shared) Io.Cancelable!void {
    defer shared.running.done(io);
    _ = try shared.started.wait(io); // every worker is ready before any takes a job
    var handled: u32 = 0;
    while (shared.jobs.recv(io)) |job| : (handled += 1) {
        const squares = try shared.squares.getOrInit(io, buildSquares, .{});
        try shared.expensive.acquire(io);
        const answer = squares[job.input % 16] + job.input;
        shared.expensive.release(io);
        job.reply.send(io, answer);
        shared.first_answer.notifyOne(io);
    } else |err| switch (err) {
        error.Closed => {}, // no more jobs
        error.Canceled => return error.Canceled,
    }
    shared.reports.send(io, handled) catch |err| switch (err) {
        error.Closed => unreachable, // never closed
        error.Canceled => return error.Canceled,
    };
}

fn allWorkersDone(io: Io, running: *sync.WaitGroup) Io.Cancelable!void {
    try running.wait(io);
}

pub fn main() !void {
    var rt = try weft.Runtime.init(std.heap.smp_allocator, .{});
    defer rt.deinit();
    const io = rt.io();

    var buffer: [8]Job = undefined;
    var reports_buffer: [workers]u32 = undefined;
    var shared: Shared = .{ .jobs = .init(&buffer), .reports = .init(&reports_buffer) };
    var group: Io.Group = .init;
    defer group.cancel(io);
    shared.running.add(workers);
    for (0..workers) |_| try group.concurrent(io, worker, .{ io, &shared });

    var replies: [jobs_total]sync.Oneshot(u64) = @splat(.init);
    for (&replies, 0..) |*reply, i| try shared.jobs.send(io, .{ .input = i, .reply = reply });
    shared.jobs.close(io); // workers drain what is left, then see error.Closed
    try shared.first_answer.wait(io);

    var sum: u64 = 0;
    for (&replies) |*reply| sum += try reply.recv(io);

    // Take reports as they come until every worker is done: whichever happens first wins
    // each round, and the arm that loses takes nothing.
    var done = try io.concurrent(allWorkersDone, .{ io, &shared.running });
    var handled: u32 = 0;
    while (true) switch (try sync.select(io, .{
        .report = .{ .recv = &shared.reports },
        .done = .{ .future = &done },
    })) {
        .report => |report| handled += report catch unreachable, // never closed
        .done => |result| {
            try result;
            break;
        },
    };
    // The workers sent their reports before finishing: take those the select left behind.
    while (shared.reports.tryRecv(io)) |report| handled += report else |_| {}
    try group.await(io);
    std.debug.print("{d} jobs answered by {d} workers ({d} reported), sum {d}\n", .{
        jobs_total,
        workers,
        handled,
        sum,
    });
}
