// SPDX-License-Identifier: MIT
#include "tls_stream.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace locksmith::strategies::tls {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// A socket BIO of our own: OpenSSL's writes with write(2), which raises SIGPIPE on a connection
// the server reset, and a library must never kill its program. send(MSG_NOSIGNAL) instead.
int bio_write(BIO* bio, const char* data, int size) {
    BIO_clear_retry_flags(bio);
    const int fd = int(reinterpret_cast<std::intptr_t>(BIO_get_data(bio)));
    const ssize_t n = ::send(fd, data, std::size_t(size), MSG_NOSIGNAL);
    if (n >= 0) return int(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(bio);
    return -1;
}

int bio_read(BIO* bio, char* data, int size) {
    BIO_clear_retry_flags(bio);
    const int fd = int(reinterpret_cast<std::intptr_t>(BIO_get_data(bio)));
    const ssize_t n = ::recv(fd, data, std::size_t(size), 0);
    if (n >= 0) return int(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_read(bio);
    return -1;
}

long bio_ctrl(BIO*, int command, long, void*) {
    return command == BIO_CTRL_FLUSH ? 1 : 0;  // nothing is buffered here
}

int bio_create(BIO* bio) {
    BIO_set_init(bio, 1);
    return 1;
}

BIO_METHOD* socket_method() {
    static BIO_METHOD* method = [] {
        BIO_METHOD* m =
            BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "locksmith socket");
        if (m == nullptr) return m;
        BIO_meth_set_write(m, bio_write);
        BIO_meth_set_read(m, bio_read);
        BIO_meth_set_ctrl(m, bio_ctrl);
        BIO_meth_set_create(m, bio_create);
        return m;
    }();
    return method;
}

// The reasons OpenSSL queued in this thread, oldest first ("certificate verify failed"); the
// queue is emptied.
std::string openssl_errors() {
    std::string out;
    while (const unsigned long e = ERR_get_error()) {
        const char* reason = ERR_reason_error_string(e);
        if (!out.empty()) out += "; ";
        out += reason != nullptr ? reason : "error " + std::to_string(ERR_GET_REASON(e));
    }
    return out;
}

bool is_ip_address(const std::string& name) {
    unsigned char buffer[16];
    return ::inet_pton(AF_INET, name.c_str(), buffer) == 1 ||
           ::inet_pton(AF_INET6, name.c_str(), buffer) == 1;
}

int passphrase_refused(char*, int, int, void*) {
    return 0;  // never a prompt on the terminal: an encrypted key fails to load instead
}

// OpenSSL's new-session callback (a full handshake's ticket, or under TLS 1.3 each ticket the
// server sends after it): kept in the stream's context for the next connection to that server.
int keep_new_session(SSL* ssl, SSL_SESSION* session) {
    const auto* key = static_cast<const std::string*>(SSL_get_app_data(ssl));
    const auto* context =
        static_cast<const tls_context*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
    if (key == nullptr || context == nullptr || key->empty()) return 0;
    // A copy: OpenSSL marks the connection's own session not resumable when the connection is
    // freed without close_notify, which ours never send (fork: see the header).
    if (SSL_SESSION* copy = SSL_SESSION_dup(session)) context->keep_session(*key, copy);
    return 0;  // the connection keeps its own reference
}

// "address:port" of the socket's peer; empty when unknown.
std::string peer_of(int fd) {
    sockaddr_storage a{};
    socklen_t size = sizeof a;
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &size) != 0 ||
        ::getnameinfo(reinterpret_cast<sockaddr*>(&a), size, host, sizeof host, port, sizeof port,
                      NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return {};
    return std::string(host) + ":" + port;
}

}  // namespace

tls_context::tls_context(const tls_options& options, std::string_view who) : options_(options) {
    const std::string prefix = std::string(who) + ": TLS: ";
    if (options_.cert_file.empty() != options_.key_file.empty())
        throw invalid_argument_error(prefix +
                                     "cert_file and key_file go together (a client certificate "
                                     "and its private key)");
    ERR_clear_error();
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (ctx_ == nullptr)
        throw invalid_argument_error(prefix + "cannot set up OpenSSL: " + openssl_errors());
    try {
        SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
        SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
        // A connection ended without close_notify is an end like another: the protocols above
        // frame their messages (and etcd's Go server does not always send one).
        SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
        SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE);
        SSL_CTX_set_default_passwd_cb(ctx_, passphrase_refused);
        // Client-side session cache of our own (session_for, keep_session): OpenSSL's internal
        // store is for servers.
        SSL_CTX_set_app_data(ctx_, this);
        SSL_CTX_set_session_cache_mode(ctx_,
                                       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(ctx_, keep_new_session);
        if (!options_.ca_file.empty()) {
            if (SSL_CTX_load_verify_locations(ctx_, options_.ca_file.c_str(), nullptr) != 1)
                throw invalid_argument_error(prefix + "cannot load ca_file '" + options_.ca_file +
                                             "': " + openssl_errors() +
                                             " (a readable file of PEM certificates?)");
        } else if (SSL_CTX_set_default_verify_paths(ctx_) != 1) {
            throw invalid_argument_error(prefix + "cannot load the system's CA certificates: " +
                                         openssl_errors() + " (give ca_file)");
        }
        if (!options_.cert_file.empty()) {
            if (SSL_CTX_use_certificate_chain_file(ctx_, options_.cert_file.c_str()) != 1)
                throw invalid_argument_error(prefix + "cannot load cert_file '" +
                                             options_.cert_file + "': " + openssl_errors() +
                                             " (a readable PEM certificate?)");
            const bool key_loaded =
                SSL_CTX_use_PrivateKey_file(ctx_, options_.key_file.c_str(), SSL_FILETYPE_PEM) == 1;
            const bool mismatch =
                !key_loaded && ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
            if (!key_loaded && !mismatch)
                throw invalid_argument_error(prefix + "cannot load key_file '" + options_.key_file +
                                             "': " + openssl_errors() +
                                             " (a readable, unencrypted PEM private key?)");
            if (mismatch || SSL_CTX_check_private_key(ctx_) != 1)
                throw invalid_argument_error(prefix + "key_file '" + options_.key_file +
                                             "' is not the key of cert_file '" +
                                             options_.cert_file + "'");
        }
    } catch (...) {
        ERR_clear_error();
        SSL_CTX_free(ctx_);
        throw;
    }
}

tls_context::~tls_context() {
    for (auto& [server, session] : sessions_) SSL_SESSION_free(session);
    SSL_CTX_free(ctx_);
}

SSL_SESSION* tls_context::session_for(const std::string& server) const {
    std::lock_guard guard(sessions_mutex_);
    const auto it = sessions_.find(server);
    if (it == sessions_.end()) return nullptr;
    // A copy of its own for each connection, not a reference to the kept one: OpenSSL changes a
    // connection's session (a TLS 1.3 ticket replaces it), and connections on other threads
    // would share that object, ordered only by OpenSSL's reference count, which
    // ThreadSanitizer cannot see (libcrypto is not instrumented) and reported as races.
    return SSL_SESSION_dup(it->second);
}

void tls_context::keep_session(const std::string& server, SSL_SESSION* session) const {
    std::lock_guard guard(sessions_mutex_);
    auto& kept = sessions_[server];
    if (kept != nullptr) SSL_SESSION_free(kept);
    kept = session;
}

bool tls_stream::resumed() const noexcept {
    return ssl_ != nullptr && SSL_session_reused(ssl_) == 1;
}

tls_stream::tls_stream(int fd, std::shared_ptr<const tls_context> context, const std::string& host,
                       deadline until)
    : fd_(fd), context_(std::move(context)) {
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags >= 0 && !(flags & O_NONBLOCK)) ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
    if (!context_) return;
    try {
        ERR_clear_error();
        ssl_ = SSL_new(context_->native());
        BIO* bio = socket_method() != nullptr ? BIO_new(socket_method()) : nullptr;
        if (ssl_ == nullptr || bio == nullptr) {
            BIO_free(bio);
            throw stream_error("tls", "cannot set up OpenSSL: " + openssl_errors(),
                               error_kind::transient);
        }
        BIO_set_data(bio, reinterpret_cast<void*>(std::intptr_t(fd_)));
        SSL_set_bio(ssl_, bio, bio);
        checked_name_ =
            context_->options().server_name.empty() ? host : context_->options().server_name;
        // The certificate must be for the name we meant: without this check any certificate
        // the CA ever signed (for any host) would do.
        if (is_ip_address(checked_name_)) {
            if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), checked_name_.c_str()) != 1)
                throw stream_error("tls", "cannot check the address '" + checked_name_ + "'",
                                   error_kind::permanent);
        } else {
            SSL_set_hostflags(ssl_, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            if (SSL_set1_host(ssl_, checked_name_.c_str()) != 1 ||
                SSL_set_tlsext_host_name(ssl_, checked_name_.c_str()) != 1)
                throw stream_error("tls", "cannot check the name '" + checked_name_ + "'",
                                   error_kind::permanent);
        }
        if (const auto peer = peer_of(fd_); !peer.empty()) {
            session_key_ = checked_name_ + '\n' + peer;
            SSL_set_app_data(ssl_, &session_key_);
            if (SSL_SESSION* kept = context_->session_for(session_key_)) {
                SSL_set_session(ssl_, kept);  // takes its own reference
                SSL_SESSION_free(kept);
            }
        }
        for (;;) {
            ERR_clear_error();
            const int r = SSL_connect(ssl_);
            if (r == 1) break;
            const int e = SSL_get_error(ssl_, r);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                if (!wait_for(e, until))
                    throw stream_error("timeout",
                                       "the TLS handshake did not complete in time (is this a TLS "
                                       "port? a plain-text server waits for a request)",
                                       error_kind::transient);
                continue;
            }
            fail_tls(e, "the TLS handshake");
        }
    } catch (...) {
        if (ssl_ != nullptr) SSL_free(ssl_);
        ssl_ = nullptr;
        ::close(fd_);
        fd_ = -1;
        throw;
    }
}

tls_stream::~tls_stream() {
    if (ssl_ != nullptr) SSL_free(ssl_);  // no SSL_shutdown: see the header (fork)
    if (fd_ >= 0) ::close(fd_);
}

bool tls_stream::wait_for(int ssl_error, deadline until) {
    const short events = ssl_error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
    for (;;) {
        const auto left = std::chrono::ceil<milliseconds>(until - steady_clock::now());
        if (left <= milliseconds(0)) return false;
        pollfd p{fd_, events, 0};
        const int n = ::poll(&p, 1, int(std::min<long long>(left.count(), INT_MAX)));
        if (n > 0) return true;
        if (n < 0 && errno != EINTR)
            throw stream_error("errno " + std::to_string(errno),
                               std::string(std::strerror(errno)) + " (poll)", errno_kind(errno));
    }
}

// The plain socket's failure as the stream's error, for its reads and writes.
[[noreturn]] static void throw_socket_error(int err) {
    throw stream_error("errno " + std::to_string(err),
                       std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")",
                       errno_kind(err));
}

std::optional<std::size_t> tls_stream::read_some(char* data, std::size_t size, deadline until) {
    for (;;) {
        if (ssl_ == nullptr) {
            const ssize_t n = ::recv(fd_, data, size, 0);
            if (n >= 0) return std::size_t(n);
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                if (!wait_for(SSL_ERROR_WANT_READ, until)) return std::nullopt;
                continue;
            }
            throw_socket_error(errno);
        }
        ERR_clear_error();
        const int n = SSL_read(ssl_, data, int(std::min<std::size_t>(size, INT_MAX)));
        if (n > 0) return std::size_t(n);
        const int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            if (!wait_for(e, until)) return std::nullopt;
            continue;
        }
        fail_tls(e, "reading");
    }
}

bool tls_stream::write_all(std::string_view data, deadline until) {
    std::size_t sent = 0;
    while (sent < data.size()) {
        const char* from = data.data() + sent;
        const std::size_t left = data.size() - sent;
        if (ssl_ == nullptr) {
            const ssize_t n = ::send(fd_, from, left, MSG_NOSIGNAL);
            if (n >= 0) {
                sent += std::size_t(n);
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                if (!wait_for(SSL_ERROR_WANT_WRITE, until)) return false;
                continue;
            }
            throw_socket_error(errno);
        }
        ERR_clear_error();
        const int n = SSL_write(ssl_, from, int(std::min<std::size_t>(left, INT_MAX)));
        if (n > 0) {
            sent += std::size_t(n);
            continue;
        }
        const int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            if (!wait_for(e, until)) return false;
            continue;
        }
        if (e == SSL_ERROR_SYSCALL) fail_if_refused("sending");
        fail_tls(e, "sending");
    }
    return true;
}

bool tls_stream::buffered() const noexcept {
    return ssl_ != nullptr && SSL_pending(ssl_) > 0;
}

bool tls_stream::idle_has_input() noexcept {
    if (fd_ < 0 || buffered()) return true;
    // A few rounds at most: each either consumes records that carry no data or decides.
    for (int round = 0; round < 4; ++round) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 0) == 0) return false;
        if (ssl_ == nullptr || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return true;
        char byte;
        ERR_clear_error();
        const int n = SSL_peek(ssl_, &byte, 1);
        if (n > 0) return true;
        if (SSL_get_error(ssl_, n) != SSL_ERROR_WANT_READ) {
            ERR_clear_error();
            return true;
        }
    }
    return false;
}

void tls_stream::fail_if_refused(std::string_view step) {
    const int saved_errno = errno;
    char byte;
    ERR_clear_error();
    const int n = SSL_read(ssl_, &byte, 1);  // the socket is non-blocking: never waits
    if (n <= 0 && SSL_get_error(ssl_, n) == SSL_ERROR_SSL) fail_tls(SSL_ERROR_SSL, step);
    ERR_clear_error();
    errno = saved_errno;
}

void tls_stream::fail_tls(int ssl_error, std::string_view step) {
    const int saved_errno = errno;
    const long verify = ssl_ != nullptr ? SSL_get_verify_result(ssl_) : X509_V_OK;
    const unsigned long first = ERR_peek_error();
    std::string reasons = openssl_errors();
    if (verify != X509_V_OK) {
        std::string hint;
        if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH)
            hint = " (the server's certificate is not for '" + checked_name_ +
                   "': connect by a name the certificate has, or set server_name to one)";
        else if (verify == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
                 verify == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
                 verify == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
                 verify == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT)
            hint = " (unknown CA: is ca_file the CA that signed the server's certificate?)";
        throw stream_error("tls",
                           std::string(step) + " failed: the server's certificate was refused: " +
                               X509_verify_cert_error_string(verify) + hint,
                           error_kind::permanent);
    }
    if (ssl_error == SSL_ERROR_SYSCALL) {
        if (saved_errno != 0 && reasons.empty())
            throw stream_error("errno " + std::to_string(saved_errno),
                               std::string(step) + " failed: " + std::strerror(saved_errno) +
                                   " (errno " + std::to_string(saved_errno) + ")",
                               errno_kind(saved_errno));
        throw stream_error("eof",
                           std::string(step) + " failed: the server closed the connection" +
                               (step == "the TLS handshake" ? " (is this a TLS port?)" : ""),
                           error_kind::transient);
    }
    // An alert from the server: it refused us. Under TLS 1.3 a refused client certificate is
    // known only here, at the first read after the handshake.
    std::string hint;
    const int reason = ERR_GET_REASON(first);
    if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
        (context_ && context_->options().cert_file.empty() &&
         (reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE ||
          reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE)))
        hint = " (the server requires a client certificate: set cert_file and key_file)";
    else if (reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
             reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
             reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN)
        hint =
            " (the server does not accept our client certificate: is it signed by a CA the "
            "server trusts?)";
    else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG)
        hint = " (is this a TLS port? it answers in plain text)";
    throw stream_error("tls",
                       std::string(step) + " failed: the server refused the connection: " +
                           (reasons.empty() ? "TLS error" : reasons) + hint,
                       error_kind::permanent);
}

std::string openssl_version() {
    return OpenSSL_version(OPENSSL_VERSION);
}

}  // namespace locksmith::strategies::tls
