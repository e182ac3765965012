#include "common/percent_encoding.h"

#include <algorithm>
#include <array>

namespace sidelock {
namespace {

using KeepTable = std::array<bool, 256>;

constexpr KeepTable makeTable(PercentKeep keep) {
  KeepTable table{};
  for (int c = 0; c < 256; ++c) {
    if (keep == PercentKeep::kGrpcMessage) {
      table[c] = c >= 0x20 && c <= 0x7E && c != '%';
      continue;
    }
    table[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '.' || c == '_' || c == '~' ||
               (keep == PercentKeep::kPathSegment && (c == ':' || c == '@'));
  }
  return table;
}

constexpr KeepTable kUnreservedTable = makeTable(PercentKeep::kUnreserved);
constexpr KeepTable kPathSegmentTable = makeTable(PercentKeep::kPathSegment);
constexpr KeepTable kGrpcMessageTable = makeTable(PercentKeep::kGrpcMessage);

const KeepTable& tableOf(PercentKeep keep) {
  switch (keep) {
    case PercentKeep::kUnreserved:
      return kUnreservedTable;
    case PercentKeep::kPathSegment:
      return kPathSegmentTable;
    case PercentKeep::kGrpcMessage:
      return kGrpcMessageTable;
  }
  return kUnreservedTable;
}

}  // namespace

void appendPercentEncoded(std::string& out, std::string_view text, PercentKeep keep) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const KeepTable& kept = tableOf(keep);
  const auto first = std::find_if(text.begin(), text.end(),
                                  [&kept](char c) { return !kept[static_cast<unsigned char>(c)]; });
  if (first == text.end()) {  // the usual lock name
    out.append(text);
    return;
  }
  out.reserve(out.size() + text.size() + 2 * static_cast<size_t>(text.end() - first));
  out.append(text.begin(), first);
  for (auto it = first; it != text.end(); ++it) {
    const auto c = static_cast<unsigned char>(*it);
    if (kept[c]) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
}

std::string percentEncode(std::string_view text, PercentKeep keep) {
  std::string out;
  appendPercentEncoded(out, text, keep);
  return out;
}

}  // namespace sidelock
