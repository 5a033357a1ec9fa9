//! pingpong: pairs of tasks passing a u64 back and forth over two capacity-1 channels. In each
//! pair the pinger puts `i` into `ping` and waits for `i + 1` on `pong`; the ponger takes from
//! `ping` and puts the value plus one into `pong`. Reports `ns_per_round` = wall / total
//! rounds, one round being one full round trip (two puts, two gets, and on a fiber runtime two
//! task switches). Every reply is checked, so a lost or reordered message fails the run
//! (`error=LostMessage`).
//!
//! Two kinds of channel (`channel=` in the result line):
//! - `std_queue`: `std.Io.Queue(u64)`, the portable program: std's own Queue, Mutex and
//!   Condition code over the runtime's futex.
//! - `weft_channel`: `weft.sync.Channel(u64)`, weft's native channel: the like-for-like row
//!   against the peers, which use their own runtime's channel (`tokio::sync::mpsc`, a Go
//!   `chan`). Runs on weft only.
//!
//! `pairs=1` is one pair, a latency chain; `pairs=100` is 100 independent pairs, which the
//! executors can run in parallel. As in the peers (bench/peers/README.md), `rounds` is the total
//! over all pairs: each pair does rounds / pairs.
//!
//! The tasks are started with `Group.concurrent`: they block on each other, so they must run
//! concurrently. weft runs 1 and 100 pairs, each with 1 and 2 executors (beside the peers'
//! 1- and 2-thread figures). Each measurement runs in a child process.
//!
//! Usage: bench-pingpong [--io threaded|weft|both] [--rounds N] [--pairs P]
//!        [--channel std|weft|both]
//! (defaults: weft; 1,000,000 rounds on weft, 100,000 on Threaded, where a round costs two
//! cross-thread futex wakes; 1 and 100 pairs unless `--pairs` names one count; both channels.)
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");
const harness = @import("harness");

const bench_name = "pingpong";
const weft_rounds_default = 1_000_000;
const threaded_rounds_default = 100_000;
const timeout_ns = 15 * std.time.ns_per_s;
const pair_counts_default = [_]u64{ 1, 100 };
/// Bounds the allocation of one measurement (two tasks and two queues per pair).
const pairs_max = 10_000;

/// The channel a measurement bounces its values over.
const ChannelKind = enum { std_queue, weft_channel };

fn ChannelOf(comptime kind: ChannelKind) type {
    return switch (kind) {
        .std_queue => Io.Queue(u64),
        .weft_channel => weft.sync.Channel(u64),
    };
}

const Result = struct {
    wall_ns: u64,
    ns_per_round: f64,
};

/// What a task reports back, since a group task's own return value is discarded.
const Tally = struct {
    rounds_ok: u64 = 0,
    lost: bool = false,
};

fn Bench(comptime kind: ChannelKind) type {
    return struct {
        const Channel = ChannelOf(kind);

        fn pinger(
            io: Io,
            ping: *Channel,
            pong: *Channel,
            rounds: u64,
            tally: *Tally,
        ) Io.Cancelable!void {
            for (0..rounds) |i| {
                try put(io, ping, i);
                const reply = try get(io, pong);
                if (reply != i + 1) {
                    tally.lost = true;
                    return;
                }
                tally.rounds_ok += 1;
            }
        }

        fn ponger(io: Io, ping: *Channel, pong: *Channel, rounds: u64) Io.Cancelable!void {
            for (0..rounds) |_| try put(io, pong, try get(io, ping) + 1);
        }

        fn put(io: Io, channel: *Channel, value: u64) Io.Cancelable!void {
            const result = switch (kind) {
                .std_queue => channel.putOne(io, value),
                .weft_channel => channel.send(io, value),
            };
            result catch |err| switch (err) {
                error.Closed => unreachable, // the channels are never closed
                error.Canceled => |e| return e,
            };
        }

        fn get(io: Io, channel: *Channel) Io.Cancelable!u64 {
            const result = switch (kind) {
                .std_queue => channel.getOne(io),
                .weft_channel => channel.recv(io),
            };
            return result catch |err| switch (err) {
                error.Closed => unreachable, // the channels are never closed
                error.Canceled => |e| return e,
            };
        }

        /// One pair's channels, their one-slot buffers and its tally; must not move once
        /// initialised.
        const Pair = struct {
            ping_buffer: [1]u64 = undefined,
            pong_buffer: [1]u64 = undefined,
            ping: Channel,
            pong: Channel,
            tally: Tally = .{},

            fn init(pair: *Pair) void {
                pair.* = .{ .ping = undefined, .pong = undefined };
                pair.ping = .init(&pair.ping_buffer);
                pair.pong = .init(&pair.pong_buffer);
            }
        };

        fn run(io: Io, rounds: u64, pair_count: u64) RunError!Result {
            if (pair_count == 0 or pair_count > pairs_max or rounds < pair_count) {
                return error.ConfigInvalid;
            }
            const rounds_per_pair = rounds / pair_count;
            const pairs = try std.heap.smp_allocator.alloc(Pair, pair_count);
            defer std.heap.smp_allocator.free(pairs);
            for (pairs) |*pair| pair.init();

            var group: Io.Group = .init;
            // Error path: a refused spawn leaves the tasks already started blocked on a
            // channel forever unless they are canceled.
            defer group.cancel(io);

            const start_ns = harness.monotonicNs();
            for (pairs) |*pair| {
                const each = rounds_per_pair;
                try group.concurrent(io, ponger, .{ io, &pair.ping, &pair.pong, each });
                try group.concurrent(io, pinger, .{
                    io, &pair.ping, &pair.pong, each, &pair.tally,
                });
            }
            try group.await(io);
            const wall_ns = harness.monotonicNs() - start_ns;

            for (pairs) |pair| {
                if (pair.tally.lost or pair.tally.rounds_ok != rounds_per_pair) {
                    return error.LostMessage;
                }
            }
            const rounds_total: f64 = @floatFromInt(rounds_per_pair * pair_count);
            return .{
                .wall_ns = wall_ns,
                .ns_per_round = @as(f64, @floatFromInt(wall_ns)) / rounds_total,
            };
        }
    };
}

const RunError = Io.Cancelable || Io.ConcurrentError || std.mem.Allocator.Error ||
    error{ LostMessage, ConfigInvalid };

fn measure(io: Io, config: harness.Config) !Result {
    const rounds = try config.int(u64, "rounds");
    const pairs = try config.int(u64, "pairs");
    return switch (try config.enumValue(ChannelKind, "channel")) {
        .std_queue => Bench(.std_queue).run(io, rounds, pairs),
        .weft_channel => Bench(.weft_channel).run(io, rounds, pairs),
    };
}

pub fn main(init: std.process.Init) !void {
    return harness.main(weft, init, measure, plan);
}

/// The channels named by `--channel std|weft|both` (default both).
fn channelKinds(args: []const []const u8) error{InvalidArgs}![]const ChannelKind {
    const text = harness.flagValue(args, "--channel") orelse return &.{ .std_queue, .weft_channel };
    if (std.mem.eql(u8, text, "both")) return &.{ .std_queue, .weft_channel };
    if (std.mem.eql(u8, text, "std")) return &.{.std_queue};
    if (std.mem.eql(u8, text, "weft")) return &.{.weft_channel};
    std.debug.print("--channel must be std, weft or both, not '{s}'\n", .{text});
    return error.InvalidArgs;
}

fn plan(session: *harness.Session, args: []const []const u8) !void {
    // `--pairs P` runs that count only; without it, both default counts.
    const pairs_flag: [1]u64 = .{try harness.flagInt(args, "--pairs", 0)};
    const pair_counts: []const u64 = if (pairs_flag[0] == 0) &pair_counts_default else &pairs_flag;
    const channels = try channelKinds(args);
    for (try harness.ioKinds(args, &.{.weft})) |kind| {
        const rounds_default: u64 = switch (kind) {
            .weft => weft_rounds_default,
            .threaded => threaded_rounds_default,
        };
        const rounds = try harness.flagInt(args, "--rounds", rounds_default);
        for (channels) |channel| {
            // weft's channel needs weft's runtime only for its speed, but the row compares
            // runtimes' own channels, and Threaded has none of its own.
            if (channel == .weft_channel and kind != .weft) continue;
            for (pair_counts) |pairs| {
                const words = [_][]const u8{
                    try session.word("channel", channel),
                    try session.word("pairs", pairs),
                    try session.word("rounds", rounds),
                };
                try session.reportEach(bench_name, &.{kind}, &.{ 1, 2 }, &words, timeout_ns);
            }
        }
    }
}
