// SPDX-License-Identifier: MIT
// Writing a strategy outside this repository: a plugin, a shared library the config's `plugins`
// key names. The built-in modules (redis, memcached) are plugins too, loaded the same way.
//
//   locksmith_plugin       what the entry point returns: a plain C struct whose first field is
//                          the API version, the only field read before it is checked
//   locksmith_cxx_abi      the C++ ABI the plugin was compiled with, checked second
//   locksmith_host         the loading program's handle, given to the registration function
//   plugin_registrar       its C++ face: add(strategy_descriptor)
//   LOCKSMITH_PLUGIN(...)  defines the entry point, extern "C" locksmith_plugin_info()
//
// Modelled on LLVM's PassPlugin.h (llvmGetPassPluginInfo). A plugin:
//
//   #include <locksmith/author/plugin.hpp>
//   void add_mine(locksmith::plugin_registrar& r) { r.add(my_descriptor()); }
//   LOCKSMITH_PLUGIN(mine, "mine", "1.0", add_mine)
//
// Why a handle and not default_registry(): the locksmith command links the library statically,
// so a plugin that links liblocksmith.so sees a second copy of it, with its own registry. The
// strategy must land in the registry of the program that loads the plugin; that program hands
// its own over. Only the registration call crosses as C; the descriptor, its functions and
// the stores they make are C++, so the plugin must be built with the same C++ ABI as the
// program (same compiler family, standard library and library layout): locksmith_cxx_abi says
// which, and a plugin that differs is refused before any of its code runs.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include <locksmith/author/store.hpp>
#include <locksmith/registry.hpp>

// Bumped whenever locksmith_plugin, locksmith_host or what crosses them changes meaning.
// (Version 1 was the module entry point that wrote into the caller's struct before its version
// was checked; version 2 threw backend_error without its error_kind; version 3's key had no
// lifetime margin; version 4's store had no loss_fd; version 5's descriptor had no backends,
// its key no limit and its lock_status no permit counts.) Defined only when not yet defined, so
// that a test can build a plugin for another version.
#ifndef LOCKSMITH_PLUGIN_API_VERSION
#define LOCKSMITH_PLUGIN_API_VERSION 6
#endif

extern "C" {

// Facts about the compiler and types that decide whether C++ objects can cross between the
// plugin and the program. Compared field by field; any difference refuses the plugin.
struct locksmith_cxx_abi {
    std::uint32_t gxx_abi_version;   // __GXX_ABI_VERSION (0 when the compiler has none)
    std::uint32_t standard_library;  // 1 = libstdc++ old ABI, 2 = libstdc++ C++11 ABI,
                                     // 3 = libc++, 0 = other
    std::uint32_t json_major;        // nlohmann_json's major version
    std::uint32_t sizeof_string;
    std::uint32_t sizeof_function;
    std::uint32_t sizeof_shared_ptr;
    std::uint32_t sizeof_json;
    std::uint32_t sizeof_descriptor;  // locksmith::strategy_descriptor
    std::uint32_t sizeof_store;       // locksmith::store
};

struct locksmith_host {
    std::uint32_t api_version;  // the program's LOCKSMITH_PLUGIN_API_VERSION
    void* context;              // the program's; not for the plugin
    // Takes a copy of *descriptor, a locksmith::strategy_descriptor. Never throws; returns 0,
    // or non-zero when it could not (it has recorded why).
    int (*add_strategy)(struct locksmith_host* host, const void* descriptor);
    // Records why the plugin's registration failed; `message` is copied.
    void (*fail)(struct locksmith_host* host, const char* message);
};

struct locksmith_plugin {
    std::uint32_t api_version;  // LOCKSMITH_PLUGIN_API_VERSION; first, and checked first
    const char* name;           // the plugin's name, for messages and `locksmith strategies`
    const char* version;        // the plugin's own version
    const struct locksmith_cxx_abi* abi;
    // Registers the plugin's strategies through host->add_strategy; returns 0, or non-zero
    // after host->fail. Called once per program that loads the plugin.
    int (*register_strategies)(struct locksmith_host* host);
};

// The one symbol the program looks for: `locksmith_plugin_info`.
typedef const struct locksmith_plugin* (*locksmith_plugin_entry)(void);

}  // extern "C"

namespace locksmith {

// The ABI of the code that includes this header, fixed when it is compiled: the plugin's in a
// plugin, the program's in the loader.
constexpr locksmith_cxx_abi this_cxx_abi() noexcept {
    return {
#ifdef __GXX_ABI_VERSION
        __GXX_ABI_VERSION,
#else
        0,
#endif
#if defined(_LIBCPP_VERSION)
            3,
#elif defined(_GLIBCXX_USE_CXX11_ABI)
            _GLIBCXX_USE_CXX11_ABI ? 2u : 1u,
#else
        0,
#endif
            NLOHMANN_JSON_VERSION_MAJOR, sizeof(std::string), sizeof(std::function<void()>),
            sizeof(std::shared_ptr<int>), sizeof(nlohmann::json), sizeof(strategy_descriptor),
            sizeof(store),
    };
}

// How a plugin's registration function adds its strategies to the program that loads it.
class plugin_registrar {
  public:
    explicit plugin_registrar(locksmith_host* host) noexcept : host_(host) {}
    // Hands a copy of `d` to the program; it is registered (or the plugin refused as a whole)
    // when the registration function returns. The program sets `d.origin`.
    void add(const strategy_descriptor& d) {
        if (host_->add_strategy(host_, &d) != 0) throw registration_failed{};
    }

    struct registration_failed : std::exception {
        const char* what() const noexcept override { return "the program refused a strategy"; }
    };

  private:
    locksmith_host* host_;
};

namespace detail {
// Runs `add` with a registrar; no exception leaves the plugin: it becomes host->fail.
template <void (*add)(plugin_registrar&)>
int register_through(locksmith_host* host) noexcept {
    try {
        plugin_registrar registrar(host);
        add(registrar);
        return 0;
    } catch (const plugin_registrar::registration_failed&) {
        return 1;  // the host has recorded why
    } catch (const std::exception& e) {
        host->fail(host, e.what());
    } catch (...) {
        host->fail(host, "its registration threw an unknown exception");
    }
    return 1;
}
}  // namespace detail

}  // namespace locksmith

// Defines `locksmith_plugin_info_<ident>()`, returning the plugin's struct. Constant data only:
// calling it runs none of the plugin's C++ code. `plugin_name` and `plugin_version` are string
// literals (or constexpr const char*); `add` is a function void(locksmith::plugin_registrar&).
#define LOCKSMITH_DEFINE_PLUGIN(ident, plugin_name, plugin_version, add)                        \
    extern "C" const locksmith_plugin* locksmith_plugin_info_##ident(void) {                    \
        static constexpr locksmith_cxx_abi abi = ::locksmith::this_cxx_abi();                   \
        static constexpr locksmith_plugin info = {LOCKSMITH_PLUGIN_API_VERSION, plugin_name,    \
                                                  plugin_version, &abi,                         \
                                                  &::locksmith::detail::register_through<add>}; \
        return &info;                                                                           \
    }

// Defines the entry point the program looks for, forwarding to locksmith_plugin_info_<ident>.
// Separate so that several modules can be linked into one program (the locksmith command) by
// their own names.
#define LOCKSMITH_PLUGIN_ENTRY(ident)                                         \
    extern "C" __attribute__((visibility("default"))) const locksmith_plugin* \
    locksmith_plugin_info(void) {                                             \
        return locksmith_plugin_info_##ident();                               \
    }

// A plugin: its struct and its entry point.
#define LOCKSMITH_PLUGIN(ident, plugin_name, plugin_version, add)    \
    LOCKSMITH_DEFINE_PLUGIN(ident, plugin_name, plugin_version, add) \
    LOCKSMITH_PLUGIN_ENTRY(ident)
