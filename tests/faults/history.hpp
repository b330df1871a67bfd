// SPDX-License-Identifier: MIT
// The faults run's history: the resource the workers act on, and the log it keeps.
//
// The resource is a register in a file plus an append-only log. Its own atomicity comes from a
// private flock on the register file: that is the storage's concurrency control, not the lock
// under test, so two holders inside the critical section at once both succeed in their
// operations and the log shows it. Every record is one line of fewer than PIPE_BUF bytes written
// with one write(2) to an O_APPEND descriptor, so records of concurrent processes never mix.
// Times are CLOCK_MONOTONIC (one clock for every process of the host).
//
// Record: "<t_ns> <pid> <worker> <seq> <kind> <a> <b> <c>", kind one of
//   B  a critical section begins (after the grant): a = fencing token or -1; c = the `run`
//      variant's locksmith process (0 in the library variant)
//   R  register read: a = value
//   W  register write: a = token or -1, b = value written, c = value before the write;
//      kind W is an accepted write, kind V one the fenced resource refused (token lower than
//      the highest accepted: Kleppmann's storage check)
//   E  the critical section ends (before the release)
//   L  the holder was told its lock is lost (on_lost, or fencing_token() found it expired)
//   T  an acquisition gave up (try_lock_for's bound); F one failed with an error (the `run`
//      variant: L for locksmith's lost-lock exit code, F with a = any other failing code)
//   G  is_acquired() at the end of the section said no; X it threw (for reading a history:
//      neither counts as told, only L does)
//   K  the nemesis is about to SIGKILL pid (logged before the signal: the victim can act no
//      later than this record); S / C  SIGSTOP / SIGCONT of pid. For K, S and C, a is the
//      process signalled when it is not pid: the `run` variant's locksmith (K), its process
//      group as a negative number (S, C)
//   P  the `run` variant: worker pid started `locksmith run` as process a
//   N  a fault window: a = 1 begins, 0 ends; H  pid did not stop when asked (a hang)
#pragma once

#include <cstdint>
#include <string>

namespace locksmith::faults {

std::int64_t monotonic_ns();

class history_log {
  public:
    explicit history_log(const std::string& path);
    ~history_log();
    history_log(const history_log&) = delete;
    history_log& operator=(const history_log&) = delete;
    void record(long pid, int worker, long seq, char kind, std::int64_t a = 0, std::int64_t b = 0,
                std::int64_t c = 0);

  private:
    int fd_ = -1;
};

// The register. `fenced`: writes carrying a token lower than the highest accepted are refused.
class resource {
  public:
    resource(const std::string& register_path, history_log& log, bool fenced);
    ~resource();
    resource(const resource&) = delete;
    resource& operator=(const resource&) = delete;
    // Creates the register with value 0 (the orchestrator, before the workers start).
    static void initialise(const std::string& register_path);

    // `pid`: the process the records name (0: this one; the `run` variant's client acts for
    // the worker that started its `locksmith run`).
    std::int64_t read(int worker, long seq, long pid = 0);
    // Returns whether the write was accepted.
    bool write(int worker, long seq, std::int64_t token, std::int64_t value, long pid = 0);

  private:
    struct state {
        std::int64_t value = 0;
        std::int64_t highest_token = -1;
    };
    state load() const;
    int fd_ = -1;
    history_log& log_;
    bool fenced_;
};

}  // namespace locksmith::faults
