// The library's version.
#pragma once

namespace locksmith {
inline constexpr const char* version = "0.1.0";
}
