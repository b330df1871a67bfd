// SPDX-License-Identifier: MIT
// The byte stream of the strategies that speak their server's protocol themselves over TCP
// (etcd; redis, whose hiredis 0.14 has no TLS and parses replies only): a connected socket,
// plain or TLS (OpenSSL), every operation bounded by a deadline.
//
//   tls_options   the options a strategy reads: ca_file, cert_file, key_file, server_name
//   read_tls_options  reads them from a strategy's JSON options, alike for every strategy
//   tls_context   the loaded certificates and verification settings, shared by the connections
//                 of one store
//   stream_error  a transport failure, for the strategy to name in its own backend_error
//   tls_stream    a non-blocking socket, with a TLS session on it when given a context
//
// Security defaults (not options): the server's certificate chain is verified against ca_file
// (or the system's store) AND its name against server_name or the endpoint's host (an IP address
// against the certificate's IP entries); TLS 1.2 at least; SNI for host names. A key file must
// be unencrypted (a passphrase is never asked for on the terminal). No message holds key
// material: OpenSSL's errors name files and reasons, never contents.
//
// Resumption: a context keeps the latest session ticket each server gave (by the name checked
// and the server's address) and offers it on the next connection to that server, so that the
// connections a strategy opens after its first (etcd: one per watch; any reconnection) skip the
// certificate exchange and its signatures. A ticket is only offered under the name its full
// handshake verified: a resumed session checks no certificate. A server that cannot use it
// (restarted, another member's keys) answers with a full handshake, verified as always.
//
// Fork: a child must not use its parent's sessions; destroying one never writes to the socket
// (no close_notify), so a child that drops the connections it inherited leaves the parent's
// sessions intact.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <locksmith/errors.hpp>

struct ssl_ctx_st;
struct ssl_st;
struct ssl_session_st;

namespace locksmith {
class options_reader;
}

namespace locksmith::strategies::tls {

using deadline = std::chrono::steady_clock::time_point;

struct tls_options {
    std::string ca_file;      // PEM CA certificates; empty: the system's store
    std::string cert_file;    // PEM client certificate (chain); needs key_file
    std::string key_file;     // its unencrypted PEM private key
    std::string server_name;  // the name checked and sent (SNI); empty: the endpoint's host
};

// Reads "ca_file", "cert_file", "key_file" and "server_name" from a strategy's options (the
// same names and meaning in every strategy). `secure` says whether the endpoint's scheme asks for
// TLS (https://, rediss://); `pointer` is the JSON pointer of the option that holds that scheme
// ("/endpoints", "/url"), and `needed` says what TLS options need ("https:// endpoints"). Throws
// config_error for TLS options given without TLS (they would be ignored, and everything sent in
// clear text) and for cert_file without key_file or the reverse.
tls_options read_tls_options(options_reader& reader, bool secure, const std::string& pointer,
                             std::string_view needed);

// A transport failure: `code` is short ("tls", "timeout", "eof", "errno 104"), the message a
// sentence without the endpoint (the caller adds it), `kind` whether a retry may help.
class stream_error : public std::runtime_error {
  public:
    stream_error(std::string code, const std::string& detail, error_kind kind)
        : std::runtime_error(detail), code_(std::move(code)), kind_(kind) {}
    const std::string& code() const noexcept { return code_; }
    error_kind kind() const noexcept { return kind_; }

  private:
    std::string code_;
    error_kind kind_;
};

class tls_context {
  public:
    // Loads the files now, so that a wrong path or a key that does not match the certificate
    // fails at configuration. `who` names the caller in errors ("etcd"). Throws
    // invalid_argument_error naming the option and the file.
    tls_context(const tls_options& options, std::string_view who);
    ~tls_context();
    tls_context(const tls_context&) = delete;
    tls_context& operator=(const tls_context&) = delete;
    const tls_options& options() const noexcept { return options_; }
    ssl_ctx_st* native() const noexcept { return ctx_; }

    // A copy of the session kept for `server` (the caller's to free), or null.
    ssl_session_st* session_for(const std::string& server) const;
    // Keeps `session` (takes the caller's reference) for `server`, in place of the one before.
    void keep_session(const std::string& server, ssl_session_st* session) const;

  private:
    tls_options options_;
    ssl_ctx_st* ctx_ = nullptr;
    mutable std::mutex sessions_mutex_;
    mutable std::map<std::string, ssl_session_st*> sessions_;
};

class tls_stream {
  public:
    // Takes over `fd`, a connected stream socket (made non-blocking here; closed by the
    // destructor). With a context, completes the TLS handshake with `host` before `until`:
    // a server that accepts and never answers costs no more than that. Throws stream_error:
    // "tls" (permanent) when the certificate or host name is refused or the server refuses the
    // handshake, "timeout" (transient) when `until` passed first.
    tls_stream(int fd, std::shared_ptr<const tls_context> context, const std::string& host,
               deadline until);
    ~tls_stream();
    tls_stream(const tls_stream&) = delete;
    tls_stream& operator=(const tls_stream&) = delete;

    // Reads what is there (at most `size` bytes), waiting until `until` for the first byte.
    // Returns the count (> 0), 0 at the end of the stream, nullopt when `until` passed first.
    // Throws stream_error (errno, or "tls" for a refusal that TLS 1.3 reports only now: a
    // missing or untrusted client certificate).
    std::optional<std::size_t> read_some(char* data, std::size_t size, deadline until);
    // Sends all of `data`; false when `until` passed first. Throws stream_error.
    bool write_all(std::string_view data, deadline until);
    // True when bytes were received and decrypted but not yet read (poll(2) does not see them).
    bool buffered() const noexcept;
    // For an idle connection: true when the server sent something (data, a hang-up, an error),
    // which means the connection must not be used again. TLS records that are no data (TLS 1.3
    // session tickets, sent after the handshake) are consumed and do not count.
    bool idle_has_input() noexcept;
    int fd() const noexcept { return fd_; }
    bool secure() const noexcept { return ssl_ != nullptr; }
    // True when the handshake resumed a kept session (no certificate exchanged).
    bool resumed() const noexcept;

  private:
    // Waits for what SSL_get_error asked for; false when `until` passed first.
    bool wait_for(int ssl_error, deadline until);
    [[noreturn]] void fail_tls(int ssl_error, std::string_view step);
    // After a write that failed at the socket: under TLS 1.3 a server that refuses our client
    // certificate sends its alert after the handshake, then closes with our request unread, and
    // its reset can fail our next write. The alert still waits in the receive buffer: when it is
    // there, throws the refusal (fail_tls), not the reset. Otherwise returns, errno kept.
    void fail_if_refused(std::string_view step);

    int fd_ = -1;
    ssl_st* ssl_ = nullptr;
    std::shared_ptr<const tls_context> context_;
    std::string checked_name_;
    std::string session_key_;  // checked_name_ and the server's address: the kept session's
};

// "OpenSSL 3.0.x": for benchmarks and `locksmith version`-style reports.
std::string openssl_version();

}  // namespace locksmith::strategies::tls
