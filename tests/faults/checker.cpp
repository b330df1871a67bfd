// SPDX-License-Identifier: MIT
#include "faults/checker.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace locksmith::faults {

nlohmann::json verdict::to_json() const {
    return {{"grants", grants},
            {"overlaps", overlaps},
            {"stale_accepted", stale_accepted},
            {"stale_refused", stale_refused},
            {"stale_grants", stale_grants},
            {"lost_increments", lost_increments},
            {"accepted_writes", accepted_writes},
            {"final_value", final_value},
            {"lost_locks", lost_locks},
            {"lost_untold", lost_untold},
            {"acted_untold", acted_untold},
            {"told_late", told_late},
            {"told_late_ms_max", told_late_ms_max},
            {"told", told},
            {"gave_up", gave_up},
            {"failed", failed},
            {"hangs", hangs},
            {"faults", faults},
            {"grants_per_s_before", grants_per_s_before},
            {"grants_per_s_during", grants_per_s_during},
            {"grants_per_s_after", grants_per_s_after},
            {"recover_ms_max", recover_ms_max},
            {"unrecovered", unrecovered}};
}

long verdict::late_recoveries(double bound_ms) const {
    return long(std::count_if(recoveries.begin(), recoveries.end(), [&](const recovery& r) {
        return r.ms > bound_ms || (r.ms < 0 && r.window_ms >= bound_ms);
    }));
}

namespace {

struct record {
    std::int64_t t = 0;
    long pid = 0;
    int worker = 0;
    long seq = 0;
    char kind = 0;
    std::int64_t a = 0, b = 0, c = 0;
};

using section_id = std::pair<long, long>;  // (pid, seq): one acquisition of one process

struct section {
    section_id id;
    std::int64_t begin = 0;
    std::int64_t end = std::numeric_limits<std::int64_t>::max();
    bool closed = false;
    std::int64_t last_action = 0;  // the last R, W or V of the section
    std::int64_t locksmith = 0;    // the `run` variant: the locksmith process that granted it
};

}  // namespace

verdict check_history(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::vector<record> log;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        std::istringstream fields(line);
        record r;
        long long t, a, b, c;
        if (!(fields >> t >> r.pid >> r.worker >> r.seq >> r.kind >> a >> b >> c))
            throw std::runtime_error("unparsable history line: " + line);
        r.t = t, r.a = a, r.b = b, r.c = c;
        log.push_back(r);
    }
    // Appends of several processes reach the file in the order of their write(2) calls, which
    // is not always the order of the times they read just before: sort by time (stable, so that
    // the W records, written under the storage lock, keep the register's order among equals).
    std::stable_sort(log.begin(), log.end(),
                     [](const record& x, const record& y) { return x.t < y.t; });

    verdict v;
    std::map<section_id, section> sections;
    // pid -> its K records: time, and the process signalled (the `run` variant's locksmith)
    std::map<long, std::vector<std::pair<std::int64_t, std::int64_t>>> killed_at;
    std::set<section_id> refused;
    std::map<section_id, std::int64_t> told;                     // -> the first L
    std::vector<std::pair<std::int64_t, std::int64_t>> windows;  // fault windows
    std::int64_t first = log.empty() ? 0 : log.front().t, last = log.empty() ? 0 : log.back().t;
    std::int64_t highest_token = -1;
    bool have_writes = false;
    for (const auto& r : log) {
        const section_id id{r.pid, r.seq};
        switch (r.kind) {
            case 'B':
                ++v.grants;
                sections[id] = section{id, r.t};
                sections[id].locksmith = r.c;
                break;
            case 'R':
                if (auto s = sections.find(id); s != sections.end()) s->second.last_action = r.t;
                break;
            case 'E':
                if (auto s = sections.find(id); s != sections.end() && !s->second.closed)
                    s->second.end = r.t, s->second.closed = true;
                break;
            case 'W':
                if (auto s = sections.find(id); s != sections.end()) s->second.last_action = r.t;
                ++v.accepted_writes;
                // (b): recomputed here, whatever the resource decided.
                if (r.a >= 0 && r.a < highest_token) ++v.stale_accepted;
                highest_token = std::max(highest_token, r.a);
                // (c): a write of anything but the value before it + 1 lost (or repeated)
                // increments.
                if (r.b != r.c + 1) v.lost_increments += std::max<std::int64_t>(1, r.c + 1 - r.b);
                v.final_value = r.b;
                have_writes = true;
                break;
            case 'V':
                if (auto s = sections.find(id); s != sections.end()) s->second.last_action = r.t;
                ++v.stale_refused;
                refused.insert(id);
                break;
            case 'L':
                ++v.told;
                told.emplace(id, r.t);
                break;
            case 'T':
                ++v.gave_up;
                break;
            case 'F':
                ++v.failed;
                break;
            case 'H':
                ++v.hangs;
                break;
            case 'K':
                killed_at[r.pid].emplace_back(r.t, r.a);
                break;
            case 'N':
                if (r.a == 1) {
                    ++v.faults;
                    windows.emplace_back(r.t, last);
                } else if (!windows.empty()) {
                    windows.back().second = r.t;
                }
                break;
            default:
                break;
        }
    }
    (void)have_writes;
    // A section without E ended when its process was killed (the K record precedes the signal),
    // or runs to the end of the log (a process that never came back: every later grant
    // overlaps it).
    std::vector<section> all;
    for (auto& [id, s] : sections) {
        if (!s.closed) {
            // The `run` variant's worker outlives the locksmith processes the nemesis kills
            // and goes on with other sections: the kill of the section's own locksmith counts.
            s.end = last;
            if (auto k = killed_at.find(id.first); k != killed_at.end())
                for (const auto& [t, signalled] : k->second)
                    if (s.locksmith == 0 || signalled == s.locksmith) s.end = std::max(t, s.begin);
        }
        all.push_back(s);
    }
    std::sort(all.begin(), all.end(),
              [](const section& x, const section& y) { return x.begin < y.begin; });
    // (a) and (d): a section that another process's section began inside lost the lock then.
    // A lost section acted on the lost lock when it read or wrote after the other's grant, or
    // when its write was refused.
    std::set<section_id> lost, acted(refused.begin(), refused.end());
    std::map<section_id, std::int64_t> lost_at;  // the first grant inside the section
    std::vector<const section*> open;
    for (const auto& s : all) {
        std::erase_if(open, [&](const section* o) { return o->end <= s.begin; });
        for (const auto* o : open)
            if (o->id.first != s.id.first && lost.insert(o->id).second) {
                ++v.overlaps;
                lost_at[o->id] = s.begin;
                if (o->last_action > s.begin) acted.insert(o->id);
            }
        open.push_back(&s);
    }
    // A refused write of a section that nobody entered, whose holder was never told of a loss:
    // it held the lock alone, with a token below one accepted earlier, which only an earlier
    // grant can have drawn. The lock's fault, not a loss. (Told, it is a loss after all: a grant
    // that lapsed before its holder, stalled for a TTL, logged the section's beginning.)
    for (const auto& id : refused)
        if (!lost.count(id)) {
            if (told.count(id))
                lost.insert(id);
            else
                ++v.stale_grants;
        }
    v.lost_locks = long(lost.size());
    for (const auto& [id, at] : lost_at)
        if (auto t = told.find(id); t != told.end() && t->second > at) {
            ++v.told_late;
            v.told_late_ms_max = std::max(v.told_late_ms_max, double(t->second - at) / 1e6);
        }
    for (const auto& id : lost)
        if (!told.count(id)) {
            ++v.lost_untold;
            if (acted.count(id)) ++v.acted_untold;
        }

    // (e)
    std::vector<std::int64_t> grants;
    for (const auto& s : all) grants.push_back(s.begin);
    auto count_in = [&](std::int64_t from, std::int64_t to) {
        return std::lower_bound(grants.begin(), grants.end(), to) -
               std::lower_bound(grants.begin(), grants.end(), from);
    };
    auto rate = [](long n, std::int64_t ns) { return ns > 0 ? double(n) * 1e9 / double(ns) : 0.0; };
    if (windows.empty()) {
        v.grants_per_s_before = rate(long(grants.size()), last - first);
    } else {
        v.grants_per_s_before =
            rate(long(count_in(first, windows.front().first)), windows.front().first - first);
        long during = 0, after = 0;
        std::int64_t during_ns = 0, after_ns = 0;
        for (std::size_t i = 0; i < windows.size(); ++i) {
            const auto [from, to] = windows[i];
            const auto next = i + 1 < windows.size() ? windows[i + 1].first : last;
            during += long(count_in(from, to));
            during_ns += to - from;
            after += long(count_in(to, next));
            after_ns += next - to;
            auto g = std::lower_bound(grants.begin(), grants.end(), to);
            verdict::recovery r{-1, double(next - to) / 1e6};
            if (g == grants.end() || *g >= next) {
                ++v.unrecovered;
            } else {
                r.ms = double(*g - to) / 1e6;
                v.recover_ms_max = std::max(v.recover_ms_max, r.ms);
            }
            v.recoveries.push_back(r);
        }
        v.grants_per_s_during = rate(during, during_ns);
        v.grants_per_s_after = rate(after, after_ns);
    }
    return v;
}

}  // namespace locksmith::faults
