// SPDX-License-Identifier: MIT
// Why a strategy lacks a capability, where that is a decision a user could not guess: said after
// "lacks ..." by explain, a pinned request's refusal and config check (registry.cpp).
#pragma once

#include <string>

#include <locksmith/registry.hpp>

namespace locksmith {

// "" when there is nothing to tell. combined has no `counting`: a majority quorum of counting
// members does not keep "at most N" (README, "Why combined does not count").
std::string lacks_reason(const strategy_descriptor& d, capability missing);

}  // namespace locksmith
