// SPDX-License-Identifier: MIT
// Everything an application needs: include this one header.
#pragma once

#include <locksmith/author/store.hpp>
#include <locksmith/backoff.hpp>
#include <locksmith/capability.hpp>
#include <locksmith/config.hpp>
#include <locksmith/errors.hpp>
#include <locksmith/key.hpp>
#include <locksmith/lock_factory.hpp>
#include <locksmith/named_lock.hpp>
#include <locksmith/named_semaphore.hpp>
#include <locksmith/registry.hpp>
#include <locksmith/version.hpp>
