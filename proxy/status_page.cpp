#include "proxy/status_page.hpp"

namespace sluice::proxy {

namespace {
// Generated from proxy/status.html: constexpr char kStatusHtml[] = R"sluice_html(...)sluice_html";
#include "proxy/status_html.inc"
}  // namespace

std::string_view status_page_html() { return {kStatusHtml, sizeof kStatusHtml - 1}; }

}  // namespace sluice::proxy
