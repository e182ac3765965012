// Bearer tokens for the lock and admin listeners (auth.tokens_file / auth.tokens_env, and the
// admin_ variants). Parsed and validated here so that start-up, --check-config and a SIGHUP reload
// all give the same errors; the HTTP layer only ever sees the parsed entries.
//
// Format (file, or the value of the env var), one token per line:
//   # comments and blank lines are ignored
//   3f9a0c...                             a token allowed on every lock
//   77be41... prefixes=orders-,invoices-  a token limited to lock names starting with these
// Tokens are RFC 6750 b64token strings of 16..4096 characters. Error messages name the key and the
// line, never the token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/token_entry.h"

namespace sidelock::config {

using TokenEntry = sidelock::TokenEntry;

/// Where one set of tokens comes from. Both empty: no tokens (none required).
struct TokenSource {
  std::string file;  // read at start-up and on every SIGHUP
  std::string env;   // name of an environment variable; read at start-up and on SIGHUP
  std::string key;   // "auth.tokens" or "auth.admin_tokens": the key prefix in messages
  bool configured() const { return !file.empty() || !env.empty(); }
};

/// Parses the text of a token file. `origin` names it in errors and labels
/// ("auth.tokens_file"). Rejects malformed lines, too-short tokens and duplicates.
StatusOr<std::vector<TokenEntry>> parseTokens(std::string_view text, const std::string& origin);

/// Reads and parses every token of `source` (file first, then env; both may be set). A source
/// that is configured but yields no token at all is an error: "require a token" with no token
/// would lock every client out.
StatusOr<std::vector<TokenEntry>> loadTokens(const TokenSource& source);

}  // namespace sidelock::config
