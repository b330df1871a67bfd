// SPDX-License-Identifier: MIT
// The faults run's checker: what the history log (history.hpp) shows, counted from the log only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace locksmith::faults {

struct verdict {
    long grants = 0;           // critical sections begun (B)
    long overlaps = 0;         // (a) critical sections that another process's section began in
    long stale_accepted = 0;   // (b) accepted writes with a token lower than one accepted before
    long stale_refused = 0;    //     writes the fenced resource refused
    long stale_grants = 0;     //     ... of sections no other process entered, their holder
                               //     never told of a loss: the lock granted a token below an
                               //     earlier grant's (not a lost lock)
    long lost_increments = 0;  // (c) increments an accepted write overwrote (or repeated)
    long accepted_writes = 0;
    std::int64_t final_value = 0;  //     the register after the last accepted write
    long lost_locks = 0;           // (d) critical sections another process entered while open
                                   //     (or whose write was refused and whose holder was told)
    long lost_untold = 0;          //     ... whose holder was never told (no L record)
    long acted_untold = 0;         //     ... and that read or wrote after the other's grant
                                   //     (a loss after the last action, released without a
                                   //     word, counts in lost_untold only)
    long told_late = 0;            //     ... told only after another process's grant (the
                                   //     partition nemesis: a holder must hear of its loss
                                   //     before the next grant to stop in time)
    double told_late_ms_max = 0;   //     ... the longest from that grant to the L record
    long told = 0;                 //     L records (told of a loss, whether or not it showed)
    long gave_up = 0;              //     acquisitions that ran out of their bound (T)
    long failed = 0;               //     acquisitions that failed with an error (F)
    long hangs = 0;                //     workers that did not stop when asked (H)
    long faults = 0;               //     fault windows (N begin)
    // (e) availability: grants per second before the first fault, inside fault windows, and after
    // the faults (between a fault's end and the next fault's begin, or the end of the run); the
    // time from a fault's end to the next grant (the longest), -1 when no fault ended.
    double grants_per_s_before = 0, grants_per_s_during = 0, grants_per_s_after = 0;
    double recover_ms_max = -1;
    long unrecovered = 0;  //     fault ends after which no process was granted again
    // Per fault end: ms to the next grant (-1: none), and ms from the fault's end to the next
    // fault's begin or the end of the log (how long a grant could have come).
    struct recovery {
        double ms = -1;
        double window_ms = 0;
    };
    std::vector<recovery> recoveries;

    // The fault ends after which no grant came within `bound_ms`, among those followed by at
    // least that long without a fault (the availability goal: after a server restart, the next
    // grant within one TTL or session timeout plus 1 s).
    long late_recoveries(double bound_ms) const;

    nlohmann::json to_json() const;
};

// Reads the log at `path`. Throws std::runtime_error for a line it cannot parse.
verdict check_history(const std::string& path);

}  // namespace locksmith::faults
