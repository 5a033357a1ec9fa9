//! weft.Sim finding a retry bug: an HTTP bank and a client that retries, under a network
//! partition that heals, across 1,000 seeds.
//!
//! The bank (`weft.Server` with a `weft.Server.http` handler) keeps a balance and answers
//! `POST /deposit` by adding 10. The client makes five deposits; each attempt gives up after
//! 100 ms and tries again on a new connection. A chaos task cuts the link between the two
//! hosts at a seeded moment and heals it a seeded while later. A deposit whose answer is cut
//! off has still been made: the client's retry makes it twice, unless the bank drops repeats
//! of an `idempotency-key` it has seen. That check is the fix, off by default: the run prints
//! the seeds whose final balance is wrong, and any one of them replays the same run exactly
//! (`--seed N`).
//!
//!   example-sim                 1,000 seeds with the bug: prints the failing seeds
//!   example-sim --fixed         the same seeds with the bank deduplicating: none fail
//!   example-sim --seed 17       one seed, with what happened to each deposit
//!   example-sim --seeds 5000    more seeds
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const weft = @import("weft");

const bank_ip: net.IpAddress = .{ .ip4 = .{ .bytes = .{ 10, 0, 0, 1 }, .port = 80 } };
const client_ip: net.IpAddress = .{ .ip4 = .{ .bytes = .{ 10, 0, 0, 2 }, .port = 0 } };
const hosts: []const weft.Sim.HostEntry = &.{.{ .name = "bank.sim", .address = bank_ip }};

const deposits = 5;
const deposit_amount = 10;
const attempt_timeout: Io.Duration = .fromMilliseconds(100);
const attempts_max = 100;

const Bank = struct {
    balance: u64 = 0,
    /// Idempotency keys already applied (one per deposit of the client).
    seen: [deposits]bool = @splat(false),
    deduplicate: bool,

    fn respond(
        context: ?*anyopaque,
        _: *weft.Server.Connection,
        request: *weft.Server.http.Request,
    ) weft.Server.http.RespondError!void {
        const bank: *Bank = @ptrCast(@alignCast(context.?));
        if (request.head.method != .POST or !std.mem.eql(u8, request.head.target, "/deposit")) {
            return request.respond("no such account\n", .{ .status = .not_found });
        }
        const key = idempotencyKey(request) orelse
            return request.respond("missing idempotency-key\n", .{ .status = .bad_request });
        if (!bank.deduplicate or !bank.seen[key]) bank.balance += deposit_amount;
        bank.seen[key] = true;
        try request.respond("deposited\n", .{});
    }

    fn idempotencyKey(request: *weft.Server.http.Request) ?usize {
        var headers = request.iterateHeaders();
        while (headers.next()) |header| {
            if (!std.ascii.eqlIgnoreCase(header.name, "idempotency-key")) continue;
            const key = std.fmt.parseInt(usize, header.value, 10) catch return null;
            return if (key < deposits) key else null;
        }
        return null;
    }
};

const Outcome = struct {
    balance: u64,
    attempts: [deposits]u32,
};

/// One run: the bank, the client's deposits, the chaos task. Returns the final balance.
fn scenario(io: Io, deduplicate: bool, outcome: *Outcome) !void {
    weft.Sim.setHost(io, bank_ip);
    var bank: Bank = .{ .deduplicate = deduplicate };
    const handler: weft.Server.http.Handler = .{ .context = &bank, .respondFn = &Bank.respond };
    const server_handler = weft.Server.http.handler(&handler);
    var listener = try bank_ip.listen(io, .{});
    defer listener.deinit(io);
    const gpa = std.heap.smp_allocator;
    var serving = try io.concurrent(weft.Server.serve, .{
        gpa, io, listener, server_handler, weft.Server.Options{ .address = bank_ip },
    });
    defer _ = serving.cancel(io) catch {};

    weft.Sim.setHost(io, client_ip);
    var chaos = try io.concurrent(partitionThenHeal, .{io});
    defer chaos.cancel(io) catch {};
    for (0..deposits) |key| outcome.attempts[key] = try deposit(io, key);
    try chaos.await(io);

    const listening: net.Stream = .{ .socket = listener.socket };
    try listening.shutdown(io, .both);
    _ = try serving.await(io);
    outcome.balance = bank.balance;
}

/// Cuts the link at a seeded moment in the first 300 ms, for a seeded 50 to 500 ms.
fn partitionThenHeal(io: Io) !void {
    var prng = randomFrom(io);
    const random = prng.random();
    try io.sleep(.fromMilliseconds(random.uintLessThan(u32, 300)), .awake);
    try weft.Sim.partition(io, bank_ip, client_ip);
    try io.sleep(.fromMilliseconds(50 + random.uintLessThan(u32, 450)), .awake);
    weft.Sim.heal(io);
}

fn randomFrom(io: Io) std.Random.DefaultPrng {
    var seed: u64 = undefined;
    io.random(std.mem.asBytes(&seed));
    return .init(seed);
}

/// Deposits once under idempotency key `key`, retrying each attempt that takes longer than
/// `attempt_timeout`. Returns the attempts it took.
fn deposit(io: Io, key: usize) !u32 {
    const Attempt = union(enum) {
        answered: anyerror!std.http.Status,
        timed_out: Io.Cancelable!void,
    };
    var attempts: u32 = 1;
    // Bounded by attempts_max.
    while (attempts <= attempts_max) : (attempts += 1) {
        var buffer: [2]Attempt = undefined;
        var select: Io.Select(Attempt) = .init(io, &buffer);
        try select.concurrent(.answered, post, .{ io, key });
        try select.concurrent(.timed_out, Io.sleep, .{ io, attempt_timeout, .awake });
        const first = try select.await();
        select.cancelDiscard();
        switch (first) {
            .answered => |status| if (status) |code| {
                if (code == .ok) return attempts;
            } else |_| {},
            .timed_out => {},
        }
    }
    return error.NeverAnswered;
}

fn post(io: Io, key: usize) anyerror!std.http.Status {
    var client: std.http.Client = .{ .allocator = std.heap.smp_allocator, .io = io };
    defer client.deinit();
    var key_text: [20]u8 = undefined;
    const result = try client.fetch(.{
        .location = .{ .url = "http://bank.sim/deposit" },
        .method = .POST,
        .payload = "10",
        .extra_headers = &.{.{
            .name = "idempotency-key",
            .value = std.fmt.bufPrint(&key_text, "{d}", .{key}) catch unreachable,
        }},
    });
    return result.status;
}

fn runSeed(seed: u64, deduplicate: bool) !Outcome {
    var sim = try weft.Sim.init(std.heap.smp_allocator, .{
        .seed = seed,
        .network = .{
            .hosts = hosts,
            .link = .{ .latency_ns = 2 * std.time.ns_per_ms, .jitter_ns = std.time.ns_per_ms },
        },
    });
    defer sim.deinit();
    var outcome: Outcome = undefined;
    try sim.run(scenario, .{ deduplicate, &outcome });
    return outcome;
}

pub fn main(init: std.process.Init) !void {
    const args = try init.minimal.args.toSlice(init.arena.allocator());
    var seeds: u64 = 1000;
    var only_seed: ?u64 = null;
    var deduplicate = false;
    var index: usize = 1;
    while (index < args.len) : (index += 1) {
        const arg = args[index];
        if (std.mem.eql(u8, arg, "--fixed")) {
            deduplicate = true;
        } else if (std.mem.eql(u8, arg, "--seeds") and index + 1 < args.len) {
            index += 1;
            seeds = std.fmt.parseInt(u64, args[index], 10) catch return usage();
        } else if (std.mem.eql(u8, arg, "--seed") and index + 1 < args.len) {
            index += 1;
            only_seed = std.fmt.parseInt(u64, args[index], 10) catch return usage();
        } else return usage();
    }

    var buffer: [4096]u8 = undefined;
    var stdout = Io.File.stdout().writerStreaming(init.io, &buffer);
    const out = &stdout.interface;
    const expected: u64 = deposits * deposit_amount;
    if (only_seed) |seed| {
        const outcome = try runSeed(seed, deduplicate);
        try out.print("seed {d}: balance {d} (expected {d}); attempts per deposit:", .{
            seed, outcome.balance, expected,
        });
        for (outcome.attempts) |attempts| try out.print(" {d}", .{attempts});
        try out.writeAll("\n");
        return out.flush();
    }
    const start = Io.Clock.awake.now(init.io);
    var failing: u64 = 0;
    for (0..seeds) |seed| {
        const outcome = try runSeed(seed, deduplicate);
        if (outcome.balance == expected) continue;
        failing += 1;
        try out.print("seed {d}: balance {d}, expected {d}\n", .{
            seed, outcome.balance, expected,
        });
    }
    const elapsed = start.durationTo(Io.Clock.awake.now(init.io));
    try out.print("{d} of {d} seeds ended with a wrong balance ({s}), in {d} ms\n", .{
        failing,
        seeds,
        if (deduplicate) "the bank deduplicates" else "the retry bug is in",
        @divTrunc(elapsed.nanoseconds, std.time.ns_per_ms),
    });
    try out.flush();
}

fn usage() error{InvalidArguments} {
    std.debug.print("usage: example-sim [--fixed] [--seeds N | --seed N]\n", .{});
    return error.InvalidArguments;
}
