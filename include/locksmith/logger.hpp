// SPDX-License-Identifier: MIT
// The logger hook: where a program receives locksmith's diagnostics (Symfony's LoggerAware
// stores). Nothing is logged unless the program sets a sink, on a lock_factory
// (lock_factory::set_logger, passed on to the locks it creates) or in lock_options::logger.
//
//   log_level   debug < info < warning < error
//   log_record  one event: level, a stable event id, one sentence, structured fields
//   log_sink    what a program implements: one function, log()
//
// The events (ids are stable; the sentences may change):
//   error    acquire_failed       acquiring failed (backend error, or the grant came back expired);
//                                 the exception still reaches the caller
//   error    release_failed       releasing failed; unlock() also reports it to its error
//                                 handler, release() throws it
//   error    refresh_failed       refresh() failed or found the lock no longer this owner's
//   error    lock_lost            the renewal thread found the lock gone, or its renewals failed
//                                 until the TTL ran out
//   warning  renewal_failed       one renewal failed; retried while the grant has time left
//   warning  wait_outage          a wait met a transient server error (a restart, a failover) and
//                                 rides it out until its deadline; once per wait
//   warning  fallback             the chosen strategy could not start; the next candidate was used
//   warning  locking_off          a lock was created on a strategy that excludes nothing (`null`)
//   info     slow_wait            a wait has lasted the factory's slow-wait threshold and goes on
//   info     waited               a wait that was logged as slow ended (acquired or gave up);
//                                 duration = the whole wait
//   debug    renewed              the renewal thread renewed a lock; duration = the store call
//   debug    acquired             a lock was granted (every successful acquire, as Symfony's Lock)
//   debug    released             a release succeeded (unlock(), release(), the destructor; also
//                                 a release of a lock that was not held, as Symfony's)
//
// No record carries a secret: endpoints are written through redact_url, and messages are the
// library's own errors, which never quote one.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace locksmith {

enum class log_level { debug, info, warning, error };

// "debug", "info", "warning", "error".
std::string_view to_string(log_level level) noexcept;

struct log_record {
    log_level level = log_level::info;
    std::string event;     // a stable id from the list above
    std::string message;   // one sentence for a human, naming the lock and the strategy
    std::string name;      // the lock's name (any bytes); empty when not about one lock
    std::string strategy;  // the strategy concerned; empty when none
    // How long the operation or the wait took; nullopt when not measured.
    std::optional<std::chrono::nanoseconds> duration;
    std::string error;  // the failure's what(); empty when the record is not about one
};

class log_sink {
  public:
    virtual ~log_sink() = default;
    // Called on the thread that did the operation, or on the process's renewal thread, so it
    // must be thread-safe. It may be called while the lock it is about is busy: it must not call
    // back into that lock object. An exception it throws is dropped (a lock operation never
    // fails because logging did).
    virtual void log(const log_record& record) = 0;
};

}  // namespace locksmith
