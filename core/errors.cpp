// SPDX-License-Identifier: MIT
#include <locksmith/errors.hpp>

#include <cerrno>
#include <cstring>

namespace locksmith {

config_error::config_error(std::string id, std::string pointer, const std::string& message,
                           std::size_t line, std::size_t column)
    : error(message),
      id_(std::move(id)),
      pointer_(std::move(pointer)),
      line_(line),
      column_(column) {}

backend_error::backend_error(std::string backend, std::string native_code,
                             const std::string& message, error_kind kind)
    : error(message),
      backend_(std::move(backend)),
      native_code_(std::move(native_code)),
      kind_(kind) {}

backend_error::backend_error(std::string backend, std::string native_code,
                             const std::string& message)
    : backend_error(std::move(backend), std::move(native_code), message, error_kind::unknown) {}

error_kind errno_kind(int err) noexcept {
    switch (err) {
        case EAGAIN:
#if EWOULDBLOCK != EAGAIN
        case EWOULDBLOCK:
#endif
        case EINTR:
        case EBUSY:
        case ETIMEDOUT:
        case ECONNREFUSED:
        case ECONNRESET:
        case ECONNABORTED:
        case EPIPE:
        case ENETDOWN:
        case ENETUNREACH:
        case ENETRESET:
        case EHOSTDOWN:
        case EHOSTUNREACH:
        case EINPROGRESS:
        case EALREADY:
        case EMFILE:
        case ENFILE:
        case ENOBUFS:
        case ENOMEM:
            return error_kind::transient;
        default:
            return error_kind::permanent;
    }
}

void throw_errno(const std::string& strategy, const std::string& what, int err) {
    throw backend_error(
        strategy, "errno " + std::to_string(err),
        strategy + ": " + what + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")",
        errno_kind(err));
}

}  // namespace locksmith
