//! Intrusive containers: the element carries its own links, so pushing never allocates.
const std = @import("std");
const assert = std.debug.assert;

/// A FIFO queue linked through `T.next: ?*T`. Not thread-safe.
pub fn Queue(comptime T: type) type {
    return struct {
        const Self = @This();

        head: ?*T = null,
        tail: ?*T = null,
        count: usize = 0,

        pub fn isEmpty(queue: *const Self) bool {
            assert((queue.head == null) == (queue.count == 0));
            return queue.head == null;
        }

        pub fn push(queue: *Self, element: *T) void {
            assert(element.next == null);
            if (queue.tail) |tail| {
                tail.next = element;
            } else {
                queue.head = element;
            }
            queue.tail = element;
            queue.count += 1;
        }

        /// Puts `element` at the front: it is the next one popped.
        pub fn pushFront(queue: *Self, element: *T) void {
            assert(element.next == null);
            element.next = queue.head;
            queue.head = element;
            if (queue.tail == null) queue.tail = element;
            queue.count += 1;
        }

        pub fn pop(queue: *Self) ?*T {
            const head = queue.head orelse return null;
            queue.head = head.next;
            if (queue.head == null) queue.tail = null;
            head.next = null;
            assert(queue.count > 0);
            queue.count -= 1;
            return head;
        }

        /// Whether `element` is queued here. O(n).
        pub fn contains(queue: *const Self, element: *const T) bool {
            var cursor = queue.head;
            while (cursor) |node| : (cursor = node.next) {
                if (node == element) return true;
            }
            return false;
        }

        /// Unlinks `element` if it is queued here; returns whether it was. O(n): for queues
        /// that are short where this is used (an executor's injection queue).
        pub fn remove(queue: *Self, element: *T) bool {
            var previous: ?*T = null;
            var cursor = queue.head;
            while (cursor) |node| : ({
                previous = node;
                cursor = node.next;
            }) {
                if (node != element) continue;
                if (previous) |p| p.next = node.next else queue.head = node.next;
                if (queue.tail == node) queue.tail = previous;
                node.next = null;
                assert(queue.count > 0);
                queue.count -= 1;
                return true;
            }
            return false;
        }

        /// Moves every element of `other` to the back of `queue`, in order.
        pub fn pushAll(queue: *Self, other: *Self) void {
            const other_head = other.head orelse return;
            if (queue.tail) |tail| {
                tail.next = other_head;
            } else {
                queue.head = other_head;
            }
            queue.tail = other.tail;
            queue.count += other.count;
            other.* = .{};
        }
    };
}

test "Queue: remove unlinks the head, the middle or the tail, and nothing else" {
    const Node = struct { value: u32, next: ?*@This() = null };
    var nodes: [4]Node = undefined;
    for (&nodes, 0..) |*node, i| node.* = .{ .value = @intCast(i) };
    var queue: Queue(Node) = .{};
    for (nodes[0..3]) |*node| queue.push(node);
    try std.testing.expect(!queue.remove(&nodes[3]));
    try std.testing.expect(queue.contains(&nodes[1]) and !queue.contains(&nodes[3]));
    try std.testing.expect(queue.remove(&nodes[1]));
    try std.testing.expect(queue.remove(&nodes[2]));
    try std.testing.expectEqual(@as(usize, 1), queue.count);
    queue.push(&nodes[3]); // the tail was moved back
    try std.testing.expect(queue.remove(&nodes[0]));
    try std.testing.expectEqual(@as(u32, 3), queue.pop().?.value);
    try std.testing.expect(queue.isEmpty());
    try std.testing.expect(queue.tail == null);
}

test "Queue: FIFO order, pushAll keeps order" {
    const Node = struct { value: u32, next: ?*@This() = null };
    var nodes: [6]Node = undefined;
    for (&nodes, 0..) |*node, i| node.* = .{ .value = @intCast(i) };
    var a: Queue(Node) = .{};
    var b: Queue(Node) = .{};
    for (nodes[0..3]) |*node| a.push(node);
    for (nodes[3..]) |*node| b.push(node);
    a.pushAll(&b);
    try std.testing.expect(b.isEmpty());
    for (0..6) |i| try std.testing.expectEqual(@as(u32, @intCast(i)), a.pop().?.value);
    try std.testing.expect(a.pop() == null);
    try std.testing.expect(a.isEmpty());
}
