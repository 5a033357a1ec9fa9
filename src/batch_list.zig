//! Moves between the lists of a `std.Io.Batch`, shared by weft's two VTables (`std_io/` and
//! `sim/`): each performs an operation its own way, then files the result here.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;

pub const Index = Io.Operation.OptionalIndex;

/// Moves the submission at `index` (after `prev` in `submitted`) to the end of `completed`.
pub fn complete(b: *Io.Batch, prev: Index, index: Index, result: Io.Operation.Result) void {
    const storage = &b.storage[index.toIndex()];
    const next = storage.submission.node.next;
    switch (prev) {
        .none => {
            assert(b.submitted.head == index);
            b.submitted.head = next;
        },
        else => b.storage[prev.toIndex()].submission.node.next = next,
    }
    if (next == .none) b.submitted.tail = prev;
    switch (b.completed.tail) {
        .none => b.completed.head = index,
        else => |tail| b.storage[tail.toIndex()].completion.node.next = index,
    }
    storage.* = .{ .completion = .{ .node = .{ .next = .none }, .result = result } };
    b.completed.tail = index;
}
