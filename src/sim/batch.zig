//! weft.Sim's `std.Io.Batch` entries. An operation is ready when it can complete without
//! waiting: a datagram receive on a simulated socket once a datagram has arrived (or the
//! socket is closed), any operation on a real descriptor at once (files are synchronous under
//! the Sim, like every entry it takes from std.Io.Threaded). An await performs the ready
//! operations; if none was, it waits on every simulated socket of the batch at once, until the
//! next arrival, a wake, its deadline or a cancel. Nothing is left pending, so `batchCancel`
//! has nothing to stop.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const Batch = Io.Batch;
const State = @import("State.zig");
const Network = @import("Network.zig");
const batch_list = @import("../batch_list.zig");

/// Simulated sockets one await waits on at once; more are looked at on the next await.
const sockets_max = 64;

pub fn batchAwaitAsync(userdata: ?*anyopaque, b: *Batch) Io.Cancelable!void {
    awaitReady(userdata, b, null) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Timeout => unreachable, // no deadline
        error.ConcurrencyUnavailable => unreachable, // never reported
    };
}

pub fn batchAwaitConcurrent(
    userdata: ?*anyopaque,
    b: *Batch,
    timeout: Io.Timeout,
) Batch.AwaitConcurrentError!void {
    const sim = State.fromUserdata(userdata);
    return awaitReady(userdata, b, sim.deadlineOf(timeout));
}

pub fn batchCancel(userdata: ?*anyopaque, b: *Batch) void {
    _ = State.fromUserdata(userdata);
    assert(b.pending.head == .none);
}

fn awaitReady(userdata: ?*anyopaque, b: *Batch, deadline_ns: ?u64) Batch.AwaitConcurrentError!void {
    const sim = State.fromUserdata(userdata);
    try sim.checkCancel();
    // Bounded by the deadline and by arrivals: each round performs what is ready or waits.
    while (b.submitted.head != .none) {
        var sockets_buffer: [sockets_max]*Network.Socket = undefined;
        var sockets: std.ArrayList(*Network.Socket) = .initBuffer(&sockets_buffer);
        var next_ns: ?u64 = deadline_ns;
        try performReady(userdata, b, &sockets, &next_ns);
        if (b.completed.head != .none or b.submitted.head == .none) return;
        if (deadline_ns) |deadline| if (deadline <= sim.now_ns) return error.Timeout;
        switch (sim.network.waitAny(sockets.items, next_ns)) {
            .woken, .timeout => {},
            .canceled => {
                try sim.checkCancel();
                return error.Canceled;
            },
        }
    }
}

/// Performs every ready submission; collects the simulated sockets of the others and the
/// earliest time one of them has something.
fn performReady(
    userdata: ?*anyopaque,
    b: *Batch,
    sockets: *std.ArrayList(*Network.Socket),
    next_ns: *?u64,
) Io.Cancelable!void {
    const sim = State.fromUserdata(userdata);
    var prev: batch_list.Index = .none;
    var index = b.submitted.head;
    while (index != .none) {
        const submission = &b.storage[index.toIndex()].submission;
        const next = submission.node.next;
        const socket: ?*Network.Socket = switch (submission.operation) {
            .net_receive => |receive| sim.network.find(receive.socket_handle),
            else => null,
        };
        const ready = if (socket) |s| sim.network.receiveReady(s) else true;
        if (ready) {
            // A simulated socket is received from directly: its handle may have been closed
            // by another task while this batch waited (the receive then reports it).
            const result: Io.Operation.Result = if (socket) |s| .{
                .net_receive = sim.network.receive(
                    s,
                    submission.operation.net_receive.message_buffer,
                    submission.operation.net_receive.data_buffer,
                    submission.operation.net_receive.flags.peek,
                ),
            } else try sim.vtableOperate(submission.operation);
            batch_list.complete(b, prev, index, result);
        } else {
            const s = socket.?;
            if (sockets.items.len < sockets.capacity) sockets.appendAssumeCapacity(s);
            if (sim.network.nextArrival(s)) |arrival| {
                next_ns.* = @min(next_ns.* orelse arrival, arrival);
            }
            prev = index;
        }
        index = next;
    }
}
