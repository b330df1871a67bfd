// SPDX-License-Identifier: MIT
// The exceptions locksmith throws: one hierarchy under locksmith::error.
//
//   error                   base of all; what() is a complete sentence naming what is wrong
//   config_error            a configuration problem; carries a stable id, the JSON pointer of the
//                           offending value and, for JSON syntax errors, line and column
//   no_strategy_error       no registered strategy can serve the requested capabilities; the
//                           message lists every strategy passed over and why
//   acquire_error           acquiring (or refreshing) failed for a reason other than contention
//   release_error           releasing failed, or the lock was still held afterwards
//   expired_error           the lock's TTL ran out before the operation finished
//   backend_error           the backend failed; keeps the native code (errno, Redis reply,
//   SQLSTATE…)
//                           and whether trying again may help (error_kind)
//   invalid_argument_error  a bad argument (empty name, non-positive TTL, unknown capability…)
//   not_serializable_error  the key of a strategy without `serializable` was serialized
//
// Contention is not an error: a non-blocking acquire that finds the lock held returns false.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace locksmith {

class error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class config_error : public error {
  public:
    // `id` is stable across versions ("config.unknown_key", "config.type", …); `pointer` is a
    // JSON pointer ("/strategies/file/priority"), empty for the whole document.
    config_error(std::string id, std::string pointer, const std::string& message,
                 std::size_t line = 0, std::size_t column = 0);
    const std::string& id() const noexcept { return id_; }
    const std::string& pointer() const noexcept { return pointer_; }
    // 1-based position of a JSON syntax error; 0 when the error is not about syntax.
    std::size_t line() const noexcept { return line_; }
    std::size_t column() const noexcept { return column_; }

  private:
    std::string id_;
    std::string pointer_;
    std::size_t line_;
    std::size_t column_;
};

class no_strategy_error : public error {
  public:
    using error::error;
};

class acquire_error : public error {
  public:
    using error::error;
};

class release_error : public error {
  public:
    using error::error;
};

class expired_error : public error {
  public:
    using error::error;
};

// Whether the same operation may succeed when tried again, as redis-plus-plus splits its errors
// (IoError, TimeoutError, ClosedError against ReplyError, ProtoError).
enum class error_kind {
    unknown,    // the thrower did not say (backend_error's three-argument constructor)
    transient,  // may succeed later with nobody acting: connection refused or reset, a timeout,
                // a server that is loading or busy, a full pool, a race lost
    permanent,  // fails again until someone acts: wrong password or permission, a bad option, a
                // script error, a server of the wrong kind or version
};

class backend_error : public error {
  public:
    // `backend` is the strategy name; `native_code` the backend's own code as text, for display
    // ("errno 13", "NOSCRIPT", "SQLSTATE 40001"); `kind` whether retrying may help.
    backend_error(std::string backend, std::string native_code, const std::string& message,
                  error_kind kind);
    // The same with error_kind::unknown.
    backend_error(std::string backend, std::string native_code, const std::string& message);
    const std::string& backend() const noexcept { return backend_; }
    const std::string& native_code() const noexcept { return native_code_; }
    error_kind kind() const noexcept { return kind_; }
    bool transient() const noexcept { return kind_ == error_kind::transient; }

  private:
    std::string backend_;
    std::string native_code_;
    error_kind kind_ = error_kind::unknown;
};

class invalid_argument_error : public error {
  public:
    using error::error;
};

class not_serializable_error : public error {
  public:
    using error::error;
};

// Whether an operation that failed with errno `err` may succeed when tried again: transient for
// a refused, reset or unreachable connection, a timeout, an interrupted or busy call, and
// exhausted descriptors, buffers or memory; permanent for anything else (permission, a missing
// or wrong file, an invalid argument).
error_kind errno_kind(int err) noexcept;

// Throws backend_error for errno `err`: "<strategy>: <what>: <strerror> (errno N)", native code
// "errno N", kind errno_kind(err).
[[noreturn]] void throw_errno(const std::string& strategy, const std::string& what, int err);

}  // namespace locksmith
