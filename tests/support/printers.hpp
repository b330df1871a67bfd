// SPDX-License-Identifier: MIT
// Lets BOOST_TEST print locksmith's enums in failure messages ("exclusive|noblock" instead of a
// compile error). Found by ADL, so include this before using BOOST_TEST on these types.
#pragma once

#include <optional>
#include <ostream>

#include <locksmith/author/store.hpp>
#include <locksmith/capability.hpp>

namespace locksmith {

inline std::ostream& boost_test_print_type(std::ostream& os, capability c) {
    return os << to_string(c);
}
inline std::ostream& boost_test_print_type(std::ostream& os, lock_mode m) {
    return os << to_string(m);
}
inline std::ostream& boost_test_print_type(std::ostream& os, lock_status::state s) {
    return os << to_string(s);
}

inline std::ostream& boost_test_print_type(std::ostream& os, const std::optional<lock_mode>& m) {
    if (!m) return os << "nothing";
    return os << to_string(*m);
}
inline std::ostream& boost_test_print_type(std::ostream& os, const std::optional<capability>& c) {
    if (!c) return os << "nullopt";
    return os << to_string(*c);
}

}  // namespace locksmith
