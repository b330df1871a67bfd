// SPDX-License-Identifier: MIT
// Private to the memcached strategy: one blocking connection to one memcached server that speaks
// the meta text protocol (memcached >= 1.6.10), and the one place where its failures become
// backend_errors.
//
//   meta_status      the two-letter code of a meta reply
//   meta_reply       a parsed reply: its code, the data block of a VA reply, the c and t flags
//   meta_connection  connect (getaddrinfo, non-blocking connect bounded by the connect timeout,
//                    TCP_NODELAY, close-on-exec), check that the server speaks meta, then one
//                    ms / mg / md command at a time, each bounded by the command timeout
//
// libmemcached is not used: it cannot send meta commands, and without `md <key> C<cas>` a safe
// "delete if it is still mine" costs three round trips instead of one.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <locksmith/errors.hpp>

namespace locksmith::strategies::memcached_detail {

enum class meta_status {
    stored,      // HD: done (stored, deleted, or found without a value)
    value,       // VA: found, with a data block
    miss,        // EN: mg found nothing
    not_stored,  // NS: ms in add mode found the item
    exists,      // EX: the item's CAS differs from the one given
    not_found,   // NF: the item to compare against is gone
    noop,        // MN: the answer to mn
};

struct meta_reply {
    meta_status status = meta_status::stored;
    std::string value;                // the data block of a VA reply
    std::uint64_t cas = 0;            // the c flag; 0 when the reply carries none
    std::optional<std::int64_t> ttl;  // the t flag: seconds left, -1 for an item that never expires
};

class meta_connection {
  public:
    // Resolves `host` (name, IPv4 or IPv6 literal), connects to the first address that accepts
    // within `connect_timeout` (the bound covers all addresses together), then checks in one
    // round trip that the server speaks the meta protocol (`mn`), is memcached >= 1.6.10 and has
    // CAS ids enabled (`stats`, `stats settings`), and learns which server process it is.
    // Name resolution is the system resolver's and has its own timeouts.
    // Throws backend_error ("memcached: connecting at host:port failed: ...").
    meta_connection(std::string host, int port, std::chrono::milliseconds connect_timeout,
                    std::chrono::milliseconds command_timeout);
    // Takes over `fd`, a connected stream socket (a test's or the fuzz target's socketpair; the
    // destructor closes it, as it does on a throw), named `address` in messages, then checks the
    // server as above. The reply parsing is the same code, without a server to reach.
    meta_connection(int fd, std::string address, std::chrono::milliseconds command_timeout);
    ~meta_connection();
    meta_connection(const meta_connection&) = delete;
    meta_connection& operator=(const meta_connection&) = delete;

    // Keys must be printable ASCII without spaces, at most 250 bytes (the store makes sure).
    // `what` names the step in error messages ("adding the lock item").
    // Every command throws backend_error for error replies, replies it does not expect, a closed
    // connection and timeouts; the connection is broken() afterwards.

    // Each command also asks the server to name the reply (`k O<n>`): one that names another
    // key or another request is a protocol error, never taken for this command's answer.

    // `ms <key> <length> T<exptime> [ME] [C<compare_cas>] c` + data. add_only: mode E (add: NS
    // when the item exists); compare_cas != 0: store only over the item with that CAS (EX when
    // it differs, NF when there is none). Replies: stored (with the new CAS), not_stored,
    // exists, not_found.
    meta_reply set(std::string_view key, std::string_view data, long long exptime, bool add_only,
                   std::uint64_t compare_cas, std::string_view what);
    // `mg <key> <flags>` ("v c", "v", "t"...). Replies: value (flag v), stored, miss.
    meta_reply get(std::string_view key, std::string_view flags, std::string_view what);
    // `md <key> [C<compare_cas>]`. Replies: stored (deleted), exists, not_found.
    meta_reply remove(std::string_view key, std::uint64_t compare_cas, std::string_view what);

    // Which server process answers on this connection. A restarted memcached counts CAS ids from
    // 1 again, so a CAS id identifies an item only together with the process that issued it.
    // From the server's pid and start time; a server whose `stats` lack them gets a value unique
    // to this connection (safe: a cached CAS is then trusted on this connection only).
    std::uint64_t incarnation() const noexcept { return incarnation_; }
    // "host:port", with an IPv6 literal in brackets.
    const std::string& address() const noexcept { return address_; }
    // True after any failure: the connection must be thrown away.
    bool broken() const noexcept { return broken_; }
    // True when an idle connection has something to read (a hang-up, a restart) or is broken:
    // checked before reuse, so that a restarted server costs no failed command.
    bool stale() const noexcept;

  private:
    using deadline = std::chrono::steady_clock::time_point;

    void connect(std::chrono::milliseconds connect_timeout);
    void handshake();
    // Appends the flags that make the server name the reply (k: the key; O: this request's
    // number) to the command in out_; returns the number.
    std::uint64_t name_the_reply();
    // Sends out_ and reads the reply, which must name `key` and `opaque`.
    meta_reply call(std::string_view what, std::string_view key, std::uint64_t opaque,
                    std::initializer_list<meta_status> expected);
    meta_reply read_reply(deadline until, std::string_view what);
    void send_all(deadline until, std::string_view what);
    std::string_view read_line(deadline until, std::string_view what);
    void read_exact(std::size_t length, deadline until, std::string_view what, std::string& out);
    void fill(deadline until, std::string_view what);
    void wait_for(short events, deadline until, std::string_view what);
    void close_socket() noexcept;
    // Marks the connection broken and throws backend_error; `kind` defaults to what
    // `native_code` says.
    [[noreturn]] void fail(std::string_view what, const std::string& native_code,
                           const std::string& detail);
    [[noreturn]] void fail(std::string_view what, const std::string& native_code,
                           const std::string& detail, error_kind kind);
    [[noreturn]] void fail_errno(std::string_view what, int err);

    std::string host_;
    int port_;
    std::string address_;
    std::chrono::milliseconds command_timeout_;
    int fd_ = -1;
    bool broken_ = false;
    std::uint64_t incarnation_ = 0;
    std::uint64_t requests_ = 0;  // commands sent; each carries its number (O)
    std::string out_;             // the command being sent; kept to reuse its capacity
    std::vector<char> in_;        // received bytes; [head_, tail_) not yet parsed
    std::size_t head_ = 0;
    std::size_t tail_ = 0;
};

}  // namespace locksmith::strategies::memcached_detail
