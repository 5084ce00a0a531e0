#pragma once
// The status page: one self-contained HTML file (proxy/status.html, inline CSS
// and JS, no external resources) that the admin listener serves at GET /. It
// polls /admin/state every second and draws the last minute in the browser, so
// the proxy keeps no history for it. The file is embedded at build time
// (proxy/CMakeLists.txt), so the HTML has one source of truth.
#include <string_view>

namespace sluice::proxy {

// The page's bytes, valid for the life of the process.
std::string_view status_page_html();

inline constexpr std::string_view kStatusPageContentType = "text/html; charset=utf-8";

// The page needs nothing but itself and same-origin fetches of /admin/state.
inline constexpr std::string_view kStatusPageCsp =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace sluice::proxy
