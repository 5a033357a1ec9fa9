//! The hosts file (hosts(5)): one line per address, `address canonical_name [aliases...]`,
//! `#` to the end of the line a comment. Pure: the resolver reads the file line by line
//! (`lookup.zig`) and asks this whether a line names the host.
const std = @import("std");
const assert = std.debug.assert;

pub const Match = struct {
    /// The address as written (parsed by the caller, which knows the port and family).
    address_text: []const u8,
    /// The line's first name: the host's canonical name.
    canonical_name: []const u8,
};

/// Whether `line` lists `name` (ASCII case ignored, one trailing dot on `name` ignored).
pub fn matchLine(line: []const u8, name: []const u8) ?Match {
    const wanted = if (std.mem.endsWith(u8, name, ".")) name[0 .. name.len - 1] else name;
    if (wanted.len == 0) return null;
    const content = line[0 .. std.mem.indexOfScalar(u8, line, '#') orelse line.len];
    var tokens = std.mem.tokenizeAny(u8, content, " \t\r");
    const address_text = tokens.next() orelse return null;
    const canonical_name = tokens.peek() orelse return null;
    while (tokens.next()) |token| {
        if (std.ascii.eqlIgnoreCase(token, wanted)) {
            assert(canonical_name.len > 0);
            return .{ .address_text = address_text, .canonical_name = canonical_name };
        }
    }
    return null;
}

test "hosts: a line matches by canonical name or alias, case ignored" {
    const line = "10.1.2.3\tdb.internal  db DB2 # the database";
    const by_alias = matchLine(line, "db2").?;
    try std.testing.expectEqualStrings("10.1.2.3", by_alias.address_text);
    try std.testing.expectEqualStrings("db.internal", by_alias.canonical_name);
    try std.testing.expect(matchLine(line, "DB.internal.") != null);
    try std.testing.expect(matchLine(line, "database") == null); // only in the comment
    try std.testing.expect(matchLine(line, "10.1.2.3") == null); // the address is no name
}

test "hosts: comments, blank lines and lone addresses match nothing" {
    try std.testing.expect(matchLine("# 127.0.0.1 localhost", "localhost") == null);
    try std.testing.expect(matchLine("", "localhost") == null);
    try std.testing.expect(matchLine("   \t", "localhost") == null);
    try std.testing.expect(matchLine("127.0.0.1", "localhost") == null);
    try std.testing.expect(matchLine("127.0.0.1 localhost", "") == null);
    const crlf = matchLine("::1 localhost\r", "localhost").?;
    try std.testing.expectEqualStrings("::1", crlf.address_text);
}
